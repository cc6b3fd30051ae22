"""2 ranks over gloo with optim_grads_params against the 1-rank run of the same global batch."""

import pytest

from conftest import read_run, run_launch

pytestmark = pytest.mark.distributed


def test_two_ranks_shard_and_match_one_rank(tmp_path):
    common = ["+recipe=tiny_cpu", "train.steps=8", "logging.wandb.mode=disabled"]
    one, one_dir = run_launch(tmp_path / "one", *common)
    two, two_dir = run_launch(tmp_path / "two", *common, "runtime.nproc_per_node=2")
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    s1, steps1 = read_run(one_dir)
    s2, steps2 = read_run(two_dir)
    assert s2["world_size"] == 2
    # Each rank holds half the weights: rank 0's shard is half of the 1-rank (whole) buffer.
    assert s2["rank0_weight_shard_numel"] * 2 == pytest.approx(s1["rank0_weight_shard_numel"],
                                                               rel=0.01)
    for a, b in zip(steps1, steps2):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3)
