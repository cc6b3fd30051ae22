"""`launch -m ... sweep.tune=true` as docs/sweeps.md shows it, run on the CPU (once:
test_readme.py's run of it is this one): a grid with a clear loser (one microbatch per forward
against eight, at the same global batch) is raced, the loser stops after round 2, the tuned recipe
is written and runs; the same command again runs nothing."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import doc_commands

pytestmark = pytest.mark.integration

LAUNCH = str(Path(sys.executable).parent / "launch")
TUNE = (".venv/bin/launch -m +recipe=tiny_cpu train.micro_batch_size=1,8 "
        "train.global_batch_size=8 sweep.tune=true sweep.repeats=3")


def launch(folder, *args):
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(folder.parent / "home"))
    return subprocess.run([LAUNCH, *args], capture_output=True, text=True, timeout=900, env=env,
                          cwd=folder.parent)


@pytest.fixture(scope="module")
def tuned(doc_command, user_home):
    assert TUNE in doc_commands()  # what docs/sweeps.md shows, verbatim
    proc = doc_command(TUNE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = re.search(r"run it: launch --config-dir (\S+) \+recipe=tuned", proc.stdout).group(1)
    return proc, user_home / folder  # the sweep's folder, as printed (relative to the user's)


def summaries(folder):
    return {str(p): p.stat().st_mtime_ns for p in folder.glob("*/*/*/summary.json")}


def test_the_clear_loser_stops_after_the_first_eligible_round(tuned):
    proc, folder = tuned
    assert len(summaries(folder)) == 4  # 2 rounds x 2 cells, not 3 x 2
    assert "one cell left after round 2" in proc.stdout
    results = (folder / "results.md").read_text()
    slow = next(line for line in results.splitlines() if "micro_batch_size=1" in line)
    assert "dropped after round 2" in slow and "2/2" in slow  # its measurements stay
    assert "ok" in slow.split("|")[2]


def test_the_tuned_recipe_holds_the_winner_and_its_evidence(tuned):
    proc, folder = tuned
    recipe = (folder / "recipe" / "tuned.yaml").read_text()
    assert recipe.startswith("# @package _global_\n")
    assert "# Chosen: micro_batch_size=8." in recipe and "megatron-core 0.19.2" in recipe
    # one microbatch of 8 or eight of 1 compute the same step: the gate lets the winner through
    assert re.search(r"#   micro_batch_size=8: .* losses (identical|close \(max rel diff )", recipe)
    assert "Refused" not in recipe
    body = yaml.safe_load(recipe)
    assert body["defaults"] == ["tiny_cpu", "_self_"]
    assert body["train"]["micro_batch_size"] == 8 and "logging" not in body
    lines = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"\[sweep\] run it: launch --config-dir \S+ \+recipe=tuned", lines[-1])
    shown = launch(folder, "--config-dir", str(folder), "+recipe=tuned", "--cfg", "job")
    assert shown.returncode == 0, shown.stderr[-2000:]
    job = yaml.safe_load(shown.stdout)
    assert job["train"]["micro_batch_size"] == 8 and job["train"]["global_batch_size"] == 8
    assert job["runtime"]["device"] == "cpu"  # the base recipe's


def test_the_same_command_again_runs_nothing_new(tuned):
    _, folder = tuned
    before = summaries(folder)
    proc = launch(folder, *TUNE.split()[1:], f"hydra.sweep.dir={folder}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "at most 0 runs to do, 4 already ok" in proc.stdout
    assert "the race has ended: one cell left after round 2" in proc.stdout
    assert summaries(folder) == before
