"""TensorBoard beside wandb: the event files read back with TensorBoard's own reader."""

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import read_hparams, read_run, read_wandb

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
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "prefetch_first_param_group: true" in config


def test_results_sit_in_each_dashboards_comparison_view(launch):
    """The run's results: in TensorBoard's HParams dashboard (the switch and the graph setting
    against tokens/s/GPU and the rest) and in wandb's run summary and config, which its runs
    table and parallel coordinates read; not as one-point series in wandb's history."""
    proc, run_dir = launch("+recipe=tiny_cpu", "train.steps=5", "logging.tensorboard.enabled=true",
                           "logging.tensorboard.hparams=[fsdp.prefetch_first_param_group,"
                           "cuda_graph.impl,train.micro_batch_size,fsdp.bucket_size]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, _ = read_run(run_dir)
    hparams, metrics = read_hparams(run_dir / "tb" / "run")
    assert hparams == {"fsdp.prefetch_first_param_group": 1.0, "cuda_graph.impl": "none",
                       "train.micro_batch_size": 2.0, "fsdp.bucket_size": "null"}
    assert metrics["summary/tokens_per_s_per_gpu"] == pytest.approx(
        summary["metrics"]["tokens_per_s_per_gpu"])
    assert {"summary/tflops_per_gpu", "summary/peak_rss_bytes",
            "summary/first_group_wait_s"} <= set(metrics)
    run = read_wandb(run_dir)
    assert run["summary"]["summary/tokens_per_s_per_gpu"] == pytest.approx(
        summary["metrics"]["tokens_per_s_per_gpu"])
    assert run["summary"]["summary/status"] == "ok"
    assert run["config"]["fsdp"]["prefetch_first_param_group"] is True
    assert "perf/tokens_per_s_per_gpu" in run["history_keys"]
    assert not [k for k in run["history_keys"] if k.startswith("summary/")]
    assert "perf/mfu" not in run["history_keys"]  # null on a CPU: no empty chart


def test_a_failed_run_ends_its_dashboards_with_its_status(launch):
    """A NaN-stopped run: its wandb run is finished as failed with summary/status, and its
    TensorBoard run holds every step it made and the status (read back with each tool's own
    reader: `wandb leet inspect`, TensorBoard's EventAccumulator)."""
    proc, run_dir = launch("+recipe=tiny_cpu", "train.steps=6", "train.inject_nan_at_step=4",
                           "logging.tensorboard.enabled=true")
    assert proc.returncode == 1 and "(nan)" in proc.stderr
    run = read_wandb(run_dir)
    assert run["state"] == "failed" and run["exit_code"] == 1
    assert run["summary"]["summary/status"] == "nan" and run["summary"]["train/loss"] > 0
    events = EventAccumulator(str(run_dir / "tb" / "run"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3]
    status = events.Tensors("summary/status/text_summary")[0].tensor_proto.string_val[0]
    assert status.decode() == "nan"
