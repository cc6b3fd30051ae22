import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# `launch` beside this interpreter (a venv), else on PATH: on the lent GPU machine the GPU check
# installs it with --target, next to the machine's own python3 (bench/gpu_check.py)
_BESIDE = Path(sys.executable).parent / "launch"
LAUNCH = str(_BESIDE) if _BESIDE.exists() else (shutil.which("launch") or str(_BESIDE))

# The path users take, shrunk for a CPU: the gpt recipe (bf16, full sharding) on the tiny model,
# with the recipe's warmups scaled to a 10-step run.
GPT_TINY = ["+recipe=gpt", "model=tiny", "train.steps=10", "train.lr_warmup_steps=2",
            "train.warmup_steps=2", "train.global_batch_size=8", "train.micro_batch_size=2"]


def run_launch(tmp_path, *overrides, timeout=600):
    """`launch` as a user runs it, in a fresh process; returns (completed, run_dir)."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(tmp_path / "home"))
    proc = subprocess.run([LAUNCH, *overrides, f"hydra.run.dir={run_dir}"], capture_output=True,
                          text=True, timeout=timeout, env=env)
    return proc, run_dir


def read_run(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return summary, steps


@pytest.fixture(autouse=True)
def cpu_tiers_see_no_gpu(request, monkeypatch):
    """Every tier but tests/gpu tests the CPU path (gloo, the CPU layer), on any machine: on a GPU
    machine the processes its tests start see no GPU, as on CI's. (In this process, test modules
    that need the CPU layer are skipped on a CUDA machine, saying why.)"""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture
def launch(tmp_path):
    return lambda *overrides: run_launch(tmp_path, *overrides)
