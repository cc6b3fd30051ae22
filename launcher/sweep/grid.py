"""A sweep's grid: the swept keys and their values expanded into cells, each cell composed and
pre-flighted as its job will be, and named by a hash of what it measures.

A cell is one combination of the swept values. Its id is a hash of its resolved config (without
the sections in UNMEASURED, which do not change what a run measures), so the same command into
the same sweep directory finds its earlier runs (launcher.sweep.folders). Imports hydra and
omegaconf only (no torch): the plan is printed before anything heavy loads.
"""

import copy
import hashlib
import itertools
import json
from typing import Callable, Dict, List

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from launcher.config import Config, ConfigError, to_config
from launcher.config.effect import given_keys
from launcher.config.values import check_bool_overrides, shown
from launcher.preflight import ranks
from launcher.preflight.check import preflight
from launcher.sweep.error import SweepError

UNMEASURED = ("sweep", "logging", "profile", "cluster")  # sections left out of a cell's id


def canonical(value) -> str:
    """One spelling per value, so that `false`, `False` and False compare equal (config.values'
    shown); a list or a mapping as Python writes it, as a swept value's text has always been."""
    return str(value) if isinstance(value, (list, dict)) else shown(value)


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
