"""Which keys act only under another key's value, as one table, and the rule that reads it: a key
set away from its default where the key that gives it effect is off is refused, in one line that
names that key. A setting that trains with an `ok` summary and does nothing is a wrong result,
not a harmless one: a sweep cell labelled with it measures something else.

Only what the user set is judged: a key the command line sets is refused where it does nothing,
and so is a key nobody on the command line made moot (a recipe or an option that contradicts
itself); a recipe's value that the user's own override of its governor makes moot (the recipe's
train.eval_iters under `train.eval_interval=0`) is left alone, and the run's start says so.

Left out on purpose: model.mock_vocab_size (every model option sets it; data=indexed reads the
tokenizer's vocabulary instead), and keys whose default itself can be inert (fsdp.prefetch_first_
param_group=true with no_shard), which their section's rules refuse by value.
"""

import dataclasses
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from launcher.config.choices import (
    CudaGraphImpl, DataKind, LrSchedule, PositionEmbedding, Precision, ProfileKind,
    RecomputeGranularity, ShardingStrategy, WandbMode,
)
from launcher.config.error import ConfigError
from launcher.config.schema import Config, as_dict, lookup
from launcher.config.sections import SweepConfig
from launcher.config.values import shown

@dataclass(frozen=True)
class Dependency:
    keys: Tuple[str, ...]
    """Dotted keys that act only where `active` holds."""
    governor: str
    """The key that gives them effect (MULTIRUN: launch -m)."""
    active: Callable[[Config], bool]
    """Whether the governor, in this config, gives them effect."""
    enable: str
    """What to set for them to act, as the fix says it."""
    in_sweep: bool = False
    """A sweep's plan gives them effect whatever `active` says (cluster.gpu predicts each cell)."""


def _moe(cfg: Config) -> bool:
    return cfg.model.moe.enabled


def _printed(cfg: Config) -> bool:
    """A dry run or the Megatron-LM command: what is printed for a cluster, not run here."""
    return cfg.runtime.dry_run or cfg.runtime.print_megatron_lm


def _gpu_acts(cfg: Config) -> bool:
    """cluster.gpu is printed for, or its hardware file's node decides the world's ranks per node
    (launcher.config.world): nothing else states them."""
    return _printed(cfg) or (cfg.runtime.nproc_per_node is None
                             and cfg.cluster.gpus_per_node is None)


TABLE = (
    Dependency(("profile.steps", "profile.ranks", "profile.memory", "profile.with_stack"),
               "profile.kind", lambda c: c.profile.kind != ProfileKind.none,
               "profile=torch or profile=nsys"),
    Dependency(("profile.with_stack",), "profile.kind",
               lambda c: c.profile.kind == ProfileKind.torch, "profile=torch"),
    Dependency(("model.moe.router_topk", "model.moe.ffn_hidden_size",
                "model.moe.shared_expert_ffn_hidden_size", "model.moe.layer_freq",
                "model.moe.aux_loss_coeff", "model.moe.token_dispatcher",
                "model.moe.router_score_function", "model.moe.grouped_gemm",
                "parallel.expert_model_parallel_size"),
               "model.moe.num_experts", _moe, "model.moe.num_experts"),
    Dependency(("model.recompute.method", "model.recompute.num_layers"),
               "model.recompute.granularity",
               lambda c: c.model.recompute.granularity == RecomputeGranularity.full,
               "model.recompute.granularity=full"),
    Dependency(("model.recompute.modules",), "model.recompute.granularity",
               lambda c: c.model.recompute.granularity == RecomputeGranularity.selective,
               "model.recompute.granularity=selective"),
    Dependency(("model.rotary_base", "model.rotary_percent", "model.rope_scaling"),
               "model.position_embedding",
               lambda c: c.model.position_embedding == PositionEmbedding.rope,
               "model.position_embedding=rope"),
    Dependency(("model.rope_scaling_factor",), "model.rope_scaling",
               lambda c: c.model.rope_scaling, "model.rope_scaling=true"),
    Dependency(("fsdp.double_buffer",), "fsdp.sharding_strategy",
               lambda c: c.fsdp.sharding_strategy == ShardingStrategy.optim_grads_params,
               "fsdp.sharding_strategy=optim_grads_params"),
    Dependency(("fsdp.nccl_ub",), "fsdp.double_buffer", lambda c: c.fsdp.double_buffer,
               "fsdp.double_buffer=true"),
    Dependency(("fsdp.outer_dp_sharding_strategy",), "fsdp.num_distributed_optimizer_instances",
               lambda c: c.fsdp.num_distributed_optimizer_instances > 1,
               "fsdp.num_distributed_optimizer_instances to 2 or more"),
    Dependency(("cuda_graph.warmup_steps",), "cuda_graph.impl",
               lambda c: c.cuda_graph.impl != CudaGraphImpl.none, "cuda_graph.impl=full_iteration"),
    Dependency(("cuda_graph.modules",), "cuda_graph.impl",
               lambda c: c.cuda_graph.impl in (CudaGraphImpl.local,
                                               CudaGraphImpl.transformer_engine),
               "cuda_graph.impl=local or transformer_engine (per-layer graphs, which "
               "Megatron-FSDP does not support yet)"),
    Dependency(("data.path", "data.split", "data.cache_dir"), "data.kind",
               lambda c: c.data.kind == DataKind.indexed, "data=indexed"),
    Dependency(("train.eval_iters",), "train.eval_interval", lambda c: c.train.eval_interval > 0,
               "train.eval_interval to a number of steps"),
    Dependency(("train.min_lr",), "train.lr_schedule",
               lambda c: c.train.lr_schedule != LrSchedule.constant,
               "train.lr_schedule=cosine or linear"),
    Dependency(("train.fp8.recipe", "train.fp8.param_gather"), "train.fp8.format",
               lambda c: c.train.fp8.enabled, "train.fp8.format=e4m3 or hybrid"),
    Dependency(("train.grad_reduce_in_bf16",), "train.precision",
               lambda c: c.train.precision == Precision.bf16, "train.precision=bf16"),
    Dependency(("train.checkpoint.dir",), "train.checkpoint.interval",
               lambda c: bool(c.train.checkpoint.interval or c.train.checkpoint.resume),
               "train.checkpoint.interval (or train.checkpoint.resume)"),
    Dependency(("logging.tensorboard.dir", "logging.tensorboard.name",
                "logging.tensorboard.hparams"), "logging.tensorboard.enabled",
               lambda c: c.logging.tensorboard.enabled, "logging.tensorboard.enabled=true"),
    Dependency(("logging.wandb.project", "logging.wandb.entity", "logging.wandb.group",
                "logging.wandb.name", "logging.wandb.tags", "logging.wandb.verbose"),
               "logging.wandb.mode", lambda c: c.logging.wandb.mode != WandbMode.disabled,
               "logging.wandb.mode=offline or online"),
    Dependency(("sweep.min_repeats", "sweep.memory_limit_gib", "sweep.allow_numerics_change"),
               "sweep.tune", lambda c: c.sweep.tune, "sweep.tune=true"),
    Dependency(("cluster.gpu",), "runtime.dry_run", _gpu_acts,
               "runtime.dry_run=true for its prediction (a run reads it only where nothing else "
               "states the ranks per node)", in_sweep=True),
    Dependency(("cluster.kernels",), "runtime.dry_run", _printed,
               "runtime.dry_run=true or runtime.print_megatron_lm=true (a run uses the kernels "
               "installed where it runs)", in_sweep=True),
)

SLURM_ONLY = ("sweep.pending_limit_min",)
"""Sweep keys only a Slurm launcher reads (launcher.sweep.submit)."""


def sweep_keys() -> Tuple[str, ...]:
    """Every key of the sweep section: they configure `launch -m`, and nothing in one run."""
    return tuple(f"sweep.{f.name}" for f in dataclasses.fields(SweepConfig))


def given_keys(overrides: Sequence[str]) -> List[str]:
    """The dotted keys (or config groups) a command line's overrides set: `+a.b=1` -> `a.b`."""
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides]


def check_effect(cfg: Config, swept: Optional[Sequence[str]] = None,
                 given: Optional[Sequence[str]] = None) -> None:
    """Refuses the first key set away from its default whose governor gives it no effect.

    swept: None for a single run, where the sweep keys act on nothing. For a sweep's cell, the
    keys the sweep varies: the sweep keys act, and a key whose governor is swept is let through
    where that governor is off (cuda_graph.warmup_steps=1 across cuda_graph.impl=none,
    full_iteration acts in the graph cells; the same grid cannot leave it out of the others).
    given: the keys the command line sets (given_keys); None: every key counts as the user's.
    """
    values, defaults = as_dict(cfg), as_dict(Config())
    if swept is None:
        for key in sweep_keys():
            if lookup(values, key) != lookup(defaults, key):
                raise ConfigError(
                    f"{key}={shown(lookup(values, key))} has no effect in a single run (it "
                    "configures a sweep); add -m (launch -m ...), or leave it at its default "
                    f"({shown(lookup(defaults, key))})")
    for key, rule in inert(cfg, swept):
        if key not in moot(cfg, given):
            raise inert_error(cfg, key, rule)


def inert_error(cfg: Config, key: str, rule: Dependency) -> ConfigError:
    values, defaults = as_dict(cfg), as_dict(Config())
    return ConfigError(
        f"{key}={shown(lookup(values, key))} has no effect with {rule.governor}="
        f"{shown(lookup(values, rule.governor))}; set {rule.enable}, or leave {key} at its "
        f"default ({shown(lookup(defaults, key))})")


def check_sweep_section(sweep, launcher: str, slurm: bool, given: Sequence[str]) -> None:
    """The sweep section's keys that act on nothing in this sweep, refused once for the whole
    sweep before its grid is planned (every cell would be refused for the same reason): the
    tuner's keys without sweep.tune, a Slurm-only key under another launcher (`launcher`: the
    hydra/launcher choice)."""
    cfg = dataclasses.replace(Config(), sweep=sweep)
    for key, rule in inert(cfg, swept=()):
        if key.startswith("sweep.") and key not in moot(cfg, given):
            raise inert_error(cfg, key, rule)
    default = SweepConfig()
    for key in SLURM_ONLY:
        name = key.split(".", 1)[1]
        value = getattr(sweep, name)
        if slurm or value == getattr(default, name) or (
                key not in given and is_swept("hydra/launcher", given)):
            continue
        raise ConfigError(
            f"{key}={shown(value)} has no effect with hydra/launcher={launcher} (only a Slurm "
            f"launcher reads it); add hydra/launcher=slurm, or leave {key} at its default "
            f"({shown(getattr(default, name))})")


def inert(cfg: Config, swept: Optional[Sequence[str]] = None) -> List[Tuple[str, Dependency]]:
    """(key, its rule) for each table key set away from its default whose governor is off (and
    not swept), in the table's order. swept: None for a single run, else the sweep's keys."""
    values, defaults = as_dict(cfg), as_dict(Config())
    in_sweep = swept is not None
    return [(key, rule) for rule in TABLE
            if not rule.active(cfg) and not is_swept(rule.governor, swept or ())
            and not (in_sweep and rule.in_sweep)
            for key in rule.keys if lookup(values, key) != lookup(defaults, key)]


def moot(cfg: Config, given: Optional[Sequence[str]]) -> List[str]:
    """The inert keys the user did not set but made inert, by setting their governor on the
    command line (a group choice sets every key under it): the recipe's, not a mistake."""
    return [key for key, _ in moot_rules(cfg, given)]


def moot_rules(cfg: Config, given: Optional[Sequence[str]]) -> List[Tuple[str, Dependency]]:
    if given is None:
        return []
    return [(key, rule) for key, rule in inert(cfg) if key not in given
            and is_swept(rule.governor, given)]


def moot_notes(cfg: Config, given: Optional[Sequence[str]]) -> Tuple[str, ...]:
    """`train.eval_iters=4 (not set on the command line) has no effect with
    train.eval_interval=0`, for each moot key: what the run's start says."""
    values = as_dict(cfg)
    return tuple(f"{key}={shown(lookup(values, key))} (not set on the command line) has no "
                 f"effect with {rule.governor}={shown(lookup(values, rule.governor))}"
                 for key, rule in moot_rules(cfg, given))


def is_swept(key: str, swept: Sequence[str]) -> bool:
    """`key` varies across the sweep: swept itself, or chosen by a swept config group
    (profile=none,torch sweeps profile.kind)."""
    return any(key == s or key.startswith(s + ".") for s in swept)
