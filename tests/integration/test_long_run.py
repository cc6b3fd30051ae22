"""A 1,000-step tiny CPU run: nothing the launcher or its CPU layer keeps grows with the steps."""

import pytest

from conftest import read_run

pytestmark = pytest.mark.integration


def test_a_thousand_steps_leave_torchs_cuda_queue_as_it_was(launch):
    proc, run_dir = launch("+recipe=tiny_cpu", "train.steps=1000", "train.warmup_steps=2",
                           "logging.wandb.mode=disabled", "logging.print_steps=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, steps = read_run(run_dir)
    assert len(steps) == 1000
    # megatron's RNG tracker forks twice a step: queued, that would be 2,000 entries and more
    assert summary["torch_cuda_queued_calls"] <= 5
    assert summary["metrics"]["rss_growth_bytes_per_step"] is not None
