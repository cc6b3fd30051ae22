"""Each per-step metric is declared once (launcher.run.outputs.Metric: the step's own in
launcher.run.record, each step hook's on its class), and every output reads that declaration:
metrics.jsonl, the loggers, the console, and docs/outputs.md's table."""

import json
from pathlib import Path

import torch

from launcher.run import cpu_compat

if not torch.cuda.is_available():  # experts.py imports megatron: after the CPU layer
    cpu_compat.activate()
from launcher.run import experts, first_group, profile, record  # noqa: E402,F401  (the hooks)
from launcher.run.hooks import StepHook, StepHooks  # noqa: E402
from launcher.run.outputs import Metric, MetricsFile, StepOutputs, metric_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def every_metric() -> list:
    """The step's metrics, every step hook's (each subclass of StepHook: the Trainer's order
    first), the validation's."""
    ordered = [first_group.FirstGroupProbe, experts.ExpertProbe]
    hooks = ordered + [h for h in StepHook.__subclasses__() if h not in ordered]
    return [*record.STEP, *[m for hook in hooks for m in hook.declared], *record.VALIDATION]


def test_every_metric_has_one_key_and_one_dashboard_name():
    metrics = every_metric()
    keys = [m.key for m in metrics]
    names = [m.dashboard for m in metrics if m.dashboard]
    assert len(keys) == len(set(keys)) and len(names) == len(set(names))
    assert {"loss", "first_group_wait_s", "moe_aux_loss", "valid_loss"} <= set(keys)


def test_docs_outputs_shows_the_declared_metrics():
    page = (ROOT / "docs" / "outputs.md").read_text()
    assert metric_table(every_metric()) in page, (
        "docs/outputs.md's per-step table differs from the declarations; print it with "
        "`.venv/bin/python tests/unit/test_step_metrics.py`")


class Collected:
    """A logger that keeps what it is given (the writers' contract: log(metrics, step))."""

    def __init__(self):
        self.logged = []

    def log(self, metrics: dict, step: int) -> None:
        self.logged.append((step, metrics))


# A step's values of STEP on a CPU (no peak, no device memory) and on a GPU.
CPU_STEP = {"step_time_s": 0.25, "tokens_per_s_per_gpu": 1000.0, "tflops_per_gpu": 0.0012,
            "mfu": None, "lr": 1e-3, "loss": 2.5, "grad_norm": 1.25, "skipped_steps": 0,
            "nan_steps": 0, "peak_memory_bytes": 3 * 2 ** 29, "peak_memory_fraction": None,
            "eta_s": 83.0}
GPU_STEP = {"step_time_s": 0.4123, "tokens_per_s_per_gpu": 39738.4, "tflops_per_gpu": 412.3,
            "mfu": 0.4167, "lr": 3e-4, "loss": 10.9876, "grad_norm": 12.5, "skipped_steps": 1,
            "nan_steps": 0, "peak_memory_bytes": 45.67 * 2 ** 30, "peak_memory_fraction": 0.571,
            "eta_s": 7500.0}


def test_a_steps_values_reach_every_output_under_their_declared_names(tmp_path, capsys):
    class Probe(StepHook):  # a new hook is one class: its metric reaches every output
        declared = (Metric("probe_s", "perf/probe_s", "s", "a test's probe",
                                  lambda v: f"probe {v:.1f} s"),)

        def record(self, step):
            return {"probe_s": 0.5}

    hooks = StepHooks([None, Probe()])
    outputs = StepOutputs(MetricsFile(str(tmp_path / "metrics.jsonl")), logger := Collected(),
                          (*record.STEP, *hooks.declared), 10, console=True)
    outputs.write(3, {**CPU_STEP, **hooks.record(3)})
    outputs.jsonl.close()
    [line] = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert list(json.loads(line)) == ["step", "step_time_s", "tokens_per_s_per_gpu",
                                      "tflops_per_gpu", "mfu", "lr", "loss", "grad_norm",
                                      "skipped_steps", "nan_steps", "peak_memory_bytes",
                                      "peak_memory_fraction", "eta_s", "probe_s"]
    assert logger.logged == [(3, {"perf/step_time_s": 0.25, "perf/tokens_per_s_per_gpu": 1000.0,
                                  "perf/tflops_per_gpu": 0.0012, "train/lr": 1e-3,
                                  "train/loss": 2.5, "train/grad_norm": 1.25,
                                  "train/skipped_steps": 0, "train/nan_steps": 0,
                                  "memory/peak_bytes": 3 * 2 ** 29,
                                  "perf/probe_s": 0.5})]  # nulls make no chart; eta_s: none
    assert capsys.readouterr().out == (
        "step  3/10 |   250.0 ms |   1,000 tokens/s/GPU |  0.0012 TFLOP/s/GPU | lr 1.000E-03 | "
        "loss  2.5000 | grad norm  1.250 | skipped   0 | nan   0 | mem  1.50 GiB | ETA  1m23s | "
        "probe 0.5 s\n")


def test_a_gpu_step_line_has_mfu_and_the_share_of_the_gpu_and_lines_up_with_a_cpu_line(
        tmp_path, capsys):
    """Every part has a fixed width: a GPU run's line (MFU, memory share) lines up with a CPU
    run's, part for part, up to the parts a CPU has none of."""
    outputs = StepOutputs(MetricsFile(str(tmp_path / "metrics.jsonl")), Collected(), record.STEP,
                          100, console=True)
    outputs.write(7, GPU_STEP)
    outputs.write(100, CPU_STEP)
    gpu, cpu = capsys.readouterr().out.splitlines()
    assert gpu == ("step   7/100 |   412.3 ms |  39,738 tokens/s/GPU |   412.3 TFLOP/s/GPU | "
                   "MFU 41.7% | lr 3.000E-04 | loss 10.9876 | grad norm 12.500 | skipped   1 | "
                   "nan   0 | mem 45.67 GiB |  57% of GPU | ETA  2h05m")
    gpu_parts, cpu_parts = gpu.split(" | "), cpu.split(" | ")
    assert [len(p) for p in gpu_parts if not p.startswith("MFU") and "of GPU" not in p] == \
        [len(p) for p in cpu_parts]


def test_an_undeclared_value_is_refused(tmp_path):
    outputs = StepOutputs(MetricsFile(str(tmp_path / "metrics.jsonl")), Collected(), record.STEP,
                          10, console=False)
    try:
        outputs.write(1, {"loss": 1.0, "surprise": 2})
    except ValueError as err:
        assert "undeclared per-step metrics ['surprise']" in str(err)
    else:
        raise AssertionError("an undeclared metric was written")


if __name__ == "__main__":
    print(metric_table(every_metric()), end="")
