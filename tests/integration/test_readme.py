"""Every command README.md and docs/*.md show, read out of the pages and run as a new user types
it, from a directory holding the checkout's .venv: those a CPU runs, verbatim; those that need a
GPU, a cluster or a prepared dataset, verbatim with `runtime.dry_run=true` appended, which passes
them through every pre-flight check (tests/slurm runs the Slurm sweep on a real Slurm); a
benchmark with the short options tests/conftest.py keeps for it. The pages and the tests cannot
drift apart."""

import pytest

from conftest import doc_commands

pytestmark = pytest.mark.integration


def test_the_docs_have_their_commands():
    commands = doc_commands()
    assert len(commands) >= 15
    assert len(commands) == len(set(commands))  # a command on two pages runs once
    assert ".venv/bin/launch +recipe=gpt model=tiny train.precision=fp32 train.steps=5" in commands
    assert any(c.startswith(".venv/bin/torchrun ") for c in commands)


@pytest.mark.parametrize("command", doc_commands())
def test_doc_command(doc_command, command):
    proc = doc_command(command)
    assert proc.returncode == 0, f"{' '.join(proc.args)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
