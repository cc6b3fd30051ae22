"""A tiny CPU run's steps leave nothing queued behind them: megatron's RNG tracker forks twice a
step, and queued for a CUDA start that never comes that would be 80 entries after 40 steps. The
1,000-step version, with the memory a step adds, is bench/long_run.py."""

import pytest

from conftest import read_run

pytestmark = pytest.mark.integration


def test_forty_steps_leave_torchs_cuda_queue_as_it_was(launch):
    proc, run_dir = launch("+recipe=tiny_cpu", "train.steps=40", "train.warmup_steps=2",
                           "logging.wandb.mode=disabled", "logging.print_steps=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, steps = read_run(run_dir)
    assert len(steps) == 40
    assert summary["torch_cuda_queued_calls"] <= 5
    assert summary["metrics"]["rss_growth_bytes_per_step"] is not None
