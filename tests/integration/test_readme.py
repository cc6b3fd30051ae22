"""Every command README.md shows, read out of README.md and run as a new user types it, from a
directory holding the checkout's .venv: those a CPU runs, verbatim; those that need a GPU, a
cluster or a prepared dataset, verbatim with `runtime.dry_run=true` appended, which passes them
through every pre-flight check (tests/slurm runs the README's Slurm sweep on a real Slurm). The README and the tests cannot drift apart."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
SETUP = ("make ", ".venv/bin/python -m pytest")  # the two commands that make and test the .venv
CPU_RUNS = ("+recipe=tiny_cpu ", "+recipe=tiny_cpu\n", "model=tiny", "sweep_tiny_cpu",
            "--help", "--cfg", "launch-prepare")


def readme_commands() -> list:
    """The indented shell lines of README.md (continuations joined), comments cut, in order."""
    commands, current = [], None
    for line in (ROOT / "README.md").read_text().splitlines():
        if current is None and not re.match(r"^    (\.venv/bin/|make )", line):
            continue
        text = line.split("  #")[0].strip()
        current = f"{current} {text}" if current else text
        if current.endswith("\\"):
            current = current[:-1].strip()
        else:
            commands.append(current)
            current = None
    return [c for c in commands if not c.startswith(SETUP)]


def runs_on_a_cpu(command: str) -> bool:
    """A command a CPU runs here; a Slurm one runs in tests/slurm, on a cluster."""
    return any(marker in command + "\n" for marker in CPU_RUNS) and "tiny_cpu_text" not in command \
        and "hydra/launcher=slurm" not in command


def test_the_readme_has_its_commands():
    commands = readme_commands()
    assert len(commands) >= 15
    assert ".venv/bin/launch +recipe=gpt model=tiny train.precision=fp32 train.steps=5" in commands
    assert any(c.startswith(".venv/bin/torchrun ") for c in commands)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """Where a user's shell is: the checkout's .venv at .venv, nothing else."""
    folder = tmp_path_factory.mktemp("user")
    (folder / ".venv").symlink_to(VENV)
    return folder


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command(home, command):
    args = command.split()
    if not runs_on_a_cpu(command):
        args.append("runtime.dry_run=true")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env["HOME"] = str(home / "home")
    proc = subprocess.run(args, cwd=home, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
