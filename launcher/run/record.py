"""What a rank records while it trains, one job per piece:

- `STEP` and `VALIDATION`: the step's own per-step metrics, declared once (launcher.run.outputs:
  Metric), in the order of the console's step line (each part's format: launcher.run.console);
  the step hooks declare theirs (launcher.run.hooks);
- `Rates`: what a step's time converts into (tokens/s/GPU, TFLOP/s/GPU, MFU), from the model's
  FLOPs and the device's peak (launcher.estimate.flops: the arithmetic);
- `StepResult`: what a step returns (its loss, gradient norm, learning rate, and whether the
  optimizer skipped its update);
- `StepLog`: every step's loss and time, the validation losses, the process's RSS, the skipped
  and non-finite steps so far; all ranks;
- `Recorder`: each step into the log, and on rank 0 through the declarations into metrics.jsonl,
  the loggers and the console (launcher.run.outputs), opened together and closed together with the
  run's status, whether it ended or failed; and, after the run, rank 0's `RunSummary` (`finish`):
  its measured part (`RunMetrics`) from the log, with what the Trainer built and kept.
"""

import dataclasses
import math
import os
import resource
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import List, Optional, Sequence

import torch

from launcher.config import Config, ModelConfig, TrainConfig, as_dict
from launcher.estimate import flops
from launcher.run import build, console, graphs, profile, rank_setup, step_stats
from launcher.run.checkpoint import Checkpoints
from launcher.run.first_group import FirstGroupProbe, summarise
from launcher.run.outputs import Metric, MetricsFile, StepOutputs, open_loggers
from launcher.preflight.ranks import Layout
from launcher.summary import RunMetrics, RunSummary

STEP = (
    Metric("step_time_s", "perf/step_time_s", "s", "the step's wall time, its sync point "
           "included", console.step_time),
    Metric("tokens_per_s_per_gpu", "perf/tokens_per_s_per_gpu", "tokens/s/GPU",
           "tokens of the step over its time and the world size", console.tokens_per_s),
    Metric("tflops_per_gpu", "perf/tflops_per_gpu", "TFLOP/s/GPU",
           "Megatron-LM's model FLOPs of the step over its time and the world size",
           console.tflops),
    Metric("mfu", "perf/mfu", "fraction", "TFLOP/s/GPU over the device's dense peak; null "
           "where the peak is not known (a CPU)", console.mfu),
    Metric("lr", "train/lr", "", "the learning rate the step applied", console.lr),
    Metric("loss", "train/loss", "nats per token", "the step's training loss (mean over its "
           "microbatches and data-parallel ranks)", console.loss),
    Metric("grad_norm", "train/grad_norm", "", "the gradient norm before clipping",
           console.grad_norm),
    Metric("skipped_steps", "train/skipped_steps", "steps", "steps so far whose update "
           "megatron-core's optimizer skipped (its step returned update_successful=false: a loss "
           "scaler's overflow, or a gradient norm above grad_norm_skip_threshold; the launcher "
           "sets neither)", console.skipped),
    Metric("nan_steps", "train/nan_steps", "steps", "steps so far whose loss was non-finite: 0 "
           "on every line, since a non-finite loss stops the run before its step is recorded (its "
           "summary's status: nan)", console.nan),
    Metric("peak_memory_bytes", "memory/peak_bytes", "bytes", "a GPU: the CUDA allocator's peak "
           "allocated bytes so far (restarted as the second step begins: the first step's "
           "counts start-up); a CPU: the process's peak RSS since it started", console.memory),
    Metric("peak_memory_fraction", "memory/peak_fraction", "fraction", "peak_memory_bytes over "
           "the GPU's total memory; null on a CPU", console.memory_share),
    Metric("eta_s", None, "s", "the steps left times the mean step time so far (its start-up "
           "included)", console.eta),
)
VALIDATION = (
    Metric("valid_loss", "valid/loss", "nats per token", "the validation loss (train.eval_iters "
           "global batches, forward only)", console.validation_loss),
)


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
        per_step = flops.flops_per_step(model, train.global_batch_size, padded_vocab)
        return cls(train.global_batch_size * model.seq_length, per_step,
                   flops.peak_flops(device_name, train.matmul_dtype), world_size)

    def tokens_per_s(self, seconds: float) -> float:
        return flops.tokens_per_s_per_gpu(self.tokens_per_step, seconds, self.world_size)

    def tflops(self, seconds: float) -> float:
        return flops.tflops_per_gpu(self.flops_per_step, seconds, self.world_size)

    def mfu(self, tflops: float) -> Optional[float]:
        return flops.mfu(tflops * 1e12, self.peak_flops)

    def of_step(self, seconds: float) -> dict:
        """A step's rates, by their metrics' keys (STEP)."""
        tflops = self.tflops(seconds)
        return {"tokens_per_s_per_gpu": self.tokens_per_s(seconds), "tflops_per_gpu": tflops,
                "mfu": self.mfu(tflops)}

    def steady(self, times: List[float]) -> dict:
        """tokens/s/GPU, TFLOP/s/GPU (medians of the per-step rates: step_stats.median_per_step),
        MFU, step-time percentiles and the median step time's 95% interval over the
        steady-state step times."""
        stats = step_stats.step_time_stats(times)
        tflops = step_stats.median_per_step(self.tflops, times)
        low, high = step_stats.median_interval(times) or (None, None)
        return {"tokens_per_s_per_gpu": step_stats.median_per_step(self.tokens_per_s, times),
                "tflops_per_gpu": tflops, "mfu": self.mfu(tflops),
                "step_time_s_p50": stats["p50"], "step_time_s_p90": stats["p90"],
                "step_time_s_low": low, "step_time_s_high": high}


@dataclass(frozen=True)
class StepResult:
    """What one training step returns (launcher.run.trainer: Trainer.step)."""

    loss: float
    grad_norm: Optional[float]
    lr: float
    """The learning rate the step applied."""
    skipped: bool
    """The optimizer skipped the update (megatron-core's step returned update_successful=false)."""


@dataclass
class StepLog:
    """Every step this rank ran, its validation losses, its RSS after the first step and after
    the latest, and how many steps so far the optimizer skipped and had a non-finite loss."""

    first_step: int
    steps: List[dict] = field(default_factory=list)
    valid_losses: List[dict] = field(default_factory=list)
    rss: List[Optional[int]] = field(default_factory=lambda: [None, None])
    num_skipped: int = 0
    num_nan: int = 0

    def step(self, step: int, result: StepResult, seconds: float) -> None:
        self.steps.append({"step": step, "loss": result.loss, "step_time_s": seconds})
        self.rss[len(self.steps) > 1] = step_stats.current_rss_bytes()
        self.num_skipped += result.skipped
        self.num_nan += not math.isfinite(result.loss)

    def valid(self, step: int, loss: float) -> None:
        self.valid_losses.append({"step": step, "valid_loss": loss})

    def last_step(self) -> int:
        return self.steps[-1]["step"] if self.steps else self.first_step

    def times(self) -> List[float]:
        return [s["step_time_s"] for s in self.steps]


class Recorder:
    """A rank's recording while it trains: every step into its StepLog; on rank 0, every
    logging.interval-th step, through the declared metrics (STEP, the hooks' `declared`,
    VALIDATION) into metrics.jsonl, the loggers and the console."""

    def __init__(self, cfg: Config, run_dir: str, layout: Layout, on_cpu: bool, first_step: int,
                 declared: Sequence[Metric]):
        self.cfg, self.run_dir, self.layout, self.on_cpu = cfg, run_dir, layout, on_cpu
        self.config = as_dict(cfg)  # what the summary and the dashboards record
        self.device_name = None if on_cpu else torch.cuda.get_device_name()
        self.device_memory_bytes = None if on_cpu else \
            torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        self.rates = Rates.of(
            cfg.model, cfg.train,
            cfg.model.padded_vocab_size(cfg.parallel.tensor_model_parallel_size), layout.world_size,
            self.device_name)
        self.log = StepLog(first_step)
        self.summary: Optional[RunSummary] = None  # rank 0's, once the run has trained to its end
        self.outputs = None  # every rank but 0 writes nothing
        if layout.rank == 0:
            self.outputs = StepOutputs(
                MetricsFile(os.path.join(run_dir, "metrics.jsonl"), first_step),
                open_loggers(cfg.logging, run_dir, self.config), (*STEP, *declared, *VALIDATION),
                cfg.train.steps, cfg.logging.print_steps is not False)

    def on_step(self, step: int, result: StepResult, seconds: float, recorded: dict) -> None:
        """`recorded`: the step hooks' values (launcher.run.hooks.StepHooks.record)."""
        self.log.step(step, result, seconds)
        if self.outputs is not None and step % self.cfg.logging.interval == 0:
            self.outputs.write(step, {**self.step_values(step, result, seconds), **recorded})

    def step_values(self, step: int, result: StepResult, seconds: float) -> dict:
        """The step's values of STEP, by key."""
        log = self.log
        return {"step_time_s": seconds, **self.rates.of_step(seconds), "lr": result.lr,
                "loss": result.loss, "grad_norm": result.grad_norm,
                "skipped_steps": log.num_skipped, "nan_steps": log.num_nan,
                **self.peak_memory_so_far(),
                "eta_s": step_stats.remaining_s(log.times(), self.cfg.train.steps - step)}

    def peak_memory_so_far(self) -> dict:
        """A GPU: the allocator's peak allocated bytes (restarted as the second step begins:
        launcher.run.hooks.PeakMemory) and its share of the device; a CPU: the peak RSS."""
        if self.on_cpu:
            return {"peak_memory_bytes": max_rss_bytes(), "peak_memory_fraction": None}
        peak = torch.cuda.max_memory_allocated()
        return {"peak_memory_bytes": peak, "peak_memory_fraction": peak / self.device_memory_bytes}

    def on_eval(self, step: int, loss: float) -> None:
        self.log.valid(step, loss)
        if self.outputs is not None:
            self.outputs.write(step, {"valid_loss": loss})

    def finish(self, model, hosts: rank_setup.Hosts, probe: FirstGroupProbe,
               window: Optional[profile.Window], checkpoints: Checkpoints) -> Optional[RunSummary]:
        """Rank 0's summary of a run that trained to its end (other ranks: None), kept for
        `close`. What the Trainer built and holds: the model, the ranks' hosts, the first-group
        probe, the profiling window and the checkpoints."""
        if self.layout.rank != 0:
            return None
        cfg, log, on_cpu = self.cfg, self.log, self.on_cpu
        steady, steps_run = self.steady(), [s["step"] for s in log.steps]
        steady_steps, captured = [s["step"] for s in steady], graphs.captured()
        waits = {step: sample.wait_s for step, sample in probe.samples.items()}
        self.summary = RunSummary(
            metrics=self.measured(steady, {**summarise(probe, steady_steps, captured),
                                           "cuda_graph_captured": captured}),
            config=self.config, backend="gloo" if on_cpu else "nccl",
            world_size=self.layout.world_size, device=self.device_name or "cpu",
            # callbacks torch holds for a CUDA initialisation a CPU run never makes: constant, or
            # memory grows with steps (launcher.run.cpu_compat runs megatron's RNG calls at once)
            torch_cuda_queued_calls=len(torch.cuda._queued_calls) if on_cpu else None,
            # megatron.core.__version__ appends the git hash of the *current directory's* repo
            megatron_core_version=version("megatron-core"), torch_version=torch.__version__,
            steps_run=steps_run, losses=[s["loss"] for s in log.steps],
            steady_state_steps=steady_steps,
            steady_state_step_times_s=[s["step_time_s"] for s in steady],  # a sweep's samples
            tokens_per_step=self.rates.tokens_per_step, flops_per_step=self.rates.flops_per_step,
            peak_flops=self.rates.peak_flops, device_memory_bytes=self.device_memory_bytes,
            rank0_weight_shard_numel=build.local_shard_numel(model),
            hosts=list(hosts.devices_by_host), devices_by_host=hosts.devices_by_host,
            env=hosts.env, slurm_job_id=os.environ.get("SLURM_JOB_ID"),
            wrapper=type(model).__name__, cuda_graph_wrapper=graphs.wrapper_name(cfg.cuda_graph),
            num_parameters=sum(p.numel() for p in model.parameters()),
            resumed_from=checkpoints.resumed_from, checkpoints=checkpoints.saved,
            profile=profile.result(cfg, self.run_dir, steps_run, window, waits))
        return self.summary

    def close(self, status: str) -> None:
        """Rank 0's outputs end, with the run's metrics as results where it got that far (its
        summary: `finish`)."""
        if self.outputs is not None:
            self.outputs.close(status, dataclasses.asdict(self.summary.metrics)
                               if self.summary else {}, self.log.last_step())

    def steady(self) -> List[dict]:
        """The steady-state steps: after the warmup (a resumed run warms up again) and outside a
        profiling window (the profiler slows them)."""
        skip = self.log.first_step - 1 + self.cfg.excluded_steps
        first, last = self.window()
        return [s for s in self.log.steps if s["step"] > skip and not first <= s["step"] <= last]

    def window(self) -> tuple:
        return self.cfg.profile_window if self.cfg.profile.enabled else (0, -1)

    def measured(self, steady: List[dict], first_group: dict) -> RunMetrics:
        """Rank 0's measured result over the `steady` steps; `first_group`: the probe's fields
        (launcher.run.first_group.summarise)."""
        times = [s["step_time_s"] for s in steady]
        log = self.log
        return RunMetrics(
            **throughput(self.rates, log, times, self.cfg, self.window()),
            **peak_memory(self.on_cpu),
            # memory a step adds (rank 0's RSS after the last step minus after the first, per step)
            rss_growth_bytes_per_step=step_stats.growth_per_step(*log.rss, len(log.steps)),
            final_loss=log.steps[-1]["loss"],
            final_valid_loss=log.valid_losses[-1]["valid_loss"] if log.valid_losses else None,
            **first_group)


def throughput(rates: Rates, log: StepLog, times: List[float], cfg: Config,
               window: tuple) -> dict:
    """The steady-state rates; all null, with the reason, when no step is steady."""
    if times:
        return rates.steady(times)
    reason = no_throughput_reason(cfg, log.steps[0]["step"], log.steps[-1]["step"], window)
    return {"tokens_per_s_per_gpu": None, "tflops_per_gpu": None, "mfu": None,
            "step_time_s_p50": None, "step_time_s_p90": None, "throughput_null_reason": reason}


def no_throughput_reason(cfg: Config, first: int, last: int, window: tuple) -> str:
    """Why steps first..last hold no steady-state step, naming only what this run leaves out:
    its warmup steps (the settings that make them: Config.excluded_by; a resumed run warms up
    again), else the profiling window after them."""
    excluded = cfg.excluded_steps
    warm_end = first - 1 + excluded
    if last <= warm_end:
        ran = steps_text(last - first + 1) + (f" since resuming at step {first}" if first > 1
                                               else "")
        again = ", which a resumed run leaves out again" if first > 1 else ""
        return (f"no steady-state step: {'all ' * (last > first)}{ran} "
                f"{'are' if last > first else 'is'} within the {steps_text(excluded)} of warmup "
                f"throughput leaves out ({cfg.excluded_by}){again}; set train.steps above "
                f"{warm_end}")
    after = f", after the {steps_text(excluded)} of warmup ({cfg.excluded_by})," if excluded \
        else ""
    return (f"no steady-state step: steps {warm_end + 1}..{last}{after} are in the profiling "
            f"window (steps {window[0]}..{window[1]}), which throughput leaves out too; set "
            f"train.steps above {window[1]}")


def steps_text(count: int) -> str:
    return f"{count} step{'s' * (count != 1)}"


def max_rss_bytes() -> int:
    """The process's peak resident memory since it started (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_memory(on_cpu: bool) -> dict:
    """Rank 0's peaks since the second step began (launcher.run.hooks.PeakMemory restarts them
    there): the CUDA allocator's allocated and reserved bytes (reserved holds a CUDA graph's
    pool), null on a CPU; and the process's max RSS, which counts start-up too."""
    rss = max_rss_bytes()
    if on_cpu:
        return {"peak_memory_allocated_bytes": None, "peak_memory_reserved_bytes": None,
                "peak_rss_bytes": rss}
    return {"peak_memory_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(), "peak_rss_bytes": rss}
