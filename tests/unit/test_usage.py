"""`launch --help`: the app's name and purpose, the README's three commands, every recipe with its
one-line purpose, the config groups; quickly, since it composes nothing."""

import subprocess
import sys
import time
from pathlib import Path

from launcher import usage

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = str(Path(sys.executable).parent / "launch")


def test_help_names_launch_its_commands_and_every_recipes_purpose():
    start = time.perf_counter()
    proc = subprocess.run([LAUNCH, "--help"], capture_output=True, text=True, timeout=60)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0 and proc.stderr == ""
    out = proc.stdout
    assert out.startswith("launch: ") and "powered by Hydra" not in out
    for command, _ in usage.COMMANDS:
        assert f"  {command}\n" in out
    for recipe in (ROOT / "recipes").glob("*.yaml"):
        line = usage.purpose(recipe.read_text())
        assert f"  {recipe.stem} " in out and line in out
    assert "  model: deepseek_tiny, deepseek_v3_proxy, gpt2_small, llama3_70b," in out
    assert "hydra:" not in out and "experts run as SequentialMLP" in out
    assert seconds < 10  # Hydra's own help composed for ~2 s here; bench/startup.py times it


def test_every_recipe_opens_with_a_one_line_purpose():
    for recipe in (ROOT / "recipes").glob("*.yaml"):
        lines = recipe.read_text().splitlines()
        assert lines[0] == "# @package _global_", recipe.name
        assert lines[1].startswith("# ") and lines[1].endswith("."), recipe.name
        assert len(lines[1]) <= 100, recipe.name


def test_the_help_commands_are_the_readmes_so_test_readme_runs_them():
    readme = (ROOT / "README.md").read_text()
    for command, _ in usage.COMMANDS:
        assert f"    .venv/bin/{command}   " in readme or f"    .venv/bin/{command}  " in readme, \
            command
