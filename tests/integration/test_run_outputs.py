"""What one run writes, by name and type: metrics.jsonl's records, summary.json, the TensorBoard
tags, the wandb history and summary keys, and the console's step lines. The reference,
tests/data/run_outputs.json, was taken from a run at a64f04e, before the run path became one
Trainer; a change to any name or type a user's dashboards or scripts read fails here.

A deliberate change of the outputs rewrites the reference (and says so in its commit):

    .venv/bin/python tests/integration/test_run_outputs.py RUN_DIR CONSOLE_LOG \
        > tests/data/run_outputs.json
"""

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # conftest, run as a script
from conftest import read_wandb  # noqa: E402

pytestmark = pytest.mark.integration

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "run_outputs.json"

# Every per-step source at once: MoE routing on 2 ranks (EP 2, bf16), the first-group probe,
# validation, checkpoints, the profiling window, TensorBoard and wandb.
RUN = ["+recipe=moe_small_tiny_cpu", "profile=torch", "train.eval_interval=4",
       "train.checkpoint.interval=4", "logging.tensorboard.enabled=true",
       "logging.wandb.mode=offline"]

# Fields whose keys or values are the machine's (host names, environment variables) or the
# config's (its own tests hold it): their type only.
OPAQUE = {"config", "devices_by_host", "env", "hosts", "checkpoints", "files"}


def shape(value, name=None):
    """A JSON value's shape: a dict's keys in order with their shapes, a list's element shapes
    (each once), a scalar's type."""
    if name in OPAQUE:
        return type(value).__name__
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        seen = []
        for item in value:
            if shape(item) not in seen:
                seen.append(shape(item))
        return seen
    return type(value).__name__


def record_shapes(path: Path) -> dict:
    """metrics.jsonl's records by kind (a training step's, a validation's): keys in order, and
    each key's types over every record of the kind."""
    kinds = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        kind = kinds.setdefault("valid" if "valid_loss" in record else "train", {})
        for key, value in record.items():
            types = kind.setdefault(key, [])
            if shape(value) not in types:
                types.append(shape(value))
    return kinds


NUMBER = re.compile(r"\d+h\d\dm|\d+m\d\ds|\d+s\b|\d[\d,]*(\.\d+)?(E[-+]\d+)?")
"""A number as the console writes it: a duration (2h05m, 1m23s, 12s), 1,670, 0.0011, 1.000E-03."""


def console_lines(text: str) -> list:
    """The console's step and validation lines, each number replaced by # and each run of
    spaces by one (the columns' widths follow the numbers), each form once."""
    lines = []
    for line in text.splitlines():
        if line.startswith("step "):
            form = re.sub(r" +", " ", NUMBER.sub("#", line))
            if form not in lines:
                lines.append(form)
    return lines


def outputs_of(run_dir: Path, console: str) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb" / "run"))
    events.Reload()
    wandb = read_wandb(run_dir)
    return {
        "metrics.jsonl": record_shapes(run_dir / "metrics.jsonl"),
        "summary.json": shape(json.loads((run_dir / "summary.json").read_text())),
        "tensorboard_scalars": sorted(events.Tags()["scalars"]),
        "tensorboard_tensors": sorted(events.Tags()["tensors"]),
        "wandb_history": sorted(wandb["history_keys"]),
        "wandb_summary": sorted(wandb["summary"]),
        "console": console_lines(console),
    }


def test_a_runs_outputs_keep_their_names_and_types(launch):
    proc, run_dir = launch(*RUN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert outputs_of(run_dir, proc.stdout) == json.loads(REFERENCE.read_text())


if __name__ == "__main__":
    print(json.dumps(outputs_of(Path(sys.argv[1]), Path(sys.argv[2]).read_text()), indent=1))
