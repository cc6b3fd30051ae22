"""The checks of checkpoints that need no torch, run in the `launch` process before any rank:
where checkpoints go and that it can be written, which checkpoint a run resumes from, and that
it is a complete checkpoint of this model saved by as many ranks (a foreign or corrupt one is
refused in one line). launcher.run.checkpoint saves and loads them, collectively, in the ranks.

The layout is Megatron-LM's (megatron/training/checkpointing.py: get_checkpoint_name,
get_checkpoint_tracker_filename): `DIR/iter_NNNNNNN/` and `DIR/latest_checkpointed_iteration.txt`
holding the newest iteration, so `pretrain --load DIR` finds the launcher's checkpoints and the
launcher finds Megatron-LM's. A launcher checkpoint also holds `launcher.json` (the step, the
model section, the world size); one Megatron-LM saved has none, and its model and world are
checked in the ranks against the `args` it holds. Checkpoints of earlier launcher versions
(`step_NNNNNNN/`, their scheduler counting steps) still resume.
"""

import json
import os
import re
from pathlib import Path
from typing import Optional

from launcher.config import CheckpointConfig, ConfigError, ModelConfig, TrainConfig
from launcher.files import unwritable

PATTERN = re.compile(r"iter_(\d{7})")
LEGACY = re.compile(r"step_(\d{7})")
"""Earlier launcher versions' folders: the scheduler's state counts steps, not samples."""
MARKER = "launcher.json"
TRACKER = "latest_checkpointed_iteration.txt"


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


def iter_dir(folder: str, step: int) -> str:
    return os.path.join(folder, f"iter_{step:07d}")


def is_legacy(path: str) -> bool:
    return bool(LEGACY.fullmatch(Path(path).name))


def find_resume(ckpt: CheckpointConfig, model: dict, world_size: int,
                run_dir: str) -> Optional[str]:
    """The checkpoint to resume from (train.checkpoint.resume=auto: the newest complete one in
    the directory; a path: that checkpoint, or the newest in a directory Megatron-LM's --save
    wrote), checked against this run's model and world; None: start at step 1."""
    if ckpt.resume is None:
        return None
    if ckpt.resume != "auto":
        key = "train.checkpoint.resume"
        return check(newest_in(ckpt.resume, key) or ckpt.resume, model, world_size, key)
    folder = Path(checkpoint_dir(ckpt, run_dir))
    newest = newest_in(str(folder), "train.checkpoint.dir") if folder.is_dir() else None
    return check(newest, model, world_size, "train.checkpoint.dir") if newest else None


def newest_in(folder: str, key: str) -> Optional[str]:
    """The newest checkpoint in a directory of them: the one its tracker file names, else (no
    tracker, or its checkpoint removed since) the highest numbered; None where `folder` holds
    none (it may be a checkpoint itself)."""
    tracker = Path(folder, TRACKER)
    if tracker.is_file():
        text = tracker.read_text().strip()
        if not text.isdigit():
            raise ConfigError(f"{key}: {tracker} holds {text!r}, not an iteration (release "
                              "checkpoints are not resumed); point it at an iter_NNNNNNN folder")
        named = Path(folder, f"iter_{int(text):07d}")
        if named.is_dir():
            return str(named)
    found = [p for p in Path(folder).glob("*") if PATTERN.fullmatch(p.name)
             or LEGACY.fullmatch(p.name)] if Path(folder).is_dir() else []
    return str(max(found, key=lambda p: int(p.name[5:]))) if found else None


def resume_point(train: TrainConfig, model_cfg: ModelConfig, world_size: int,
                 run_dir: str) -> Optional[str]:
    """find_resume, plus: the checkpoint must leave steps to run."""
    path = find_resume(train.checkpoint, vars_of(model_cfg), world_size, run_dir)
    if path and saved_step(path) >= train.steps:
        raise ConfigError(f"train.checkpoint.resume: {path} is at step {saved_step(path)}, and "
                          f"train.steps={train.steps} leaves nothing to run; raise train.steps")
    return path


def check(path: str, model: dict, world_size: int, key: str) -> str:
    """A complete checkpoint of this model and world (the launcher's) or a Megatron-LM
    `iter_NNNNNNN` folder (checked in the ranks), else a one-line ConfigError naming `key`."""
    if not Path(path).is_dir():
        raise ConfigError(f"{key}: {path} is not a directory; point {key} at a checkpoint "
                          f"(iter_NNNNNNN) or the directory holding {TRACKER}")
    if not Path(path, ".metadata").is_file():
        raise ConfigError(f"{key}: {path} is incomplete or not a checkpoint (no .metadata); "
                          "remove it to resume from the one before it")
    marker = Path(path, MARKER)
    if not marker.exists():
        if PATTERN.fullmatch(Path(path).name):
            return path  # Megatron-LM's: its args are checked where torch reads them
        raise ConfigError(f"{key}: {path} is not a checkpoint of this launcher or of Megatron-LM "
                          f"(no {MARKER}, not named iter_NNNNNNN); point {key} at one, or set "
                          "train.checkpoint.resume=null")
    try:
        saved = json.loads(marker.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{key}: {marker} is unreadable or corrupt ({err}); remove {path} "
                          "to resume from the one before it") from None
    differs = sorted(k for k in model if saved.get("model", {}).get(k) != model[k])
    if differs:
        k = differs[0]
        raise ConfigError(f"{key}: {path} holds a different model (model.{k}="
                          f"{saved['model'].get(k)}, this run: model.{k}={model[k]}); point {key} "
                          "at a checkpoint of this model")
    if saved.get("world_size", world_size) != world_size:
        raise ConfigError(f"{key}: {path} was saved by {ranks(saved['world_size'])} and this run "
                          f"has {ranks(world_size)}; resume it with {ranks(saved['world_size'])} "
                          "(runtime.nproc_per_node x runtime.nnodes)")
    return path


def ranks(count: int) -> str:
    return f"{count} rank" + ("s" if count != 1 else "")


def saved_step(path: str) -> int:
    marker = Path(path, MARKER)
    if marker.exists():
        return json.loads(marker.read_text())["step"]
    return int(PATTERN.fullmatch(Path(path).name).group(1))


def vars_of(model_cfg: ModelConfig) -> dict:
    from dataclasses import asdict

    return {k: getattr(v, "value", v) for k, v in asdict(model_cfg).items()}
