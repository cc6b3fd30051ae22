"""Every command README.md shows, read out of README.md and run as a new user types it, from a
directory holding the checkout's .venv: those a CPU runs, verbatim; those that need a GPU, a
cluster or a prepared dataset, verbatim with `runtime.dry_run=true` appended, which passes them
through every pre-flight check (tests/slurm runs the README's Slurm sweep on a real Slurm). The README and the tests cannot drift apart."""

import pytest

from conftest import readme_commands

pytestmark = pytest.mark.integration


def test_the_readme_has_its_commands():
    commands = readme_commands()
    assert len(commands) >= 15
    assert ".venv/bin/launch +recipe=gpt model=tiny train.precision=fp32 train.steps=5" in commands
    assert any(c.startswith(".venv/bin/torchrun ") for c in commands)


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command(readme_command, command):
    proc = readme_command(command)
    assert proc.returncode == 0, f"{' '.join(proc.args)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
