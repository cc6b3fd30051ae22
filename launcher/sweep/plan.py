"""A sweep's plan: every cell of the grid composed and validated before any job starts
(launcher.sweep.grid), the baseline chosen, and all of it written to plan.json, which every later
reader (the schedule, the results, `launch-report`) reads back.
Imports hydra and omegaconf only (no torch): the plan is printed before anything heavy loads.
"""

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from launcher.config import ConfigError, SweepConfig
from launcher.config.values import dotted
from launcher.sweep.grid import (
    CellComposer, canonical, cell_id, compose_cell, expand_grid, swept_values,
)
from launcher.sweep.names import label

PLAN_FILE = "plan.json"


@dataclass
class Cell:
    id: str
    label: str
    values: Dict[str, str]
    """Swept key -> its value in this cell (canonical text: true, none, 0.001)."""
    overrides: List[str]
    """Everything the job is composed with: the command line's fixed overrides and the swept ones."""
    valid: bool
    reason: str = ""
    """Why an invalid cell will not run: the validation error, one line."""
    predicted: str = ""
    """With cluster.gpu: the dry run's time model for the cell (launcher.estimate.predict)."""
    world: str = ""
    """The world its job gets, and the keys that state it (launcher.config.world); "" where
    the cell is invalid."""
    megatron_lm: str = ""
    """With runtime.print_megatron_lm=true: the cell as Megatron-LM's command line."""
    predicted_steps: Optional[List[float]] = None
    """With cluster.gpu: the predicted step's (slow, middle, fast) seconds, its band."""


@dataclass
class Plan:
    name: str
    sweep_dir: str
    keys: List[str]
    repeats: int
    seed: int
    baseline: Optional[str]
    """The id of the cell that speedups are measured against."""
    wandb_group: str
    cells: List[Cell] = field(default_factory=list)
    tune: bool = False
    """Race the cells (launcher.sweep.race) and write the tuned recipe."""
    min_repeats: int = 2
    memory_limit_gib: Optional[float] = None
    """The race drops cells whose measured peak memory is above it (launcher.sweep.race)."""
    allow_numerics_change: bool = False
    """The tuner may pick a cell that trains differently from the baseline (sweep.numerics)."""

    def cell(self, cell_id: str) -> Cell:
        return next(c for c in self.cells if c.id == cell_id)

    def save(self) -> None:
        from launcher.files import write_json_atomic

        write_json_atomic(os.path.join(self.sweep_dir, PLAN_FILE), asdict(self))

    @staticmethod
    def load(sweep_dir: str) -> "Plan":
        data = json.loads(Path(sweep_dir, PLAN_FILE).read_text())
        data["sweep_dir"] = sweep_dir  # the directory may have moved since
        data["cells"] = [Cell(**c) for c in data["cells"]]
        return Plan(**data)


def swept_keys(sweep_dir: str) -> List[str]:
    """The keys a sweep varies, from its plan (written before its first job starts)."""
    path = Path(sweep_dir, PLAN_FILE)
    return json.loads(path.read_text())["keys"] if path.exists() else []


def build_plan(master: DictConfig, load, arguments: List[str], config_loader=None) -> Plan:
    """Expands and validates the whole grid, once the sweep's own settings have passed
    (launcher.sweep.settings.check_sweep); raises SweepError/ConfigError for the sweep as a whole."""
    sweep: SweepConfig = OmegaConf.to_object(master.sweep)
    keys, grid = expand_grid(arguments, config_loader)
    if config_loader is not None:
        load = CellComposer(load, config_loader)
    sweep_dir = str(master.hydra.sweep.dir)
    cells, seen = [], {}
    for overrides in grid:
        resolved, values, reason, guess, world, command = compose_cell(
            load, overrides, keys, master.hydra.launcher)
        ident = cell_id(resolved, world)
        if not reason and ident in seen:
            reason = f"resolves to the same config as cell {seen[ident]}; drop one of them"
        seen.setdefault(ident, label(values))
        cells.append(Cell(ident, label(values), values, overrides, not reason, reason, guess[0],
                          world.describe() if world else "", command, predicted_steps=guess[1]))
    name = sweep.name or Path(sweep_dir).name
    group = master.logging.wandb.group or name
    base_values = swept_values(master, dict(master.hydra.runtime.choices), keys)
    baseline = pick_baseline(cells, keys, sweep.baseline, base_values, master)
    return Plan(name, sweep_dir, keys, sweep.repeats, sweep.seed, baseline, group, cells,
                sweep.tune, sweep.min_repeats, sweep.memory_limit_gib,
                sweep.allow_numerics_change)


def pick_baseline(cells: List[Cell], keys: List[str], requested: dict,
                  base_values: Dict[str, str], master: DictConfig) -> Optional[str]:
    """sweep.baseline's cell; else the cell holding the unswept config's values; else the first.
    A baseline key the command line fixed (not swept) must hold the fixed value."""
    valid = [c for c in cells if c.valid]
    if not valid:
        return None  # the plan is printed with every reason, then the sweep is refused
    requested = dotted(requested)
    wanted = {k: canonical(v) for k, v in requested.items()}
    for key in sorted(set(wanted) - set(keys)):
        fixed = OmegaConf.select(master, key, default=KeyError)
        if fixed is KeyError:
            raise ConfigError(f"sweep.baseline names {key}, which is not a config key; "
                              f"use swept keys only ({', '.join(keys)})")
        if canonical(fixed) != wanted.pop(key):
            raise ConfigError(f"sweep.baseline wants {key}={canonical(requested[key])}, but the "
                              f"sweep fixes {key}={canonical(fixed)}; sweep {key} or drop it "
                              f"from the baseline (~sweep.baseline.{key})")
    if not wanted:
        chosen = [c for c in valid if c.values == base_values] or valid
        return chosen[0].id if chosen else None
    text = ",".join(f"{k}:{v}" for k, v in wanted.items())
    matches = [c for c in cells if all(c.values[k] == v for k, v in wanted.items())]
    if not matches:
        raise ConfigError(f"sweep.baseline={{{text}}} matches no cell of the grid; "
                          "pick values that are swept")
    usable = [c for c in matches if c.valid]
    if not usable:
        raise ConfigError(f"sweep.baseline={{{text}}} is an invalid cell ({matches[0].reason}); "
                          "pick a valid cell as baseline")
    return usable[0].id
