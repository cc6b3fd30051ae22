"""The root of the schema: `Config`, one field per config group, and the rules across sections.

Hydra composes a writable copy of `Config` (registered in the ConfigStore as the schema of
conf/config.yaml); `to_config` (convert.py) turns the composed DictConfig into plain dataclass
instances, which runs every section's `__post_init__` checks. Rules across sections live in `Config.__post_init__`;
rules that need the world size live in `check_world_size`, called where the world is known.
"""

import dataclasses
from dataclasses import dataclass, field
from enum import Enum

from launcher.config.choices import CudaGraphImpl, DataKind, FsdpDtype, Precision
from launcher.config.cluster import ClusterConfig
from launcher.config.error import ConfigError
from launcher.config.fp8 import check_fp8
from launcher.config.model import CudaGraphConfig, FsdpConfig, ModelConfig, ParallelConfig
from launcher.config.profile import ProfileConfig
from launcher.config.world import resolve_world
from launcher.config.sections import (
    DataConfig, LoggingConfig, RuntimeConfig, SweepConfig, TrainConfig,
)


@dataclass
class Config:
    """The root: one field per config group."""

    model: ModelConfig = field(default_factory=ModelConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    fsdp: FsdpConfig = field(default_factory=FsdpConfig)
    cuda_graph: CudaGraphConfig = field(default_factory=CudaGraphConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)

    def __post_init__(self):
        if self.fsdp.prefetch_first_param_group and (
            CudaGraphImpl(self.cuda_graph.impl) == CudaGraphImpl.full_iteration
        ):
            raise ConfigError(
                "fsdp.prefetch_first_param_group=true cannot be captured by "
                "cuda_graph.impl=full_iteration (the all-gather is enqueued outside the graph); "
                "set fsdp.prefetch_first_param_group=false"
            )
        if self.train.check_nan_in_grad and self.cuda_graph.enabled:
            raise ConfigError(
                "train.check_nan_in_grad=true cannot run inside a CUDA graph (it syncs with the "
                f"host per bucket) with cuda_graph.impl={self.cuda_graph.impl.value}; set "
                "train.check_nan_in_grad=false (the loss is still checked every step)"
            )
        indexed = self.data.kind == DataKind.indexed
        if indexed and self.train.eval_interval and not self.data.split_weights()[1]:
            raise ConfigError(
                f"train.eval_interval={self.train.eval_interval} reads the validation split, "
                f"which data.split={self.data.split} gives no weight; set data.split like 98,2,0, "
                "or train.eval_interval=0")
        if self.train.inject_nan_at_step is not None and self.cuda_graph.enabled:
            raise ConfigError(
                f"train.inject_nan_at_step={self.train.inject_nan_at_step} cannot poison a "
                f"replayed CUDA graph (cuda_graph.impl={self.cuda_graph.impl.value} runs no Python "
                "inside the step); remove train.inject_nan_at_step or set cuda_graph.impl=none")
        resolve_world(self.runtime, self.cluster)  # the runtime and cluster sections agree
        self._check_main_params()
        check_fp8(self.train.fp8, Precision(self.train.precision), self.model, self.fsdp)
        self._check_experts()
        self._check_hparams()
        self._check_profile_window()
        tp = self.parallel.tensor_model_parallel_size
        if self.model.num_attention_heads % tp:
            raise ConfigError(
                f"model.num_attention_heads={self.model.num_attention_heads} is not divisible by "
                f"parallel.tensor_model_parallel_size={tp}; pick a tensor-parallel size that "
                "divides the heads"
            )
        groups = self.model.query_groups
        if groups % tp and tp % groups:
            raise ConfigError(
                f"model.num_query_groups={groups} must be a multiple or a divisor of "
                f"parallel.tensor_model_parallel_size={tp} (megatron-core's TransformerConfig); "
                "pick sizes where one divides the other")

    def _check_profile_window(self) -> None:
        if not self.profile.enabled:
            return
        first, last = self.profile_window
        if self.profile.steps is None and first > last:
            raise ConfigError(
                f"profile={self.profile.kind.value} profiles the first two steady-state steps "
                f"unless profile.steps says otherwise, and {no_steady_state(self)}, or set "
                "profile.steps")
        if last > self.train.steps:
            raise ConfigError(
                f"profile.steps={list(self.profile.steps)} lies outside the run's steps "
                f"1..{self.train.steps}; set profile.steps to a window within them, or raise "
                "train.steps")

    @property
    def profile_window(self) -> tuple:
        """(first, last) profiled step: profile.steps, else the first two steady-state steps."""
        if self.profile.steps is not None:
            return tuple(self.profile.steps)
        first = self.excluded_steps + 1
        return first, min(first + 1, self.train.steps)

    def _check_hparams(self) -> None:
        values = as_dict(self)
        for key in self.logging.tensorboard.hparams:
            if isinstance(lookup(values, key), (dict, Missing)):
                raise ConfigError(
                    f"logging.tensorboard.hparams names {key}, which is not a config value; name "
                    "values such as fsdp.prefetch_first_param_group (`launch --cfg job` prints "
                    "every key)")

    def _check_experts(self) -> None:
        moe, ep = self.model.moe, self.parallel.expert_model_parallel_size
        tp = self.parallel.tensor_model_parallel_size
        if moe.enabled and tp > 1:
            raise ConfigError(
                f"parallel.tensor_model_parallel_size={tp} with model.moe.num_experts="
                f"{moe.num_experts} needs sequence parallelism, which the launcher does not turn "
                "on (megatron-core's MoELayer raises in training without it, moe_layer.py); set "
                "parallel.tensor_model_parallel_size=1 and split the experts with "
                "parallel.expert_model_parallel_size")
        if moe.enabled and moe.num_experts % ep:
            raise ConfigError(
                f"parallel.expert_model_parallel_size={ep} must divide model.moe.num_experts="
                f"{moe.num_experts} (each expert-parallel rank holds the same number of experts, "
                "megatron-core moe_layer.py); pick a divisor")

    def _check_main_params(self) -> None:
        """bf16 main weights give the optimizer bf16 gradients, and megatron-core's gradient
        clipping asserts fp32 ones (optimizer/clip_grads.py: clip_grad_by_total_norm_fp32)."""
        dtype = FsdpDtype(self.fsdp.main_params_dtype)
        if dtype == FsdpDtype.auto:
            dtype = FsdpDtype(Precision(self.train.precision).value)
        grads = FsdpDtype(self.fsdp.main_grads_dtype)
        if self.fsdp.main_params_dtype == FsdpDtype.auto and grads not in (FsdpDtype.auto, dtype):
            # no main-weight buffer: M-FSDP hands the main gradients to the model weights' .grad
            # uncast (param_and_grad_buffer.py), which torch refuses for another dtype
            raise ConfigError(
                f"fsdp.main_grads_dtype={grads.value} needs main weights to cast into, and "
                f"fsdp.main_params_dtype=auto keeps none ({dtype.value} model weights take the "
                f"gradients as they are); set fsdp.main_params_dtype=fp32, or "
                f"fsdp.main_grads_dtype=auto")
        if dtype == FsdpDtype.bf16 and self.train.grad_clip > 0:
            raise ConfigError(
                f"fsdp.main_params_dtype={self.fsdp.main_params_dtype.value} keeps bf16 main "
                f"weights (train.precision={self.train.precision.value}), and megatron-core's "
                f"gradient clipping (train.grad_clip={self.train.grad_clip}) asserts fp32 "
                "gradients; set fsdp.main_params_dtype=fp32, or train.grad_clip=0")

    @property
    def excluded_steps(self) -> int:
        """Steps left out of throughput: train.warmup_steps, plus CUDA-graph warmup and capture."""
        graph = self.cuda_graph.warmup_steps + 1 if self.cuda_graph.enabled else 0
        return self.train.warmup_steps + graph

    @property
    def excluded_by(self) -> str:
        """The settings that make excluded_steps, only those that apply: `train.warmup_steps=5`;
        with CUDA graphs, `train.warmup_steps=2, cuda_graph.warmup_steps=3 and 1 capture step`."""
        parts = [f"train.warmup_steps={self.train.warmup_steps}"] \
            if self.train.warmup_steps else []
        if self.cuda_graph.enabled:
            parts.append(f"cuda_graph.warmup_steps={self.cuda_graph.warmup_steps} and 1 capture "
                         "step")
        return ", ".join(parts)


def no_steady_state(cfg: Config) -> str:
    """Why the run measures no throughput (every step is excluded from it), or "". A single run
    still trains and says so; a sweep refuses the cell (check_steady_state), since throughput is
    what it compares."""
    excluded = cfg.excluded_steps
    if cfg.train.steps > excluded:
        return ""
    return (f"train.steps={cfg.train.steps} leaves no steady-state step after the {excluded} "
            f"excluded ({cfg.excluded_by}); set train.steps above {excluded}")


def check_steady_state(cfg: Config) -> None:
    """A sweep's rule: every cell has steady-state steps to measure."""
    reason = no_steady_state(cfg)
    if reason:
        raise ConfigError(reason)


LAUNCH_WORLD = "runtime.nproc_per_node x runtime.nnodes"


def check_world_size(cfg: Config, world_size: int, source: str = LAUNCH_WORLD) -> int:
    """Checks the parallel sizes against the world size that `source` gives (the runtime
    section, a Slurm launcher's tasks, or the world torchrun started); returns the data-parallel
    size. Called where the world is known: before `launch` spawns, in a sweep's pre-flight, and in
    a rank that another starter started, before training."""
    mp = cfg.parallel.model_parallel_size
    if world_size % mp:
        raise ConfigError(
            f"world size {world_size} ({source}) is not divisible by tp x pp x cp = {mp}; "
            f"change {source} or the parallel sizes"
        )
    dp = world_size // mp
    check_expert_groups(cfg, world_size, dp, source)
    outside = [r for r in cfg.profile.ranks if r >= world_size] if cfg.profile.enabled else []
    if outside:
        raise ConfigError(
            f"profile.ranks={list(cfg.profile.ranks)} names rank {outside[0]}, outside the world "
            f"of {world_size} ({source}); pick ranks from 0 to {world_size - 1}")
    step = cfg.train.micro_batch_size * dp
    if cfg.train.global_batch_size % step:
        raise ConfigError(
            f"train.global_batch_size={cfg.train.global_batch_size} is not divisible by "
            f"train.micro_batch_size x data-parallel size = {cfg.train.micro_batch_size} x {dp}; "
            f"set train.global_batch_size to a multiple of {step}"
        )
    return dp


def check_expert_groups(cfg: Config, world_size: int, dp: int, source: str) -> None:
    """Expert parallelism and HSDP groups against the data-parallel size (megatron-core
    parallel_state.initialize_model_parallel's asserts)."""
    ep = cfg.parallel.expert_model_parallel_size
    if dp % ep:
        raise ConfigError(
            f"parallel.expert_model_parallel_size={ep} must divide the data-parallel size {dp} "
            f"(world {world_size} from {source}, over tp x pp x cp); change {source} or the "
            "expert-parallel size")
    instances = cfg.fsdp.num_distributed_optimizer_instances
    cp = cfg.parallel.context_parallel_size
    # the expert data-parallel size: world / (expert tp (= tp) x ep x pp)
    expert_dp = world_size // (cfg.parallel.tensor_model_parallel_size * ep
                               * cfg.parallel.pipeline_model_parallel_size)
    for what, size in (("data-parallel x context-parallel size", dp * cp),
                       ("expert data-parallel size", expert_dp)):
        if size % instances:
            raise ConfigError(
                f"fsdp.num_distributed_optimizer_instances={instances} must divide the {what} "
                f"{size} (world {world_size} from {source}); change {source} or the instances")
    ckpt = cfg.train.checkpoint
    if cfg.model.moe.enabled and expert_dp > 1 and ckpt.interval:
        # seen on gloo (2 and 4 ranks, with and without HSDP): the save fails or hangs in
        # preprocess_state_dict_for_uneven_dtensor; one expert per rank saves and resumes
        raise ConfigError(
            f"train.checkpoint.interval={ckpt.interval} cannot save this mixture of experts: "
            f"its experts are sharded over an expert data-parallel size of {expert_dp} (world "
            f"{world_size} / (tp x ep x pp)), and megatron-core 0.19.2's Megatron-FSDP fails on "
            "such experts' DTensors (\"DTensor chunk metadata is invalid\") or hangs; raise "
            "parallel.expert_model_parallel_size until that size is 1 (one copy of each "
            "expert), or set train.checkpoint.interval=0")


def as_dict(section) -> dict:
    """A config (the root or a section) as plain data, enums as their values: what summary.json,
    wandb and TensorBoard record. Derived where it is written, from the one typed Config."""
    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value.value if isinstance(value, Enum) else value

    return plain(dataclasses.asdict(section))


class Missing:
    """What `lookup` finds where a dotted key names nothing."""


def lookup(values: dict, key: str):
    """The value at a dotted key of a config's plain data; a Missing where there is none."""
    for part in key.split("."):
        if not isinstance(values, dict) or part not in values:
            return Missing()
        values = values[part]
    return values


def unknown_keys(node, schema, prefix: str = "") -> list:
    """Dotted keys of `node` that the dataclass `schema` has no field for."""
    fields = {f.name: f.type for f in dataclasses.fields(schema)}
    found = []
    for key in node:
        if key not in fields:
            found.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(fields[key]):
            found += unknown_keys(node[key], fields[key], f"{prefix}{key}.")
    return found
