"""Where a sweep's runs live: `<sweep_dir>/<cell id>/repeat<r>/attempt<n>/`, one folder per
attempt of each repeat of each cell, and the names spelled after it (Hydra's job subdir, a Slurm
job's name, the globs over every run). Every other module of the sweep asks here; none spells
these paths itself.
"""

import glob
import os
from pathlib import Path
from typing import List

REPEAT = "repeat"
ATTEMPT = "attempt"


def subdir(cell_id: str, repeat: int, attempt: int) -> str:
    """A run's folder under the sweep's: hydra.sweep.subdir of its job."""
    return f"{cell_id}/{REPEAT}{repeat}/{ATTEMPT}{attempt}"


def run_dir(sweep_dir: str, cell_id: str, repeat: int, attempt: int) -> str:
    return os.path.join(sweep_dir, cell_id, f"{REPEAT}{repeat}", f"{ATTEMPT}{attempt}")


def attempt_number(folder: str) -> int:
    """`.../attempt3` -> 3."""
    return int(Path(folder).name[len(ATTEMPT):])


def attempts(sweep_dir: str, cell_id: str, repeat: int) -> List[str]:
    """The attempt directories of one repeat of a cell, oldest first."""
    folder = Path(sweep_dir, cell_id, f"{REPEAT}{repeat}")
    found = ([p for p in folder.glob(f"{ATTEMPT}*") if p.name[len(ATTEMPT):].isdigit()]
             if folder.is_dir() else [])
    return [str(p) for p in sorted(found, key=lambda p: attempt_number(str(p)))]


def job_name(sweep_name: str, cell_id: str, repeat: int, attempt: int) -> str:
    """A Slurm job's name: the sweep, the cell and the run, as its directory is named (a first
    attempt's without its attempt)."""
    return f"{sweep_name}/{cell_id}/{REPEAT}{repeat}" + (f"/{ATTEMPT}{attempt}" if attempt else "")


def runs_glob(sweep_dir: str) -> str:
    """A glob pattern matching every run folder of the sweep (the sweep's path escaped)."""
    return os.path.join(glob.escape(sweep_dir), "*", f"{REPEAT}*", f"{ATTEMPT}*")


def runs_pattern(folder: str) -> str:
    """Every run folder under `folder` as a shell pattern: `DIR/*/repeat*/attempt*`."""
    return f"{folder}/*/{REPEAT}*/{ATTEMPT}*"


def run_placeholder(sweep_dir: str) -> str:
    """A run's folder, its parts named: `DIR/CELL/repeatN/attemptM`."""
    return f"{sweep_dir}/CELL/{REPEAT}N/{ATTEMPT}M"
