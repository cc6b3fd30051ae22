"""Each rank's microbatches are the samples Megatron-LM's own sampler gives it
(megatron/training/datasets/data_samplers.py MegatronPretrainingSampler), from the first step and
from a resumed one."""

import itertools

import pytest
import torch

from launcher.data.datasets import microbatches


class Numbered:
    """Sample i is the token i: a microbatch's tokens are its sample indices."""

    def __getitem__(self, index):
        return {"tokens": [index], "labels": [index], "loss_mask": [1.0]}


@pytest.mark.parametrize("micro, global_batch, dp, first_step",
                         [(2, 8, 2, 1), (1, 6, 3, 1), (2, 8, 2, 4), (4, 8, 1, 2)])
def test_a_rank_reads_what_megatron_lms_sampler_gives_it(micro, global_batch, dp, first_step):
    from megatron.training.datasets.data_samplers import MegatronPretrainingSampler

    per_step = global_batch // (micro * dp)  # microbatches a rank reads a step
    for rank in range(dp):
        ours = microbatches(Numbered(), micro, global_batch, rank, dp, False,
                            torch.device("cpu"), first_step)
        theirs = iter(MegatronPretrainingSampler(
            total_samples=100 * global_batch, consumed_samples=(first_step - 1) * global_batch,
            micro_batch_size=micro, data_parallel_rank=rank, data_parallel_size=dp))
        for batch, indices in itertools.islice(zip(ours, theirs), 3 * per_step):
            assert batch["tokens"].flatten().tolist() == indices
