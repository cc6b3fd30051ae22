"""What a rank records while it trains, one job per piece:

- `Rates`: what a step's time converts into (tokens/s/GPU, TFLOP/s/GPU, MFU), from the model's
  FLOPs and the device's peak (launcher.run.metrics: the arithmetic);
- `StepLog`: every step's loss and time, the validation losses, the process's RSS; all ranks;
- `Dashboards`: rank 0's outputs, metrics.jsonl and the loggers (wandb, TensorBoard), opened
  together and closed together with the run's status, whether it ended or failed;
- `summary()`: the run's typed result (launcher.summary.RunSummary), computed from those.
"""

import dataclasses
import os
import resource
from dataclasses import dataclass, field
from typing import List, Optional

import torch

from launcher.config import Config, ModelConfig, TrainConfig, WandbMode
from launcher.run import metrics
from launcher.run.outputs import (
    Loggers, MetricsFile, NullLogger, TensorboardLogger, WandbLogger, hparam_values,
)
from launcher.summary import RunMetrics, RunSummary


@dataclass(frozen=True)
class Rates:
    """Per-GPU rates of a step of this model on this world."""

    tokens_per_step: int
    flops_per_step: float
    peak_flops: Optional[float]
    world_size: int

    @classmethod
    def of(cls, model: ModelConfig, train: TrainConfig, padded_vocab: int, world_size: int,
           device_name: Optional[str]) -> "Rates":
        flops = metrics.flops_per_step(model, train.global_batch_size, padded_vocab)
        return cls(train.global_batch_size * model.seq_length, flops,
                   metrics.peak_flops(device_name, train.precision.value), world_size)

    def tokens_per_s(self, seconds: float) -> float:
        return metrics.tokens_per_s_per_gpu(self.tokens_per_step, seconds, self.world_size)

    def tflops(self, seconds: float) -> float:
        return metrics.tflops_per_gpu(self.flops_per_step, seconds, self.world_size)

    def mfu(self, tflops: float) -> Optional[float]:
        return metrics.mfu(tflops * 1e12, self.peak_flops)

    def steady(self, times: List[float]) -> dict:
        """tokens/s/GPU, TFLOP/s/GPU (medians of the per-step rates: metrics.median_per_step),
        MFU and step-time percentiles over the steady-state step times."""
        stats = metrics.step_time_stats(times)
        tflops = metrics.median_per_step(self.tflops, times)
        return {"tokens_per_s_per_gpu": metrics.median_per_step(self.tokens_per_s, times),
                "tflops_per_gpu": tflops, "mfu": self.mfu(tflops),
                "step_time_s_p50": stats["p50"], "step_time_s_p90": stats["p90"]}


@dataclass
class StepLog:
    """Every step this rank ran, its validation losses, and its RSS after the first step and
    after the latest."""

    first_step: int
    steps: List[dict] = field(default_factory=list)
    valid_losses: List[dict] = field(default_factory=list)
    rss: List[Optional[int]] = field(default_factory=lambda: [None, None])

    def step(self, step: int, loss: float, seconds: float) -> None:
        self.steps.append({"step": step, "loss": loss, "step_time_s": seconds})
        self.rss[len(self.steps) > 1] = metrics.current_rss_bytes()

    def valid(self, step: int, loss: float) -> None:
        self.valid_losses.append({"step": step, "valid_loss": loss})

    def last_step(self) -> int:
        return self.steps[-1]["step"] if self.steps else self.first_step


class Dashboards:
    """Rank 0's metrics.jsonl and loggers; every other rank writes nothing."""

    def __init__(self, cfg: Config, run_dir: str, rank: int, first_step: int, config: dict):
        self.jsonl = self.logger = None
        if rank == 0:
            self.jsonl = MetricsFile(os.path.join(run_dir, "metrics.jsonl"), first_step)
            self.logger = loggers(cfg.logging, run_dir, config)

    def write(self, step: int, record: dict, logged: dict) -> None:
        if self.jsonl is None:
            return
        self.jsonl.write({"step": step, **record})
        # a null (MFU where the peak is unknown) makes an empty chart: the loggers get numbers
        self.logger.log({k: v for k, v in logged.items() if v is not None}, step=step)

    def close(self, status: str, last_step: int, summary: Optional[RunSummary]) -> None:
        """metrics.jsonl closed, then every logger, with the status and the summary's metrics (if
        the run got that far) as the results of the last step."""
        if self.jsonl is None:
            return
        self.jsonl.close()
        self.logger.close(status, dataclasses.asdict(summary.metrics) if summary else {},
                          last_step)


def loggers(logging, run_dir: str, config: dict):
    """Rank 0's loggers (launcher.run.outputs): wandb unless disabled, TensorBoard if enabled."""
    chosen = []
    if logging.wandb.mode != WandbMode.disabled:
        chosen.append(WandbLogger(logging.wandb, run_dir, config,
                                  logging.wandb.name or os.path.basename(run_dir)))
    if logging.tensorboard.enabled:
        folder = os.path.join(logging.tensorboard.dir or os.path.join(run_dir, "tb"),
                              logging.tensorboard.name or os.path.basename(run_dir))
        chosen.append(TensorboardLogger(folder, config,
                                        hparam_values(config, logging.tensorboard.hparams)))
    return Loggers(chosen) if chosen else NullLogger()


def throughput(rates: Rates, log: StepLog, times: List[float], excluded_steps: int,
               window: tuple) -> dict:
    """The steady-state rates; all null, with the reason, when no step is steady."""
    if times:
        return rates.steady(times)
    first, last = log.steps[0]["step"], log.steps[-1]["step"]
    profiled = f" or the profiling window, steps {window[0]}..{window[1]}," \
        if window[0] <= window[1] else ""
    reason = (f"no steady-state step: steps {first}..{last} all fall within the first "
              f"{excluded_steps} this run leaves out (train.warmup_steps, plus CUDA-graph warmup "
              f"and capture){profiled}; run more steps to measure throughput")
    return {"tokens_per_s_per_gpu": None, "tflops_per_gpu": None, "mfu": None,
            "step_time_s_p50": None, "step_time_s_p90": None, "throughput_null_reason": reason}


def peak_memory(on_cpu: bool) -> dict:
    """Rank 0's peaks since the end of the first step (launcher.run.loop.train resets them there):
    the CUDA allocator's allocated and reserved bytes (reserved holds a CUDA graph's pool), null on
    a CPU; and the process's max RSS (Linux reports KiB), which counts start-up too."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if on_cpu:
        return {"peak_memory_allocated_bytes": None, "peak_memory_reserved_bytes": None,
                "peak_rss_bytes": rss}
    return {"peak_memory_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(), "peak_rss_bytes": rss}


def summary(cfg: Config, config: dict, rates: Rates, log: StepLog, probe, captured: bool,
            on_cpu: bool, device_name: Optional[str], mcore_version: str,
            shard_numel: int) -> RunSummary:
    """Rank 0's result of a run that trained to its end."""
    from launcher.run.first_group import summarise

    skip = log.first_step - 1 + cfg.excluded_steps  # a resumed run warms up again
    window = cfg.profile_window if cfg.profile.enabled else (0, -1)  # the profiler slows it
    steady = [s for s in log.steps if s["step"] > skip
              and not window[0] <= s["step"] <= window[1]]
    times = [s["step_time_s"] for s in steady]
    result = RunMetrics(
        **throughput(rates, log, times, cfg.excluded_steps, window),
        **peak_memory(on_cpu),
        # memory a step adds (rank 0's RSS after the last step minus after the first, per step)
        rss_growth_bytes_per_step=metrics.growth_per_step(*log.rss, len(log.steps)),
        final_loss=log.steps[-1]["loss"],
        final_valid_loss=log.valid_losses[-1]["valid_loss"] if log.valid_losses else None,
        first_group_prefetches=probe.prefetches,
        **summarise(probe, [s["step"] for s in steady], captured),
        cuda_graph_captured=captured,
    )
    return RunSummary(
        metrics=result, config=config, backend="gloo" if on_cpu else "nccl",
        world_size=rates.world_size, device=device_name or "cpu",
        # callbacks torch holds for a CUDA initialisation a CPU run never makes: constant, or
        # memory grows with steps (launcher.run.cpu_compat runs megatron's RNG calls at once)
        torch_cuda_queued_calls=len(torch.cuda._queued_calls) if on_cpu else None,
        megatron_core_version=mcore_version, torch_version=torch.__version__,
        steps_run=[s["step"] for s in log.steps],
        losses=[s["loss"] for s in log.steps],
        steady_state_steps=[s["step"] for s in steady],
        steady_state_step_times_s=times,  # the samples of a sweep's statistics
        tokens_per_step=rates.tokens_per_step, flops_per_step=rates.flops_per_step,
        peak_flops=rates.peak_flops, rank0_weight_shard_numel=shard_numel)
