"""Whether a run's estimated memory fits its cluster's GPU, and if not, the cheapest single
change that makes it fit: the dry run's verdict line and a sweep plan's mark. Arithmetic only,
with the memory estimate (launcher/estimate/memory.py) and the time model (launcher/estimate/predict.py).

The changes tried, each one override a user can paste: a more sharded fsdp.sharding_strategy,
selective recomputation (core_attn, megatron's default module), a smaller
train.micro_batch_size (a divisor of the current one), and full recomputation of every layer
(uniform, one layer a chunk: three keys, as megatron-core refuses full without a method and a
count). Each is validated as the run would be; of those whose memory fits, the one with the
shortest predicted step is named.
"""

from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

from launcher.config import (
    Config, ConfigError, RecomputeGranularity, RecomputeMethod, ShardingStrategy,
)
from launcher.estimate.memory import memory_per_gpu
from launcher.estimate.predict import GIB, predict
from launcher.estimate.topology import Cluster

SHARDING_ORDER = [ShardingStrategy.no_shard, ShardingStrategy.optim, ShardingStrategy.optim_grads,
                  ShardingStrategy.optim_grads_params]


@dataclass(frozen=True)
class Change:
    """One way to make the run fit: the overrides, and what the run becomes with them."""

    overrides: str
    """`key=value` (space-separated where one change takes several keys)."""
    memory_gib: float
    step_s: float


@dataclass(frozen=True)
class Fit:
    memory_gib: float
    capacity_gib: float
    change: Optional[Change]
    """The cheapest change that fits, where the run does not; None where it fits, or nothing
    tried does."""

    @property
    def fits(self) -> bool:
        return self.memory_gib <= self.capacity_gib

    def text(self) -> str:
        """`fits` or `does not fit` and what to change."""
        head = f"{self.memory_gib:.1f} GiB of {self.capacity_gib:g}"
        if self.fits:
            return f"{head}: fits"
        if self.change is None:
            return (f"{head}: does not fit, and no single change tried fits (sharding, "
                    "recomputation, micro-batch)")
        c = self.change
        return (f"{head}: does not fit; the cheapest change that fits: {c.overrides} "
                f"({c.memory_gib:.1f} GiB, {c.step_s:.3g} s/step predicted)")


def run_memory_gib(cfg: Config, dp: int) -> float:
    """The estimate for the run's own sharding strategy, with the cluster's layer spec."""
    return sum(memory_per_gpu(cfg, dp)[cfg.fsdp.sharding_strategy.value].values()) / GIB


def fit(cfg: Config, cluster: Cluster) -> Fit:
    """The run's verdict on `cluster` (its memory against the GPU's)."""
    dp = cluster.world // cfg.parallel.model_parallel_size
    need, capacity = run_memory_gib(cfg, dp), cluster.hardware.memory_gib
    if need <= capacity:
        return Fit(need, capacity, None)
    fitting = []
    for overrides, changed in candidates(cfg):
        memory = run_memory_gib(changed, dp)
        if memory <= capacity:
            try:
                step = predict(changed, cluster).timeline.step_s
            except ConfigError:  # the change does not suit the cluster's world
                continue
            fitting.append(Change(overrides, memory, step))
    return Fit(need, capacity, min(fitting, key=lambda c: c.step_s, default=None))


def candidates(cfg: Config) -> List[Tuple[str, Config]]:
    """(overrides, the config with them) for each change tried that validates."""
    m, t = cfg.model, cfg.train
    tried = []
    current = SHARDING_ORDER.index(ShardingStrategy(cfg.fsdp.sharding_strategy))
    for strategy in SHARDING_ORDER[current + 1:]:
        tried.append((f"fsdp.sharding_strategy={strategy.value}",
                      lambda c, s=strategy: replace(c, fsdp=replace(c.fsdp, sharding_strategy=s))))
    if m.recompute.granularity is None:
        selective = replace(m.recompute, granularity=RecomputeGranularity.selective)
        tried.append(("model.recompute.granularity=selective",
                      lambda c: replace(c, model=replace(c.model, recompute=selective))))
    for size in range(t.micro_batch_size - 1, 0, -1):
        if t.micro_batch_size % size == 0:
            tried.append((f"train.micro_batch_size={size}",
                          lambda c, b=size: replace(c, train=replace(c.train, micro_batch_size=b))))
    if m.recompute.granularity != RecomputeGranularity.full:
        full = replace(m.recompute, granularity=RecomputeGranularity.full,
                       method=RecomputeMethod.uniform, num_layers=1)
        tried.append(("model.recompute.granularity=full model.recompute.method=uniform "
                      "model.recompute.num_layers=1",
                      lambda c: replace(c, model=replace(c.model, recompute=full))))
    valid = []
    for overrides, change in tried:
        try:
            valid.append((overrides, change(cfg)))
        except ConfigError:  # e.g. selective recomputation of a module the model has not
            continue
    return valid
