"""`runtime.dry_run=true`: the plan and the estimate without torch; the benchmarks under bench/
run to completion on the tiny model (their figures are printed, never asserted)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
VARIANT = ["model.activation=swiglu", "model.normalization=RMSNorm", "model.num_query_groups=2"]


def launch(*args, cwd=None):
    return subprocess.run([str(BIN / "launch"), *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env=dict(os.environ, WANDB_SILENT="true"))


@pytest.mark.parametrize("variant", [[], VARIANT], ids=["gelu-layernorm", "swiglu-rmsnorm-gqa"])
def test_estimated_parameters_are_the_built_model_s(tmp_path, variant):
    dry = launch("+recipe=tiny_cpu", "runtime.dry_run=true", *variant)
    assert dry.returncode == 0, dry.stderr[-2000:]
    estimated = int(re.search(r"\[dry run\] ([\d,]+) parameters", dry.stdout)[1].replace(",", ""))
    assert "[dry run] nothing started" in dry.stdout and not list(tmp_path.iterdir())
    real = launch("+recipe=tiny_cpu", "train.steps=3", "train.warmup_steps=1",
                  "logging.wandb.mode=disabled", f"hydra.run.dir={tmp_path / 'run'}", *variant)
    assert real.returncode == 0, real.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_parameters"] == \
        estimated


def test_gpt_recipe_estimate_per_strategy():
    dry = launch("+recipe=gpt", "runtime.dry_run=true", "runtime.nproc_per_node=8")
    assert dry.returncode == 0, dry.stderr[-2000:]
    # GPT-2 small with a 50,304-row padded vocabulary, tied to the output layer: GPT-2's 124M.
    assert "124,475,904 parameters" in dry.stdout and "32,768 tokens per step" in dry.stdout
    rows = {line.split()[0]: float(line.split()[6]) for line in dry.stdout.splitlines()
            if line.startswith("  ")}
    assert list(rows) == ["no_shard", "optim", "optim_grads", "optim_grads_params"]
    assert rows["no_shard"] > rows["optim"] > rows["optim_grads"] > rows["optim_grads_params"]


def test_sweep_dry_run_prints_the_plan_and_starts_nothing(tmp_path):
    proc = launch("-m", "+recipe=sweep_tiny_cpu", "runtime.dry_run=true",
                  f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "4 cells x 2 repeat(s)" in proc.stdout and "1 refused" in proc.stdout
    assert "[sweep] dry run: nothing started" in proc.stdout
    assert not (tmp_path / "sweep").exists()


def test_startup_benchmark_runs_and_ends_with_its_line():
    proc = subprocess.run([sys.executable, "bench/startup.py", "--repeats", "1"],
                          capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"cfg_job_s=\d+\.\d\d help_s=\d+\.\d\d sweep_preflight_s=\d+\.\d\d "
                        r"sweep_100_preflight_s=\d+\.\d\d", lines[-1])
    assert sum("heavy imports: []" in line for line in lines) == 4


def test_overhead_benchmark_runs_and_ends_with_its_line():
    proc = subprocess.run([sys.executable, "bench/overhead.py", "--pairs", "2", "--steps", "4",
                           "--cores", "0"], capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    ratio = r"(\d+\.\d{3}) \[(\d+\.\d{3}), (\d+\.\d{3})\]"
    found = re.fullmatch(rf"steady_state_ratio={ratio} first_step_ratio={ratio}", last)
    assert found, last
    figures = [float(v) for v in found.groups()]
    for figure, low, high in (figures[:3], figures[3:]):  # the interval holds its figure
        assert low <= figure <= high
    assert "cores [0]" in proc.stdout
