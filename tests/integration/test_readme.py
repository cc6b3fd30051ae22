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


def test_the_megatron_lm_command_docs_show_is_the_one_the_launcher_prints(doc_command):
    """docs/checkpoints.md runs Megatron-LM with the flags its print command prints (on this
    CPU), plus --exit-interval: the page's command and the launcher's cannot drift apart."""
    commands = doc_commands()
    printed = next(c for c in commands if "train.checkpoint.resume=ckpts/iter_0000003" in c)
    shown = next(c for c in commands if "bench/megatron_lm_loop.py" in c and "--ckpt-step" in c)
    saves = next(c for c in commands if "train.checkpoint.dir=ckpts " in c + " ")
    assert doc_command(saves).returncode == 0  # the checkpoint it resumes (run once a session)
    proc = doc_command(printed)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = " ".join(line for line in proc.stdout.splitlines() if not line.startswith("#"))
    flags = text.replace("\\", " ").split("pretrain_gpt.py")[1].split()
    assert shown.split("bench/megatron_lm_loop.py")[1].split() == flags + ["--exit-interval", "6"]
