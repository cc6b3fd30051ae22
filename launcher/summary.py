"""A run's result as summary.json holds it: typed values with one writer and one reader.

`RunSummary` is a run that finished (status ok), with its `RunMetrics`; `RunFailure` is a run
that did not (refused, failed, killed, ended by Slurm). The launch process writes them (`write`,
atomically, with `schema_version`); every sweep module reads them through `read`. The JSON keeps
the field names users and the README know. Standard library only: every stage may import it.
"""

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import List, Optional, Union

from launcher.files import write_json_atomic

SCHEMA_VERSION = 1
FILE = "summary.json"


@dataclass
class RunMetrics:
    """The measured part (the summary's `metrics`): throughput over the steady-state steps
    (medians of the per-step rates), memory, losses, the first parameter group's all-gather."""

    tokens_per_s_per_gpu: Optional[float] = None
    tflops_per_gpu: Optional[float] = None
    mfu: Optional[float] = None
    step_time_s_p50: Optional[float] = None
    step_time_s_p90: Optional[float] = None
    step_time_s_low: Optional[float] = None
    step_time_s_high: Optional[float] = None
    """The 95% interval of the median step time (distribution-free, launcher.run.step_stats
    median_interval); null below 6 steady-state steps. The rates' intervals follow from it: each
    is a constant over the step time."""
    throughput_null_reason: Optional[str] = None
    peak_memory_allocated_bytes: Optional[int] = None
    peak_memory_reserved_bytes: Optional[int] = None
    peak_rss_bytes: Optional[int] = None
    rss_growth_bytes_per_step: Optional[float] = None
    final_loss: Optional[float] = None
    final_valid_loss: Optional[float] = None
    first_group_prefetches: int = 0
    first_group_issued_in: Optional[str] = None
    first_group_bytes: Optional[int] = None
    first_group_allgather_s: Optional[float] = None
    first_group_wait_s: Optional[float] = None
    first_group_samples: int = 0
    first_group_null_reason: Optional[str] = None
    cuda_graph_captured: bool = False


@dataclass
class ProfileResult:
    """The profiling window of a run (config section `profile`; launcher.run.profile)."""

    kind: str
    steps: List[int]
    """The window's steps this run profiled (left out of its throughput)."""
    files: List[str] = field(default_factory=list)
    """What the window wrote, relative to the run directory: a Chrome trace per profiled rank
    (torch), memory snapshots (profile.memory)."""
    breakdown_ms: Optional[dict] = None
    """torch, rank 0 profiled: per part of the step, the median over the window's steps of its
    time (ms): `step`, `forward_backward` (a graph replay counted there), `optimizer`,
    `first_group.wait`; GPU time where the trace has the range on the GPU, else host time."""


@dataclass
class RunSummary:
    """A run that finished: where and how it ran, its steps, and its metrics."""

    metrics: RunMetrics
    config: dict
    status: str = "ok"
    backend: Optional[str] = None
    world_size: int = 1
    device: Optional[str] = None
    device_memory_bytes: Optional[int] = None
    """The GPU's total memory (torch's device properties); null on a CPU."""
    torch_cuda_queued_calls: Optional[int] = None
    megatron_core_version: Optional[str] = None
    torch_version: Optional[str] = None
    steps_run: List[int] = field(default_factory=list)
    steady_state_steps: List[int] = field(default_factory=list)
    steady_state_step_times_s: List[float] = field(default_factory=list)
    losses: List[float] = field(default_factory=list)
    """Rank 0's training loss of each step in `steps_run`, as the step computed it (the mean over
    microbatches and data-parallel ranks): what a sweep compares bit for bit against its
    baseline (launcher.sweep.numerics). A resumed run holds the steps it ran after resuming."""
    tokens_per_step: int = 0
    flops_per_step: float = 0.0
    peak_flops: Optional[float] = None
    rank0_weight_shard_numel: Optional[int] = None
    hosts: List[str] = field(default_factory=list)
    devices_by_host: dict = field(default_factory=dict)
    env: list = field(default_factory=list)
    slurm_job_id: Optional[str] = None
    wrapper: Optional[str] = None
    cuda_graph_wrapper: Optional[str] = None
    num_parameters: Optional[int] = None
    resumed_from: Optional[str] = None
    checkpoints: List[str] = field(default_factory=list)
    profile: Optional[ProfileResult] = None

    @property
    def peak_memory_bytes(self) -> Optional[int]:
        """The memory a sweep weighs throughput against: the CUDA allocator's peak reserved bytes
        (what the device gives the process, a graph's pool included) on a GPU, the process's max
        RSS on a CPU."""
        m = self.metrics
        return m.peak_memory_reserved_bytes if m.peak_memory_reserved_bytes is not None \
            else m.peak_rss_bytes

    def throughput_samples(self) -> List[float]:
        """tokens/s/GPU of each steady-state step: what a sweep's statistics draw from."""
        return [self.tokens_per_step / t / self.world_size for t in self.steady_state_step_times_s]


@dataclass
class RunFailure:
    """A run that did not finish: its class (launcher.run.failures), one line, the log's end."""

    status: str
    message: str
    log_excerpt: str = ""
    failed_rank: Optional[int] = None
    exitcode: Optional[int] = None
    crash_log: Optional[str] = None
    slurm_job_id: Optional[str] = None
    config: Optional[dict] = None


Result = Union[RunSummary, RunFailure]


def write(folder: str, result: Result) -> str:
    """summary.json in `folder`, whole or not at all; returns its path."""
    path = os.path.join(folder, FILE)
    write_json_atomic(path, {**dataclasses.asdict(result), "schema_version": SCHEMA_VERSION})
    return path


def read(folder: str) -> Optional[Result]:
    """The run's result, None where it wrote none (or an unreadable one: a run killed while
    writing leaves the old file or none, never half of one)."""
    try:
        with open(os.path.join(folder, FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get("status") != "ok":
        return RunFailure(**_known(RunFailure, data))
    metrics = RunMetrics(**_known(RunMetrics, data.get("metrics", {})))
    profile = data.get("profile") and ProfileResult(**_known(ProfileResult, data["profile"]))
    return RunSummary(**{**_known(RunSummary, data), "metrics": metrics, "profile": profile})


def _known(kind, data: dict) -> dict:
    """The fields of `kind` that `data` holds (a newer writer's extra fields are left out)."""
    names = {f.name for f in dataclasses.fields(kind)}
    return {k: v for k, v in data.items() if k in names}
