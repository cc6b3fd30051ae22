"""TensorBoard beside wandb: the event files read back with TensorBoard's own reader."""

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import read_run

pytestmark = pytest.mark.integration

TAGS = ("train/loss", "train/grad_norm", "train/lr", "perf/step_time_s",
        "perf/tokens_per_s_per_gpu", "perf/tflops_per_gpu", "perf/first_group_allgather_s",
        "perf/first_group_wait_s")


def test_every_logged_metric_lands_in_tensorboard_once_per_step(launch):
    proc, run_dir = launch("+recipe=tiny_cpu", "train.steps=5", "logging.wandb.mode=disabled",
                           "logging.tensorboard.enabled=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = run_dir / "tb" / "run"
    assert f"tensorboard: {folder}; look at it with `tensorboard --logdir {folder}`" in proc.stdout
    events = EventAccumulator(str(folder))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert set(TAGS) <= scalars
    for tag in TAGS:
        assert [e.step for e in events.Scalars(tag)] == [1, 2, 3, 4, 5], tag
    _, steps = read_run(run_dir)
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx(
        [s["loss"] for s in steps])
    assert "perf/mfu" not in scalars  # null on a CPU: not logged as a number
    assert "summary/tokens_per_s_per_gpu" in scalars
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "prefetch_first_param_group: true" in config
