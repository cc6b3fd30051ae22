"""The pre-flight: the one function that decides whether a config may run, before any rank starts.

`launch` calls it for a run (launcher/cli.py); a sweep calls it for every cell before any job
starts (launcher/sweep/plan.py), and each of its jobs calls it again as the run it is. Where a
sweep's cell is checked differently, a named argument says so and why. Everything here reads
files and the installation, never torch: a sweep's plan is printed before anything heavy loads.
"""

import dataclasses
import os
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from launcher.config import Config, ConfigError, DataKind, Device, World, check_steady_state, \
    check_world_size, resolve_world
from launcher.config.effect import check_effect, moot_notes
from launcher.preflight import ranks, resume
from launcher.preflight.environment import run_environment
from launcher.preflight.hf import check_init_hf
from launcher.preflight.destinations import check_folders, check_wandb_login
from launcher.preflight.rendezvous import check_port_free
from launcher.preflight.support import check_device, check_fp8_support, check_support


@dataclass(frozen=True)
class Cleared:
    """A config cleared to run, with what the checks found on the way."""

    cfg: Config
    """The config, model.vocab_size filled in where it was null (the data's tokenizer, or
    model.mock_vocab_size with mock data)."""
    resume_from: Optional[str]
    """The checkpoint the run resumes from; None: step 1."""
    environment: Dict[str, str]
    """What the ranks' environment needs set (launcher.preflight.environment)."""
    world: World
    """The run's one world (launcher.config.world): what its dry run estimates and predicts
    for, what was checked here and what the spawner starts."""
    notes: Tuple[str, ...] = ()
    """What the run's start says before its ranks: the recipe's keys the user's own overrides
    made moot (launcher.config.effect)."""


def preflight(cfg: Config, run_dir: Optional[str], swept: Optional[Sequence[str]] = None,
              planned: Optional[ranks.Layout] = None, here: bool = True,
              given: Optional[Sequence[str]] = None) -> Cleared:
    """Raises ConfigError, one line, for whatever can be known before any rank starts.

    run_dir: the run's folder; None for a sweep's cell being planned, whose folder its job makes
      (checkpoint folders and auto-resume are then checked where train.checkpoint.dir names one).
    swept: None for a single run; for a sweep's cell or job (`launch -m`), the keys the sweep
      varies. The sweep section acts; a key whose governor is swept may be inert in this cell
      (config.effect); and every step being excluded from throughput is refused: throughput is
      what a sweep compares (a single run still trains, and says it measured none).
    planned: the world another starter will give the ranks (a Slurm launcher's tasks); None: the
      one `launch` starts (under torchrun: the world torchrun gave this process).
    here: check what this machine can build and run; false for a single run's dry run, which
      estimates for other machines and prints what would be refused here as a line of it.
    given: the keys the command line sets (launcher.config.effect.given_keys): a key it leaves
      inert is refused, a recipe's key it makes moot is a note; None: every key is the user's.
    """
    check_effect(cfg, swept, given)
    if swept is not None:
        check_steady_state(cfg)
    world = check_world(cfg, planned)
    if cfg.data.kind == DataKind.indexed:
        check_dataset(cfg)
    cfg = with_vocab(cfg)  # before anything compares the model section
    check_init_hf(cfg)
    resume_from = check_checkpoints(cfg, world, run_dir)
    check_folders(cfg.logging, cfg.data)
    check_login(cfg)
    if here:
        check_support(cfg.model, cfg.parallel, cfg.cuda_graph)
        check_fp8_support(cfg.train.fp8)
        if cfg.runtime.device == Device.cpu:  # auto: known where the ranks start (spawn.py)
            check_device(cfg, "cpu")
        check_rendezvous(cfg, world, planned)
    starts = 1 if ranks.external_starter() else world.per_node
    environment = run_environment(cfg.cuda_graph, os.environ, cfg.fsdp.nccl_ub, starts)
    return Cleared(cfg, resume_from, environment, world, moot_notes(cfg, given))



def check_world(cfg: Config, planned: Optional[ranks.Layout]) -> World:
    """The one world (launcher.config.world), checked against the parallel sizes and the batch.
    A dry run checks the world the run would get, wherever it is printed."""
    starter = ranks.external_starter()
    if planned is None and starter == "torchrun":  # torchrun's world is in this process already
        planned = ranks.layout(starter)
    world = resolve_world(cfg.runtime, cfg.cluster, planned.stated() if planned else None)
    launched_here = planned is None and starter is None
    if launched_here and world.nodes > 1 and cfg.runtime.rdzv_endpoint is None \
            and not cfg.runtime.dry_run:
        raise ConfigError(
            f"{world.nodes_key}={world.nodes} makes this a {world.nodes}-node run, and `launch` "
            "starts one node's ranks that meet at runtime.rdzv_endpoint; set "
            "runtime.rdzv_endpoint=HOST:PORT and run launch on every node, or submit it to Slurm "
            "with `launch -m ... hydra/launcher=slurm hydra.launcher.nodes=N`")
    if planned is not None or launched_here:  # else (submitit, unplanned) the rank checks
        check_world_size(cfg, world.size, world.source)
    return world


def check_rendezvous(cfg: Config, world: World, planned: Optional[ranks.Layout]) -> None:
    """A one-node run that `launch` starts hosts its rendezvous store at runtime.rdzv_endpoint:
    a port of this machine another program holds is refused here (launcher.preflight.rendezvous). On
    several nodes the port may be another node's store, legitimately (two nodes on one machine):
    there runtime.rdzv_timeout_s bounds the wait instead. Under torchrun or Slurm the endpoint
    is not used."""
    endpoint = cfg.runtime.rdzv_endpoint
    if endpoint and world.nodes == 1 and planned is None and not ranks.external_starter():
        check_port_free(endpoint)


_checked: Dict[tuple, Optional[str]] = {}
"""Datasets and logins already checked in this process, and what was wrong: a sweep's cells
mostly share them, and a large index takes seconds to read."""


def once(key: tuple, check) -> None:
    if key not in _checked:
        try:
            check()
            _checked[key] = None
        except ConfigError as err:
            _checked[key] = str(err)
    if _checked[key]:
        raise ConfigError(_checked[key])


def check_dataset(cfg: Config) -> None:
    """Damaged or missing data is refused here, not by a rank after the build."""
    from launcher.data.check import check_data

    data, vocab = cfg.data, cfg.model.vocab_size
    files = [f"{prefix}{suffix}" for prefix in data.blend()[0] for suffix in (".idx", ".bin")]
    stamps = tuple(os.stat(f).st_mtime_ns if os.path.exists(f) else None for f in files)
    once(("data", data.path, data.split, vocab, stamps), lambda: check_data(data, vocab))


def check_login(cfg: Config) -> None:
    wandb = cfg.logging.wandb
    once(("wandb", wandb.mode), lambda: check_wandb_login(wandb))


def check_checkpoints(cfg: Config, world: World, run_dir: Optional[str]) -> Optional[str]:
    """The resume point (a checkpoint of this model and world that leaves steps to run), and a
    writable folder for the checkpoints the run will save."""
    ckpt = cfg.train.checkpoint
    if run_dir is None and not ckpt.dir:  # a planned cell: its folder does not exist yet
        if ckpt.resume in (None, "auto"):
            return None  # auto finds nothing in a folder that is not made yet
        return resume.resume_point(cfg.train, cfg.model, world.size, "")
    resume_from = resume.resume_point(cfg.train, cfg.model, world.size, run_dir or "")
    resume.check_writable(ckpt, run_dir or "")
    return resume_from


def with_vocab(cfg: Config) -> Config:
    """`cfg` with model.vocab_size set where it is null: the data's tokenizer's vocabulary
    (PREFIX.json) with data=indexed, model.mock_vocab_size with mock data."""
    if cfg.model.vocab_size is not None:
        return cfg
    if cfg.data.kind == DataKind.indexed:
        from launcher.data.check import data_vocab_size

        vocab = data_vocab_size(cfg.data)
    else:
        vocab = cfg.model.mock_vocab_size
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=vocab))
