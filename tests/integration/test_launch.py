"""`launch` as a subprocess on the tiny CPU recipe: what a user sees and what lands on disk."""

import math

import pytest

from conftest import read_run

pytestmark = pytest.mark.integration

FIXED = ["+recipe=tiny_cpu", "train.steps=20", "data.fixed_batch=true"]


@pytest.mark.parametrize("prefetch,expected", [(True, 20), (False, 0)])
def test_tiny_run_trains_and_counts_first_group_prefetches(launch, prefetch, expected):
    proc, run_dir = launch(*FIXED, f"fsdp.prefetch_first_param_group={str(prefetch).lower()}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, steps = read_run(run_dir)
    assert summary["status"] == "ok" and summary["backend"] == "gloo"
    assert summary["world_size"] == 1 and summary["wrapper"] == "FullyShardedDataParallel"
    assert summary["megatron_core_version"] == "0.19.2"
    assert summary["steady_state_steps"] == list(range(3, 21))
    assert summary["config"]["fsdp"]["prefetch_first_param_group"] is prefetch
    m = summary["metrics"]
    assert m["first_group_prefetches"] == expected
    assert m["mfu"] is None and m["cuda_graph_captured"] is False
    assert m["tokens_per_s_per_gpu"] > 0 and m["peak_memory_bytes"] > 0
    assert [s["step"] for s in steps] == list(range(1, 21))
    assert all(math.isfinite(s["loss"]) for s in steps)
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.5
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert "step   20/20" in proc.stdout and "outputs in" in proc.stdout


def test_cuda_graph_cell_runs_eagerly_on_cpu_and_says_so(launch):
    proc, run_dir = launch("+recipe=tiny_cpu", "train.steps=6", "cuda_graph=full_iteration",
                           "cuda_graph.warmup_steps=1", "fsdp.prefetch_first_param_group=false",
                           "logging.wandb.mode=disabled")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, _ = read_run(run_dir)
    assert summary["metrics"]["cuda_graph_captured"] is False
    assert summary["steady_state_steps"] == [5, 6]  # 2 warmup + 1 graph warmup + 1 capture
    assert "not captured" in proc.stdout
    assert not (run_dir / "wandb").exists()


def test_invalid_cell_exits_2_with_one_line_and_no_outputs(launch):
    proc, run_dir = launch("+recipe=tiny_cpu", "cuda_graph=full_iteration")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "set fsdp.prefetch_first_param_group=false" in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (run_dir / "summary.json").exists()
