"""The schema's sections for how it runs: training (train, with its checkpoints), data, logging
(with wandb), runtime and sweep, one dataclass per config group, mirrored by
conf/<group>/*.yaml. Each section's own rules live in its `__post_init__`; no rule ever
rewrites a setting. What is built is in model.py; the root and the rules across sections are in
schema.py.
"""

import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from launcher.config.choices import DataKind, Device, LrSchedule, Precision, WandbMode

from launcher.config.error import ConfigError, positive, size_or_null, text_or_null
from launcher.config.fp8 import Fp8Config


@dataclass
class CheckpointConfig:
    """Distributed checkpoints in Megatron-FSDP's fsdp_dtensor format, Megatron-LM's layout
    (launcher/run/checkpoint.py)."""

    interval: int = 0
    """Save every N steps, and at the last step; 0 saves nothing."""
    dir: Optional[str] = None
    """Where checkpoints go; null means <run dir>/checkpoints. Fix it to resume a killed run."""
    resume: Optional[str] = None
    """null: start at step 1 | auto: the newest complete checkpoint in `dir`, if any | a path:
    a checkpoint (iter_NNNNNNN), or a folder of them (Megatron-LM's --save) for its newest."""

    def __post_init__(self):
        if self.interval < 0:
            raise ConfigError(f"train.checkpoint.interval={self.interval} must be >= 0; "
                              "set 0 (no checkpoints) or a number of steps")
        for key in ("dir", "resume"):
            text_or_null(f"train.checkpoint.{key}", getattr(self, key))


@dataclass
class TrainConfig:
    """The loop: steps, batch sizes, optimizer, schedule, precision."""

    steps: int = 20
    """Optimizer steps."""
    micro_batch_size: int = 2
    """Samples per microbatch per data-parallel rank."""
    global_batch_size: int = 8
    """Samples per optimizer step, all ranks; microbatches = global / (micro x dp)."""
    lr: float = 1e-3
    """Peak learning rate."""
    min_lr: float = 0.0
    """Final learning rate of a decaying schedule."""
    lr_schedule: LrSchedule = LrSchedule.constant
    """constant | linear | cosine decay after warmup."""
    lr_warmup_steps: int = 0
    """Linear learning-rate warmup steps. A run shorter than that warms up for its whole length,
    each step at the LR this warmup gives it (the decay, which it never reaches, is put after)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient-norm clip; 0 turns clipping off."""
    precision: Precision = Precision.bf16
    """bf16 | fp32; a CPU run needs fp32."""
    seed: int = 1234
    """Seed of model init and data."""
    warmup_steps: int = 2
    """Steps excluded from throughput at the start (plus CUDA-graph warmup and capture)."""
    check_nan_in_grad: Optional[bool] = None
    """Megatron-FSDP's check of every gradient bucket before the optimizer step
    (check_for_nan_in_grad): a host sync per bucket, and not capturable by a CUDA graph. null:
    on, as Megatron-LM, and off with a CUDA graph (Megatron-LM refuses the check there). The
    loss is always checked before the step."""
    grad_reduce_in_bf16: bool = False
    """bf16 runs: Megatron-LM's --grad-reduce-in-bf16, which clears DistributedDataParallelConfig
    grad_reduce_in_fp32. Megatron-FSDP (megatron-core 0.19.2) does not read that field: it keeps
    and reduces gradients in fsdp.main_grads_dtype / fsdp.grad_comm_dtype (auto: bf16 for bf16
    weights), so this key changes nothing here; fsdp.main_grads_dtype=fp32 reduces in fp32."""
    inject_nan_at_step: Optional[int] = None
    """A test hook: make the loss non-finite at this step, to see the NaN guard stop the run."""
    eval_interval: int = 0
    """Validation loss every N steps (and at the last step); 0: none."""
    eval_iters: int = 2
    """Global batches of validation data per evaluation."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Saving and resuming."""
    fp8: Fp8Config = field(default_factory=Fp8Config)
    """FP8 GEMMs (Transformer Engine), as Megatron-LM's --fp8-* flags."""
    init_hf: Optional[str] = None
    """A Hugging Face model folder (config.json, *.safetensors) whose weights the model starts
    from, loaded on each rank before the M-FSDP wrap (launcher.run.hf_weights); the model
    section must match its config.json (`launch-hf import` writes one that does). null: random
    init. A resumed checkpoint's weights replace these."""

    @property
    def matmul_dtype(self) -> str:
        """The dtype the GEMMs run in, the peak MFU is measured against: fp8 with
        train.fp8.format set, else train.precision."""
        return "fp8" if self.fp8.enabled else Precision(self.precision).value

    def nan_grad_check(self, cuda_graph: bool) -> bool:
        """check_for_nan_in_grad: train.check_nan_in_grad, where null is on without a graph."""
        return (not cuda_graph) if self.check_nan_in_grad is None else self.check_nan_in_grad

    def __post_init__(self):
        for key in ("steps", "micro_batch_size", "global_batch_size"):
            positive(f"train.{key}", getattr(self, key))
        size_or_null("train.inject_nan_at_step", self.inject_nan_at_step)
        text_or_null("train.init_hf", self.init_hf)
        if self.global_batch_size % self.micro_batch_size:
            raise ConfigError(
                f"train.global_batch_size={self.global_batch_size} is not divisible by "
                f"train.micro_batch_size={self.micro_batch_size}; make it a multiple"
            )
        if self.lr <= 0:
            raise ConfigError(f"train.lr={self.lr} must be positive; set train.lr > 0")
        if self.grad_clip < 0:
            raise ConfigError(f"train.grad_clip={self.grad_clip} must be >= 0; use 0 to turn it off")
        # megatron's OptimizerParamScheduler asserts 0 <= min_lr <= max_lr (a rank's traceback)
        if not 0 <= self.min_lr <= self.lr:
            raise ConfigError(f"train.min_lr={self.min_lr} must lie between 0 and "
                              f"train.lr={self.lr}; set train.min_lr to at most train.lr")
        if self.weight_decay < 0:
            raise ConfigError(f"train.weight_decay={self.weight_decay} must be >= 0; use 0 to "
                              "turn it off")
        if not 0 <= self.seed < 2**32:  # numpy's seed range: a rank's traceback otherwise
            raise ConfigError(f"train.seed={self.seed} must lie between 0 and 2**32-1; set "
                              "train.seed to such an integer")
        if self.warmup_steps < 0:
            raise ConfigError(f"train.warmup_steps={self.warmup_steps} must be >= 0")
        if self.eval_interval < 0:
            raise ConfigError(f"train.eval_interval={self.eval_interval} must be >= 0; set 0 "
                              "(no validation) or a number of steps")
        positive("train.eval_iters", self.eval_iters)
        if self.lr_warmup_steps < 0:
            raise ConfigError(f"train.lr_warmup_steps={self.lr_warmup_steps} must be >= 0; set 0 "
                              "(no warmup) or a number of steps")


@dataclass
class DataConfig:
    """Training data."""

    kind: DataKind = DataKind.mock
    """mock: seeded synthetic sequences (each sample counts up from a random token by a random
    stride, so there is something to learn) | indexed: megatron-core indexed datasets (data.path)."""
    fixed_batch: bool = False
    """Reuse the first global batch every step (a memorisation check)."""
    path: Optional[str] = None
    """indexed: dataset prefixes (PREFIX.bin/.idx, as `launch-prepare` writes them), each
    optionally preceded by its blending weight, as Megatron-LM's --data-path: "0.3 A 0.7 B"."""
    split: str = "98,2,0"
    """indexed: train,valid,test weights of each dataset's documents (Megatron-LM's --split)."""
    cache_dir: Optional[str] = None
    """indexed: where megatron-core caches its sample indices; null: <run dir>/data_cache."""

    def __post_init__(self):
        text_or_null("data.cache_dir", self.cache_dir)
        if DataKind(self.kind) == DataKind.indexed and not self.path:
            raise ConfigError("data=indexed needs data.path; set data.path=PREFIX (the output of "
                              "`launch-prepare`), or \"W1 PREFIX1 W2 PREFIX2\" to blend")
        if not re.fullmatch(r"\d+(\.\d*)?,\d+(\.\d*)?,\d+(\.\d*)?", self.split):
            raise ConfigError(f"data.split={self.split} is not three comma-separated weights; "
                              "set it like data.split=98,2,0")
        if not self.split_weights()[0]:
            raise ConfigError(f"data.split={self.split} gives the training split no weight; "
                              "set it like data.split=98,2,0")

    def split_weights(self) -> List[float]:
        return [float(w) for w in self.split.split(",")]

    def blend(self) -> tuple:
        """(prefixes, weights or None), as megatron-core's blend takes them."""
        words = (self.path or "").split()
        try:
            weights = [float(w) for w in words[0::2]]
        except ValueError:
            return words, None
        if len(words) % 2 or not all(0 < w < math.inf for w in weights):  # nan is neither
            raise ConfigError(f"data.path={self.path}: weights and prefixes must alternate, "
                              "weights positive and finite; set data.path=\"0.3 A 0.7 B\" or "
                              "data.path=A")
        return words[1::2], weights


@dataclass
class WandbConfig:
    """Weights & Biases; offline by default, files under the run directory."""

    mode: WandbMode = WandbMode.offline
    """offline (no key, no network) | online | disabled."""
    project: str = "mfsdp-launcher"
    """wandb project."""
    entity: Optional[str] = None
    """wandb entity (team); null for the default."""
    group: Optional[str] = None
    """wandb group, e.g. a sweep's name."""
    name: Optional[str] = None
    """wandb run name; null means the run directory's name (a sweep names each run by its cell)."""
    tags: List[str] = field(default_factory=list)
    """wandb tags."""
    verbose: bool = False
    """wandb's own console output (its banner and run summary); off, a run prints one wandb line:
    where the run is and how to send or open it."""

    def __post_init__(self):
        for key in ("entity", "group", "name"):
            text_or_null(f"logging.wandb.{key}", getattr(self, key))
        if not self.project.strip():
            raise ConfigError("logging.wandb.project is empty; give it a name")


HPARAMS = ("fsdp.prefetch_first_param_group", "cuda_graph.impl")
"""The keys a run shows in TensorBoard's HParams dashboard unless told others: the switch and what
it trades against."""


@dataclass
class TensorboardConfig:
    """TensorBoard, beside wandb: every metric wandb gets, under the same names, from rank 0."""

    enabled: bool = False
    """Write TensorBoard event files (torch.utils.tensorboard's writer)."""
    dir: Optional[str] = None
    """Where run folders go; null: <run dir>/tb. `tensorboard --logdir` of it (or of a sweep's
    directory) shows the runs."""
    name: Optional[str] = None
    """The run's folder under logging.tensorboard.dir, its name in TensorBoard; null: the run
    directory's name (a sweep names each run by its cell and repeat)."""
    hparams: List[str] = field(default_factory=lambda: list(HPARAMS))
    """Config keys shown as hyperparameters in TensorBoard's HParams dashboard, against the run's
    results (tokens/s/GPU, TFLOP/s/GPU, MFU, peak memory, first-group wait: `summary/*`). A sweep
    adds the keys it sweeps (config groups excepted: their choice is not a config value)."""

    def __post_init__(self):
        for key in ("dir", "name"):
            text_or_null(f"logging.tensorboard.{key}", getattr(self, key))


@dataclass
class LoggingConfig:
    """What is logged and how often."""

    interval: int = 1
    """Log every N steps."""
    print_steps: Optional[bool] = None
    """A console line per logged step; null: yes in a single run, no in a sweep's jobs (their
    output goes to each run's console.log, the sweep prints a line per job; metrics.jsonl and
    wandb keep every step). true in a sweep also leaves its jobs' output on the console."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Weights & Biases settings."""
    tensorboard: TensorboardConfig = field(default_factory=TensorboardConfig)
    """TensorBoard settings."""
    measure_first_group: bool = True
    """Time the first parameter group's all-gather and the first forward's wait for it
    (launcher.run.first_group: no host-device sync is added); false only counts the prefetches,
    to check that the measuring costs nothing."""

    def __post_init__(self):
        positive("logging.interval", self.interval)


@dataclass
class RuntimeConfig:
    """Where and how the ranks run."""

    device: Device = Device.auto
    """auto (cuda when available, else cpu) | cpu | cuda."""
    nproc_per_node: Optional[int] = None
    """Ranks per node (one per GPU). null: what torchrun, the Slurm launcher or
    cluster.gpus_per_node says (a number here must match them), else 1 (launcher.config.world)."""
    nnodes: Optional[int] = None
    """Nodes in the job. null: what torchrun, the Slurm launcher or cluster.nodes says, else 1."""
    dry_run: bool = False
    """Compose, validate and print what would run (a sweep: its plan; a run: parameters, FLOPs,
    tokens and memory per GPU), without importing torch or starting anything."""
    print_megatron_lm: bool = False
    """Print the equivalent Megatron-LM command line (pretrain_gpt.py's flags, and how the switch
    travels) for this run on this machine (runtime.device=cuda: on a GPU), then stop."""
    timeout_s: int = 600
    """Collective timeout of the process group (a stalled rank fails the job as `timeout`)."""
    rdzv_endpoint: Optional[str] = None
    """HOST:PORT of the c10d rendezvous, the same on every node (torchrun's --rdzv-endpoint);
    needed when runtime.nnodes > 1. null on one node: a free port on 127.0.0.1."""
    rdzv_timeout_s: int = 600
    """Seconds the rendezvous may take, from reaching its store at runtime.rdzv_endpoint to every
    node joining (torchrun's --rdzv-conf join_timeout, 600 by default); past it the run fails as
    `timeout` in one line, before any rank starts."""

    def __post_init__(self):
        for key in ("timeout_s", "rdzv_timeout_s"):
            positive(f"runtime.{key}", getattr(self, key))
        for key in ("nproc_per_node", "nnodes"):
            size_or_null(f"runtime.{key}", getattr(self, key))
        if self.rdzv_endpoint is not None:
            check_endpoint(self.rdzv_endpoint)
        if (self.nnodes or 1) > 1 and self.rdzv_endpoint is None:
            raise ConfigError(f"runtime.nnodes={self.nnodes} needs a rendezvous every node can "
                              "reach; set runtime.rdzv_endpoint=HOST:PORT (the same on every node)")


def check_endpoint(endpoint: str) -> None:
    """runtime.rdzv_endpoint is HOST:PORT with a port a socket can have: torch's rendezvous raises
    a traceback for one out of range, and port 0 would have the host pick a port no other node
    can know."""
    key = "runtime.rdzv_endpoint"
    found = re.fullmatch(r"([^:\s]+):(\d+)", endpoint)
    if not found:
        raise ConfigError(f"{key}={endpoint} is not HOST:PORT; set it like {key}=node001:29500")
    host, port = found.group(1), int(found.group(2))
    if not 1 <= port <= 65535:
        raise ConfigError(f"{key}={endpoint}: port {port} is out of range (1-65535); set a port "
                          f"in it, like {key}={host}:29500")


@dataclass
class SweepConfig:
    """A multirun (`launch -m`); the grid itself comes from the command line or a recipe's
    hydra.sweeper.params. Not part of a cell's id: it does not change what a run measures."""

    name: Optional[str] = None
    """The sweep's name, also its wandb group; null means the sweep directory's name."""
    repeats: int = 1
    """Runs of each valid cell, interleaved: each round runs every cell, in a shuffled order."""
    seed: int = 0
    """Seed of each round's cell order."""
    baseline: Dict[str, Any] = field(default_factory=dict)
    """The cell speedups are measured against, as swept values in the config's own nesting
    ({fsdp: {prefetch_first_param_group: true}}); empty means the cell with the values the config
    has without the sweep, else the first valid cell."""
    tune: bool = False
    """Race the cells (launcher.sweep.race): from round sweep.min_repeats on, stop running every
    cell whose throughput interval lies wholly below the best cell's; end when one cell is left,
    the cells left are within noise of each other, or sweep.repeats rounds are done; then write
    SWEEP_DIR/recipe/tuned.yaml (launcher.sweep.tuned)."""
    min_repeats: int = 2
    """Rounds every cell runs before the race may drop one (with sweep.tune=true)."""
    memory_limit_gib: Optional[float] = None
    """With sweep.tune=true: the race drops every cell whose measured peak memory (reserved by
    the CUDA allocator on a GPU, the process's max RSS on a CPU; rank 0's) is above this many
    GiB, after its first run; null: no limit."""
    allow_numerics_change: bool = False
    """With sweep.tune=true: let the tuner recommend a cell whose losses are `different` from the
    baseline's (`identical` and `close` always may; false also refuses losses never compared)."""
    pending_limit_min: float = 60
    """With a Slurm launcher: minutes a job may pend (its Slurm reason printed every minute)
    before the sweep cancels it as `cancelled` and goes on; a busy cluster may need more."""

    def __post_init__(self):
        positive("sweep.repeats", self.repeats)
        positive("sweep.min_repeats", self.min_repeats)
        if not self.pending_limit_min > 0:
            raise ConfigError(f"sweep.pending_limit_min={self.pending_limit_min} must be more "
                              "than 0; set it to the minutes a Slurm job may wait in the queue")
        if self.memory_limit_gib is not None and not self.memory_limit_gib > 0:
            raise ConfigError(f"sweep.memory_limit_gib={self.memory_limit_gib} must be more than "
                              "0; set it to the GiB a cell may use, or null for no limit")
        if self.tune and self.min_repeats > self.repeats:
            raise ConfigError(
                f"sweep.min_repeats={self.min_repeats} exceeds sweep.repeats={self.repeats}, so "
                "the race could never drop a cell; set sweep.repeats to at least "
                f"{self.min_repeats}, or lower sweep.min_repeats")
        if self.name is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ConfigError(
                f"sweep.name={self.name} may hold only letters, digits, '_', '.' and '-' "
                "(it names the wandb group); pick such a name"
            )
