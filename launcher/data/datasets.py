"""Training and validation data: a dataset indexed by global sample number, cut into this
rank's microbatches step by step.

Two sources. `mock`: seeded synthetic sequences with something to learn (sample i counts up from
a random token by a random stride, both drawn from a generator seeded with (seed, i)).
`indexed`: megatron-core's GPTDataset over indexed datasets (`launch-prepare` writes them),
blended by weight and split into train/valid by megatron-core's BlendedMegatronDatasetBuilder.
Every rank derives its samples from the global sample index, so a 2-rank run sees exactly the
global batches of a 1-rank run, and a resumed run continues where its checkpoint was.
"""

import torch

VALID_SEED_OFFSET = 7919  # mock validation samples come from another stream than training's


class MockDataset:
    """Sample i: seq_length + 1 tokens counting up from a random start by a random stride."""

    def __init__(self, seed: int, seq_length: int, vocab_size: int):
        self.seed, self.seq_length, self.vocab_size = seed, seq_length, vocab_size

    def __getitem__(self, index: int) -> dict:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        start = torch.randint(0, self.vocab_size, (1,), generator=gen)
        stride = torch.randint(1, 8, (1,), generator=gen)
        sample = (start + stride * torch.arange(self.seq_length + 1)) % self.vocab_size
        return {"tokens": sample[:-1], "labels": sample[1:],
                "loss_mask": torch.ones(self.seq_length)}


def microbatches(dataset, micro_batch_size: int, global_batch_size: int, dp_rank: int,
                 dp_size: int, fixed_batch: bool, device: torch.device, first_step: int = 1):
    """Yields this rank's microbatches forever, its share of each global batch from optimizer
    step `first_step` on, in Megatron-LM's order (megatron/training/datasets/data_samplers.py
    MegatronPretrainingSampler): the global batch is read in runs of micro x dp samples, and rank
    r's microbatch is the r-th micro_batch_size samples of each run. A microbatch is a dict, as
    Megatron-LM's get_batch reads one and as megatron-core's FullCudaGraphWrapper requires (its
    StaticBufferLoader copies dicts into the graph's static buffers): `tokens`, `labels`,
    `loss_mask`, `position_ids`."""
    per_run = micro_batch_size * dp_size
    step = first_step - 1
    while True:
        base = 0 if fixed_batch else step * global_batch_size
        for run in range(0, global_batch_size, per_run):
            items = [dataset[base + run + dp_rank * micro_batch_size + j]
                     for j in range(micro_batch_size)]
            tokens, labels, loss_mask = (
                torch.stack([torch.as_tensor(item[key]) for item in items]).to(device)
                for key in ("tokens", "labels", "loss_mask"))
            seq_length = tokens.shape[1]
            positions = torch.arange(seq_length, device=device).expand(micro_batch_size, -1)
            yield {"tokens": tokens.long(), "labels": labels.long(),
                   "loss_mask": loss_mask.float(), "position_ids": positions.contiguous()}
        step += 1


def build_datasets(data, seq_length: int, vocab_size: int, seed: int, num_samples: tuple,
                   cache_dir: str) -> tuple:
    """(train, valid) datasets indexed by global sample number; num_samples = (train, valid)."""
    if data.kind.value == "mock":
        return (MockDataset(seed, seq_length, vocab_size),
                MockDataset(seed + VALID_SEED_OFFSET, seq_length, vocab_size))
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    from launcher.data.check import tokenizer_of

    prefixes, weights = data.blend()
    config = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, blend=(prefixes, weights),
        split=data.split, tokenizer=tokenizer_of(prefixes[0]), path_to_cache=cache_dir,
        reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
        create_attention_mask=False)
    train, valid, _ = BlendedMegatronDatasetBuilder(
        GPTDataset, [num_samples[0], num_samples[1], 0], lambda: True, config).build()
    return train, valid
