"""A sweep's plan: the grid expanded, every cell composed and validated before any job starts.

A cell is one combination of the swept values. Its id is a hash of its resolved config (without
the `sweep` and `logging` sections, which do not change what a run measures), so the same command
into the same sweep directory finds its earlier runs: `<sweep_dir>/<cell id>/repeat<r>/attempt<n>/`.
Imports hydra and omegaconf only (no torch): the plan is printed before anything heavy loads.
"""

import copy
import hashlib
import itertools
import json
import os
import random
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Callable, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from launcher.preflight import ranks
from launcher import summary as run_summary
from launcher.preflight.check import preflight
from launcher.sweep.error import SweepError
from launcher.sweep.slurm import check_launcher, is_slurm
from launcher.config import Config, ConfigError, SweepConfig, to_config
from launcher.config.effect import check_sweep_section, given_keys
from launcher.config.values import check_bool_overrides, check_values

PLAN_FILE = "plan.json"
UNMEASURED = ("sweep", "logging", "profile", "cluster")  # sections left out of a cell's id


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


def canonical(value) -> str:
    """One spelling per value, so that `false`, `False` and False compare equal."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, (int, float)):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if value is None:
        return "null"
    return str(value)


def bare_key(key: str) -> str:
    return key.lstrip("+~")


def expand_grid(arguments: List[str], config_loader=None) -> tuple:
    """(swept keys, [override list per cell]) in Hydra's order: the last key varies fastest."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = OverridesParser.create(config_loader=config_loader).parse_overrides(arguments)
    # As Hydra's basic sweeper: a key given twice (a recipe's grid, then the command line) takes
    # the later value, in the earlier position.
    last = {bare_key(o.get_key_element()): o for o in overrides}
    try:  # composed, a bool is already a bool: every value as typed is here
        check_bool_overrides(last.values(), Config)
    except ConfigError as err:
        raise ConfigError(f"{err} (no cell of the sweep was run)") from None
    keys, axes = [], []
    for override in last.values():
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes.append([f"{key}={override.get_value_element_as_str()}"])
            continue
        if not override.is_discrete_sweep():
            raise SweepError(f"{key}: only lists of values can be swept (a,b / choice(a,b) / "
                             f"range(1,4)), not {override.input_line}; list the values")
        if bare_key(key).split(".")[0] in ("sweep", "hydra"):
            raise SweepError(f"{key} cannot be swept (it configures the sweep itself); "
                             "give it one value")
        keys.append(bare_key(key))
        axes.append([f"{key}={value}" for value in override.sweep_string_iterator()])
    return keys, [list(combination) for combination in itertools.product(*axes)]


def cell_id(resolved: dict, world=None) -> str:
    """A stable hash of what the cell measures (sha256, so the same across processes). The
    cluster section is left out, but where its keys decide the world a run starts (`world`,
    launcher.config.world) that world is in: cells that differ only there measure differently."""
    measured = {k: v for k, v in resolved.items() if k not in UNMEASURED}
    measured["runtime"] = {k: v for k, v in measured.get("runtime", {}).items()
                           if k != "dry_run"}  # a dry run plans the same cells
    if world is not None and "cluster." in world.source:
        measured["world"] = [world.per_node, world.nodes]
    blob = json.dumps(measured, sort_keys=True, default=canonical)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def swept_values(composed: DictConfig, choices: dict, keys: List[str]) -> Dict[str, str]:
    """Each swept key's value: a group's chosen option, or the config value at that key."""
    values = {}
    for key in keys:
        if key in choices:
            values[key] = canonical(choices[key])
        else:
            values[key] = canonical(OmegaConf.select(composed, key, default=None))
    return values


class CellComposer:
    """Composes each cell as its job will be composed, paying Hydra's full compose (the defaults
    tree rebuilt, every YAML read again: 0.1-0.5 s) once per distinct set of config-group
    overrides. Hydra composes the groups first and then applies the value overrides to the result
    (ConfigLoaderImpl._load_configuration_impl -> _apply_overrides_to_config); this does the same
    on a copy of the composed groups, with Hydra's own function, so a cell gets the same config
    and a bad value the same error. A grid over values composes once, whatever its size."""

    def __init__(self, load: Callable[[List[str]], DictConfig], config_loader):
        self.load, self.config_loader = load, config_loader
        self.composed: Dict[tuple, DictConfig] = {}

    def __call__(self, overrides: List[str]) -> DictConfig:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create(config_loader=self.config_loader).parse_overrides(overrides)
        repository = self.config_loader.repository
        # what Hydra's defaults list takes as a group override (hydra/_internal/defaults_list.py)
        groups = [o for o in parsed if repository.group_exists(o.key_or_group)
                  and not isinstance(o.value(), dict)]
        key = tuple(o.input_line for o in groups)
        if key not in self.composed:
            self.composed[key] = self.load(list(key))
        composed = copy.deepcopy(self.composed[key])
        ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed if o not in groups],
                                                    composed)
        return composed


def compose_cell(load: Callable[[List[str]], DictConfig], overrides: List[str],
                 keys: List[str], launcher: DictConfig) -> tuple:
    """(resolved dict, swept values, reason or "", (predicted, its band's steps), world,
    Megatron-LM command or ""):
    the cell as its job will see it. A value
    that does not compose (a typo in a boolean, a choice that does not exist) is a mistake in
    the command, not an incompatible cell: ConfigError for the whole sweep."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from launcher.config.explain import explain

    try:
        composed = load(overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"{explain(err)} (no cell of the sweep was run)") from None
    choices = dict(composed.hydra.runtime.choices)
    with read_write(composed), open_dict(composed):
        del composed["hydra"]
    values = swept_values(composed, choices, keys)
    try:
        # the run's own pre-flight, as the job will run it, in the world it will get
        cfg = to_config(composed)
        printed = cfg.runtime.print_megatron_lm  # for a cluster, as a single run's is
        cleared = preflight(cfg, None, swept=keys, planned=ranks.planned_world(launcher),
                            given=given_keys(overrides), here=not printed)
    except ConfigError as err:
        return (OmegaConf.to_container(composed, enum_to_str=True), values, str(err), ("", None),
                None, "")
    command = ""
    if printed:
        from launcher.preflight import megatron_lm
        from launcher.run.device import targets_gpu

        command = megatron_lm.for_config(cleared.cfg, cleared.world, targets_gpu(cleared.cfg))
    return (OmegaConf.to_container(composed, resolve=True, enum_to_str=True), values, "",
            predicted(cleared.cfg, cleared.world), cleared.world, command)


def predicted(cfg, world) -> tuple:
    """The cell's predicted step on cluster.gpu in the world its job will get (its pre-flight's),
    or why there is none ("" without a cluster), and its (slow, middle, fast) seconds or None."""
    if cfg.cluster.gpu is None:
        return "", None
    from launcher.estimate.prediction_text import short

    try:
        text, steps = short(cfg, world)
        return text, list(steps)
    except ConfigError as err:
        return f"no prediction: {err}", None


def short_names(keys: List[str]) -> Dict[str, str]:
    """The last part of each key (prefetch_first_param_group), unless two keys share it."""
    last = [k.split(".")[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last)}


def label(values: Dict[str, str]) -> str:
    names = short_names(list(values))
    return ", ".join(f"{names[k]}={v}" for k, v in values.items()) or "(no swept key)"


def build_plan(master: DictConfig, load, arguments: List[str], config_loader=None) -> Plan:
    """Expands and validates the whole grid; raises SweepError/ConfigError for the sweep as a whole.
    The sweep section's values are checked first: the schedule holds every repeat."""
    check_values(OmegaConf.to_container(master.sweep, resolve=True), SweepConfig, "sweep.")
    sweep: SweepConfig = OmegaConf.to_object(master.sweep)
    check_sweep_section(sweep, master.hydra.runtime.choices.get("hydra/launcher"),
                        is_slurm(master.hydra.launcher), given_keys(arguments))
    check_sweep_dir(str(master.hydra.sweep.dir))
    check_launcher(master.hydra.launcher, master.runtime.dry_run)
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


def check_sweep_dir(sweep_dir: str) -> None:
    """The sweep's folder can be made and written: refused before the plan, not after it."""
    from launcher.files import unwritable

    why = unwritable(sweep_dir)
    if why:
        raise ConfigError(f"hydra.sweep.dir={sweep_dir} cannot be written ({why}); set "
                          "hydra.sweep.dir to a writable directory")


def dotted(tree: dict, prefix: str = "") -> dict:
    """{fsdp: {prefetch_first_param_group: true}} -> {"fsdp.prefetch_first_param_group": true}."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


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


def run_dir(sweep_dir: str, cell: str, repeat: int, attempt: int) -> str:
    return os.path.join(sweep_dir, cell, f"repeat{repeat}", f"attempt{attempt}")


def attempts(sweep_dir: str, cell: str, repeat: int) -> List[str]:
    """The attempt directories of one repeat of a cell, oldest first."""
    folder = Path(sweep_dir, cell, f"repeat{repeat}")
    found = [p for p in folder.glob("attempt*") if p.name[7:].isdigit()] if folder.is_dir() else []
    return [str(p) for p in sorted(found, key=lambda p: int(p.name[7:]))]


def next_attempt(sweep_dir: str, cell: str, repeat: int) -> int:
    """One past the newest attempt: an earlier attempt's files are never overwritten."""
    done = attempts(sweep_dir, cell, repeat)
    return int(Path(done[-1]).name[7:]) + 1 if done else 0


def has_ok_run(sweep_dir: str, cell: str, repeat: int) -> bool:
    return any(getattr(run_summary.read(d), "status", None) == "ok"
               for d in attempts(sweep_dir, cell, repeat))


def schedule(plan: Plan) -> List[List[tuple]]:
    """Rounds of (cell, repeat, attempt) still to run: each round every valid cell once, in an
    order shuffled with the seed and the round, so drift on a shared machine spreads over cells.
    A repeat that already has an ok run is skipped; any other gets a new attempt directory."""
    rounds = []
    for repeat in range(plan.repeats):
        order = [c for c in plan.cells if c.valid]
        random.Random(f"{plan.seed}:{repeat}").shuffle(order)
        todo = []
        for cell in order:
            if not has_ok_run(plan.sweep_dir, cell.id, repeat):
                todo.append((cell, repeat, next_attempt(plan.sweep_dir, cell.id, repeat)))
        rounds.append(todo)
    return rounds
