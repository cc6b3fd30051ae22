"""The checks of checkpoints that need no torch, run in the `launch` process before any rank:
where checkpoints go and that it can be written, which checkpoint a run resumes from, and that
it is a complete checkpoint of this launcher and of this model (a foreign or corrupt one is
refused in one line). launcher.run.checkpoint saves and loads them, collectively, in the ranks.
"""

import json
import os
import re
from pathlib import Path
from typing import Optional

from launcher.config import CheckpointConfig, ConfigError, ModelConfig, TrainConfig
from launcher.files import unwritable

PATTERN = re.compile(r"step_(\d{7})")
MARKER = "launcher.json"


def checkpoint_dir(ckpt: CheckpointConfig, run_dir: str) -> str:
    return ckpt.dir or os.path.join(run_dir, "checkpoints")


def check_writable(ckpt: CheckpointConfig, run_dir: str) -> None:
    """Checkpoints on: their folder exists as a writable directory, or can be made. Refused in
    the launch process, not at the first save after training for an interval."""
    if not ckpt.interval:
        return
    folder = checkpoint_dir(ckpt, run_dir)
    why = unwritable(folder)
    if why:
        key = "train.checkpoint.dir" if ckpt.dir else "hydra.run.dir"
        raise ConfigError(f"train.checkpoint: {folder} cannot hold checkpoints ({why}); set "
                          f"{key} to a writable directory")


def step_dir(folder: str, step: int) -> str:
    return os.path.join(folder, f"step_{step:07d}")


def find_resume(ckpt: CheckpointConfig, model: dict, run_dir: str) -> Optional[str]:
    """The checkpoint to resume from (train.checkpoint.resume=auto: the newest complete one in
    the directory; a path: that one), checked against this run's model; None: start at step 1."""
    if ckpt.resume is None:
        return None
    if ckpt.resume != "auto":
        return check(ckpt.resume, model, "train.checkpoint.resume")
    folder = Path(checkpoint_dir(ckpt, run_dir))
    steps = sorted(p for p in folder.glob("step_*") if PATTERN.fullmatch(p.name)) \
        if folder.is_dir() else []
    return check(str(steps[-1]), model, "train.checkpoint.dir") if steps else None


def resume_point(train: TrainConfig, model_cfg: ModelConfig, run_dir: str) -> Optional[str]:
    """find_resume, plus: the checkpoint must leave steps to run."""
    path = find_resume(train.checkpoint, vars_of(model_cfg), run_dir)
    if path and saved_step(path) >= train.steps:
        raise ConfigError(f"train.checkpoint.resume: {path} is at step {saved_step(path)}, and "
                          f"train.steps={train.steps} leaves nothing to run; raise train.steps")
    return path


def check(path: str, model: dict, key: str) -> str:
    """A launcher checkpoint of this model, or a one-line ConfigError naming `key`."""
    marker = Path(path, MARKER)
    try:
        saved = json.loads(marker.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{key}: {path} is not a checkpoint of this launcher (no {MARKER}); "
                          f"point {key} at one, or set train.checkpoint.resume=null") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"{key}: {marker} is unreadable or corrupt ({err}); remove {path} "
                          "to resume from the one before it") from None
    if not Path(path, ".metadata").is_file():
        raise ConfigError(f"{key}: {path} is incomplete (no .metadata); remove it to resume "
                          "from the one before it")
    differs = sorted(k for k in model if saved.get("model", {}).get(k) != model[k])
    if differs:
        k = differs[0]
        raise ConfigError(f"{key}: {path} holds a different model (model.{k}="
                          f"{saved['model'].get(k)}, this run: model.{k}={model[k]}); point {key} "
                          "at a checkpoint of this model")
    return path


def saved_step(path: str) -> int:
    return json.loads(Path(path, MARKER).read_text())["step"]


def vars_of(model_cfg: ModelConfig) -> dict:
    from dataclasses import asdict

    return {k: getattr(v, "value", v) for k, v in asdict(model_cfg).items()}
