"""The profiling window's section (`profile=torch|nsys`; `profile=none`, the default, costs
nothing): which steps, which ranks, what is recorded. launcher.run.profile runs it."""

from dataclasses import dataclass, field
from typing import List, Optional

from launcher.config.choices import ProfileKind
from launcher.config.error import ConfigError


@dataclass
class ProfileConfig:
    """A window of training steps profiled on some ranks (Megatron-LM's --profile,
    --profile-step-start/end, --profile-ranks, --use-pytorch-profiler, --record-memory-history)."""

    kind: ProfileKind = ProfileKind.none
    """none; torch: torch.profiler over the window, a Chrome trace per profiled rank in
    RUN_DIR/profile/rank<r>.json.gz (Perfetto, chrome://tracing); nsys: cudaProfilerStart/Stop
    around the window and NVTX ranges, for `nsys profile --capture-range=cudaProfilerApi`."""
    steps: Optional[List[int]] = None
    """The window, [first, last] training steps (1-based, both profiled); null: the first two
    steady-state steps (after train.warmup_steps and the CUDA-graph warmup and capture). Its
    steps are left out of throughput: the profiler slows them."""
    ranks: List[int] = field(default_factory=lambda: [0])
    """Global ranks that profile (Megatron-LM's --profile-ranks)."""
    memory: bool = False
    """Record the CUDA allocator's history from the start of the rank and dump a snapshot after
    the window (RUN_DIR/profile/memory_rank<r>.pickle; https://pytorch.org/memory_viz), and on an
    out-of-memory error before it is raised (memory_oom_rank<r>.pickle). GPU only."""
    with_stack: bool = False
    """torch: record the Python stack of each op (larger traces)."""

    def __post_init__(self):
        if self.kind == ProfileKind.none:  # its keys act on nothing: config.effect refuses them
            return
        if self.steps is not None and (len(self.steps) != 2 or not 1 <= self.steps[0]
                                       <= self.steps[1]):
            raise ConfigError(f"profile.steps={list(self.steps)} is not a window [first, last] of "
                              "training steps with 1 <= first <= last; set it like "
                              "profile.steps=[5,6]")
        if not self.ranks or min(self.ranks) < 0 or len(set(self.ranks)) != len(self.ranks):
            raise ConfigError(f"profile.ranks={list(self.ranks)} must name distinct global ranks "
                              "(0 or more); set it like profile.ranks=[0]")

    @property
    def enabled(self) -> bool:
        return self.kind != ProfileKind.none
