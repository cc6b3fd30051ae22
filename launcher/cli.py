"""The `launch` entry point: compose with Hydra, validate, hand a Config to the spawner.

`launch -m` goes through the launch sweeper (hydra_plugins/launch_sweeper, found by Hydra's
plugin scan; it calls launcher.sweep.driver), which validates the whole grid first and ends the
process with the sweep's exit code; each of its jobs comes back here as one run. Importing this
module imports hydra and omegaconf only: `launch --cfg job` never imports torch.
"""

import os
import sys
from importlib import resources
from typing import Optional

import hydra
from hydra.errors import HydraException
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from launcher.preflight import ranks
from launcher.preflight.check import preflight
from launcher.preflight.support import check_fp8_support, check_support
from launcher.config import Config, ConfigError, World, check_world_size, to_config
from launcher.config.effect import given_keys
from launcher.config.values import check_bool_overrides, parse
from launcher.config.world import recipe_note
from launcher.files import remove_if_only_started

_exit_code = [0]  # set by a run; a sweep exits with its own code, Hydra's errors with 1


def set_exit_code(code: int) -> None:
    _exit_code[0] = code


def register_configs() -> None:
    """The schema, and every recipe as option of the `recipe` group (in --help)."""
    store = ConfigStore.instance()
    store.store(name="schema", node=Config)
    for path in sorted(resources.files("launcher.recipes").iterdir()):
        if path.name.endswith(".yaml"):
            node = OmegaConf.create(path.read_text())
            store.store(group="recipe", name=path.name[:-5], node=node, package="_global_")


def compose(overrides: list) -> Config:
    """The typed Config `launch OVERRIDES` would run, composed and validated as launch does
    (model.vocab_size filled in), without Hydra's run directory: for scripts under bench/."""
    from hydra import compose as hydra_compose, initialize_config_module

    from launcher.preflight.check import with_vocab

    register_configs()
    check_bool_overrides(parse(overrides), Config)
    with initialize_config_module(config_module="launcher.conf", version_base=None):
        return with_vocab(to_config(hydra_compose(config_name="config",
                                                  overrides=list(overrides))))


@hydra.main(version_base=None, config_path="pkg://launcher.conf", config_name="config")
def _main(composed: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    swept = planned = None
    try:
        if hydra_cfg.mode == RunMode.MULTIRUN:  # a sweep's job: its plan names the keys
            from launcher.sweep.plan import swept_keys

            swept = swept_keys(hydra_cfg.sweep.dir)
            planned = ranks.planned_world(hydra_cfg.launcher)  # a Slurm launcher's tasks
        else:
            check_run_launcher(hydra_cfg)
        # composed, a bool is already a bool: what was typed is in the overrides (unresolved:
        # an override's ${...} names a key of the task's config, not of Hydra's)
        check_bool_overrides(parse(OmegaConf.to_container(hydra_cfg.overrides.task)), Config)
        cfg = to_config(composed)
        cleared = preflight(cfg, run_dir, swept=swept, planned=planned,
                            here=not (cfg.runtime.dry_run or cfg.runtime.print_megatron_lm),
                            given=given_keys(hydra_cfg.overrides.task))
    except ConfigError as err:
        return refuse(err, run_dir)
    cfg = cleared.cfg
    if cfg.runtime.print_megatron_lm:
        from launcher.preflight import megatron_lm
        from launcher.run.device import targets_gpu

        return print(megatron_lm.for_config(cfg, cleared.world, targets_gpu(cfg)))
    for note in cleared.notes:
        print(f"[launch] note: {note}", flush=True)
    if cfg.runtime.dry_run:
        try:
            return print(dry_run(cfg, cleared.world, hydra_cfg.runtime.choices.get("recipe")))
        except ConfigError as err:  # the run does not fit the cluster's world
            return refuse(err, run_dir)
    from launcher.run.spawn import run

    os.environ.update(cleared.environment)  # before any rank, and before torch reads CUDA's
    try:
        set_exit_code(run(cfg, run_dir, cleared.world, cleared.resume_from))
    except ConfigError as err:  # a CUDA device asked for and none seen; a starter's world
        refuse(err, run_dir)


def check_run_launcher(hydra_cfg) -> None:
    """Without -m Hydra runs the job here with its basic launcher and never calls hydra/launcher:
    a Slurm launcher named there would be silently unused."""
    if ranks.planned_world(hydra_cfg.launcher) is not None:
        name = hydra_cfg.runtime.choices.get("hydra/launcher")
        raise ConfigError(
            f"hydra/launcher={name} submits jobs only with -m; without it this would run here, "
            f"not on Slurm: add -m (`launch -m ... hydra/launcher={name}` submits one job when "
            "nothing is swept), or drop hydra/launcher")


def dry_run(cfg: Config, world: World, recipe: Optional[str] = None) -> str:
    """The estimate in the run's one world; where this installation could not build the run (a
    recipe for GPUs with Transformer Engine, estimated on a laptop), why, as a line of it rather
    than a refusal; where the recipe is written for another world, which keys give it."""
    from launcher.estimate.memory import describe

    from launcher.estimate.prediction_text import describe_prediction

    try:
        check_support(cfg.model, cfg.parallel, cfg.cuda_graph)
        check_fp8_support(cfg.train.fp8)
        here = ""
    except ConfigError as err:
        here = f"here the run would be refused: {err}"
    dp = check_world_size(cfg, world.size, world.source)
    lines = describe(cfg, world.size, dp, here).splitlines()
    predicted = describe_prediction(cfg, world) if cfg.cluster.gpu is not None else []
    note = recipe_note(cfg.runtime, cfg.cluster, world, recipe)
    return "\n".join(lines[:-1] + predicted + ([note] if note else [])
                     + lines[-1:])  # "nothing started" last


def refuse(err: ConfigError, run_dir: str) -> None:
    """One line, exit code 2. A sweep's job also leaves an `invalid` summary: its cell's reason;
    a single run leaves nothing (launcher.files.remove_if_only_started)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    print(f"error: {err}", file=sys.stderr)
    set_exit_code(2)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        from launcher import summary

        summary.write(run_dir, summary.RunFailure(status="invalid", message=str(err)))
    else:  # nothing of a refused run is left: the folder Hydra made for it goes
        remove_if_only_started(run_dir, hydra_cfg.output_subdir, f"{hydra_cfg.job.name}.log",
                               hydra_cfg.runtime.cwd)


def empty_folder_override(arguments: list) -> str:
    """The first `hydra.run.dir=` / `hydra.sweep.dir=` given an empty value, else "": Hydra would
    write the run's files into the current directory."""
    for argument in arguments:
        key, _, value = argument.partition("=")
        if key.lstrip("+") in ("hydra.run.dir", "hydra.sweep.dir") and value.strip("'\" ") == "":
            return key.lstrip("+")
    return ""


class BadFlag(Exception):
    """A flag of Hydra's command line that argparse refuses."""


def bad_flag(arguments: list) -> str:
    """Why Hydra's own argument parser refuses the command line ("" where it does not): checked
    first, so a mistyped flag (`--cfg jobs`) is one line rather than argparse's usage block."""
    from hydra._internal.utils import get_args_parser

    def error(message: str):
        raise BadFlag(message)

    parser = get_args_parser()
    parser.error = error
    try:
        parser.parse_args(arguments)
    except BadFlag as err:
        return str(err)
    return ""


def main() -> None:
    if {"--help", "-h"} & set(sys.argv[1:]):
        from launcher.usage import text

        return print(text())
    flag = bad_flag(sys.argv[1:])
    if flag:
        print(f"error: {flag}; see launch --help", file=sys.stderr)
        sys.exit(2)
    empty = empty_folder_override(sys.argv[1:])
    if empty:  # before Hydra, which writes .hydra/ into the folder first
        print(f"error: {empty} is empty; give it a folder, or drop it for the default "
              "(outputs/DATE/TIME, multirun/DATE/TIME with -m)", file=sys.stderr)
        sys.exit(2)
    register_configs()
    if ranks.external_starter() == "torchrun":  # torchrun runs `launch` once per rank
        sys.argv += ranks.rank_overrides(int(os.environ["RANK"]))
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises; launch prints one line (errors.py)
    try:
        _main()
    except (HydraException, OmegaConfBaseException) as err:  # the latter: resolving hydra.*
        from launcher.config.explain import explain

        print(f"error: {explain(err)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted; the run stopped and wrote no summary", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # `launch ... | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except OSError as err:  # the run directory cannot be made or written
        print(f"error: cannot write {err.filename}: {err.strerror}; set hydra.run.dir "
              "(hydra.sweep.dir with -m) to a writable directory", file=sys.stderr)
        sys.exit(2)
    sys.exit(_exit_code[0])
