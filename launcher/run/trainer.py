"""One rank's run as one object: the `Trainer` builds the model, optimizer, scheduler, data,
recorder and step hooks once, holds them as attributes, and `train()` runs the steps.

A step is Megatron-LM's train_step (megatron/training/training.py): the grad buffers zeroed,
forward and backward over the microbatches (megatron's schedule, or megatron-core's
FullCudaGraphWrapper around it: launcher/run/graphs.py; the step does not know which), the loss
checked, the optimizer and the scheduler stepped. What runs in Python around the schedule runs
outside any graph, as in Megatron-LM.
"""

import math
import os
import socket
import time
from dataclasses import dataclass
from importlib.metadata import version
from typing import Callable, Optional

import torch
from megatron.core import parallel_state

from launcher.config import Config
from launcher.run import build, checkpoint, experts, graphs, profile, record
from launcher.preflight.environment import RECORDED
from launcher.run.failures import classify_failure
from launcher.run.first_group import FirstGroupProbe, summarise
from launcher.run.hooks import NO_SPAN, PeakMemory, StepHooks
from launcher.preflight.ranks import Layout
from launcher.preflight.resume import checkpoint_dir
from launcher.summary import RunSummary


class NonFiniteError(RuntimeError):
    """A non-finite loss or gradient norm; classified `nan` (launcher.run.failures)."""


class Trainer:
    """One rank's training run: built whole, then `train()`."""

    def __init__(self, cfg: Config, run_dir: str, me: Layout, on_cpu: bool,
                 resume_from: Optional[str] = None):
        self.cfg, self.run_dir, self.me, self.on_cpu = cfg, run_dir, me, on_cpu
        self.resumed_from = resume_from
        profile.record_memory(cfg, me.rank, run_dir)  # the allocator's history: before the build
        build.init_parallel(cfg.parallel, cfg.fsdp.num_distributed_optimizer_instances,
                            cfg.train.seed, cfg.runtime.timeout_s,
                            graph_safe_rng=cfg.cuda_graph.enabled)
        self.devices, self.env = gather_ranks(on_cpu)
        if me.rank == 0:  # before megatron's build logs and the loggers' lines
            self.announce()
        self.model, self.optimizer, self.scheduler = build.build_all(cfg, on_cpu)
        self.probe = FirstGroupProbe(self.model, timed=cfg.logging.measure_first_group)
        self.first_step = 1 + (self.load(resume_from) if resume_from else 0)
        self.batch = Batch.of(cfg)
        self.data, self.valid_data = self.datasets()
        self.forward_backward, self.evaluation = graphs.forward_backward_funcs(
            cfg.cuda_graph, self.model.config.cuda_graph_use_single_mempool, on_cpu)
        self.window = profile.window_for(cfg, me.rank, run_dir, settle=self.probe.settle)
        # the order of the hooks is the order they act in: launcher.run.hooks.StepHooks
        self.hooks = StepHooks([PeakMemory(self.first_step), self.probe, self.window,
                                experts.probe_for(self.model, cfg, self.batch.num_microbatches)])
        self.recorder = record.Recorder(cfg, run_dir, me, on_cpu, self.first_step,
                                        self.hooks.metrics)
        self.checkpoints, self.saved = checkpoint_dir(cfg.train.checkpoint, run_dir), []

    def train(self) -> Optional[RunSummary]:
        """Steps first_step..train.steps; rank 0's summary (other ranks: None). A failed run's
        dashboards end too, with its status."""
        status, summary = "error", None
        try:
            for step in range(self.first_step, self.cfg.train.steps + 1):
                span = self.hooks.begin(step)  # the profiling window's named ranges, or NO_SPAN
                start = time.perf_counter()
                result = self.step(step, span)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()  # so the step time covers the GPU work
                seconds = time.perf_counter() - start
                self.hooks.end(step)
                self.recorder.on_step(step, result, seconds, self.hooks.record(step))
                if self.due(step, self.cfg.train.eval_interval):
                    self.recorder.on_eval(step, self.evaluate())
                if self.due(step, self.cfg.train.checkpoint.interval):
                    self.save(step)
            summary = self.summary() if self.me.rank == 0 else None
            status = "ok"
        except BaseException as err:
            status = classify_failure(1, f"{type(err).__name__}: {err}")  # nan for a NaN stop
            raise
        finally:
            self.recorder.close(status, summary.metrics if summary else None)
        return summary

    def step(self, step: int, span: Callable = NO_SPAN) -> record.StepResult:
        """One optimizer step, unless the loss is non-finite. `span`: the profiling window's
        named ranges (launcher.run.profile)."""
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        profiled = span is not NO_SPAN
        with span("graph.replay" if profiled and graphs.captured() else "forward_backward"):
            outputs = self.forward_backward(
                forward_step_func=forward_step(poison=step == self.cfg.train.inject_nan_at_step),
                data_iterator=ReadsInRanges(self.data, span) if profiled else self.data,
                model=[self.model], forward_only=False, **self.batch.schedule())
        loss = mean_loss(outputs)  # .item() inside: a host-device sync point, once per step
        if not math.isfinite(loss):
            raise NonFiniteError(f"step {step}: the loss is non-finite ({loss}); stopped before "
                                 "the optimizer step applied it")
        lr = self.optimizer.param_groups[0]["lr"]
        with span("optimizer"):
            applied, grad_norm, _ = self.optimizer.step()
        if grad_norm is not None and not math.isfinite(grad_norm):
            # megatron computes the norm inside its step: this update is applied, but the run
            # stops here and no checkpoint holds it (train.check_nan_in_grad catches it before)
            raise NonFiniteError(f"step {step}: the gradient norm is non-finite ({grad_norm}); "
                                 "stopped, no checkpoint holds this step")
        self.scheduler.step(increment=1)
        return record.StepResult(loss, None if grad_norm is None else float(grad_norm), lr,
                                 skipped=not applied)

    def evaluate(self) -> float:
        """The validation loss: forward only over train.eval_iters global batches, averaged over
        them and over data-parallel ranks, through the evaluation's own schedule or graph
        wrapper (its `validation` stage), as Megatron-LM's evaluate() uses."""
        self.model.eval()
        losses = []
        with torch.no_grad():
            for _ in range(self.cfg.train.eval_iters):
                outputs = self.evaluation(
                    forward_step_func=forward_step(poison=False), data_iterator=self.valid_data,
                    model=[self.model], forward_only=True, **self.batch.schedule())
                losses.append(mean_loss(outputs))
        self.model.train()
        return sum(losses) / len(losses)

    def due(self, step: int, interval: int) -> bool:
        """Whether an every-`interval`-steps action (validation, a checkpoint) falls on `step`:
        each interval-th step and the last; never with interval 0."""
        return bool(interval) and (step % interval == 0 or step == self.cfg.train.steps)

    def save(self, step: int) -> None:
        os.makedirs(self.checkpoints, exist_ok=True)
        path = checkpoint.save(self.checkpoints, step, self.model, self.optimizer,
                               self.scheduler, self.cfg.model)
        self.saved.append(path)
        if self.me.rank == 0:
            print(f"[launch] checkpoint: {path}", flush=True)

    def load(self, path: str) -> int:
        step = checkpoint.load(path, self.model, self.optimizer, self.scheduler)
        if self.me.rank == 0:
            print(f"[launch] resumed from {path}: continuing at step {step + 1}", flush=True)
        return step

    def datasets(self) -> tuple:
        """This rank's training microbatches (from first_step on) and validation microbatches."""
        from launcher.data.datasets import build_datasets, microbatches

        cfg, train, eval_ = self.cfg, self.cfg.train, self.cfg.train.eval_interval
        evaluations = train.steps // eval_ + 1 if eval_ else 0
        datasets = build_datasets(
            cfg.data, cfg.model.seq_length, cfg.model.vocab_size, train.seed,
            (train.steps * train.global_batch_size,
             max(evaluations * train.eval_iters * train.global_batch_size, 1)),
            cfg.data.cache_dir or os.path.join(self.run_dir, "data_cache"))
        share = (train.micro_batch_size, train.global_batch_size,
                 parallel_state.get_data_parallel_rank(),
                 parallel_state.get_data_parallel_world_size())
        device = next(self.model.parameters()).device
        training = microbatches(datasets[0], *share, cfg.data.fixed_batch, device,
                                self.first_step)
        # validation batch k of the run is the same whichever step the run resumed at
        done = (self.first_step - 1) // eval_ * train.eval_iters + 1 if eval_ else 1
        return training, microbatches(datasets[1], *share, False, device, done)

    def summary(self) -> RunSummary:
        """Rank 0's result of a run that trained to its end, in one call."""
        rec, cfg = self.recorder, self.cfg
        steady, steps_run = rec.steady(), [s["step"] for s in rec.log.steps]
        steady_steps, captured = [s["step"] for s in steady], graphs.captured()
        waits = {step: sample.wait_s for step, sample in self.probe.samples.items()}
        return RunSummary(
            metrics=rec.metrics(steady, {**summarise(self.probe, steady_steps, captured),
                                         "cuda_graph_captured": captured}),
            config=rec.config, backend="gloo" if self.on_cpu else "nccl",
            world_size=self.me.world_size, device=rec.device_name or "cpu",
            # callbacks torch holds for a CUDA initialisation a CPU run never makes: constant, or
            # memory grows with steps (launcher.run.cpu_compat runs megatron's RNG calls at once)
            torch_cuda_queued_calls=len(torch.cuda._queued_calls) if self.on_cpu else None,
            # megatron.core.__version__ appends the git hash of the *current directory's* repo
            megatron_core_version=version("megatron-core"), torch_version=torch.__version__,
            steps_run=steps_run, losses=[s["loss"] for s in rec.log.steps],
            steady_state_steps=steady_steps,
            steady_state_step_times_s=[s["step_time_s"] for s in steady],  # a sweep's samples
            tokens_per_step=rec.rates.tokens_per_step, flops_per_step=rec.rates.flops_per_step,
            peak_flops=rec.rates.peak_flops, device_memory_bytes=rec.device_memory_bytes,
            rank0_weight_shard_numel=build.local_shard_numel(self.model),
            hosts=list(self.devices), devices_by_host=self.devices, env=self.env,
            slurm_job_id=os.environ.get("SLURM_JOB_ID"), wrapper=type(self.model).__name__,
            cuda_graph_wrapper=graphs.wrapper_name(cfg.cuda_graph),
            num_parameters=sum(p.numel() for p in self.model.parameters()),
            resumed_from=self.resumed_from, checkpoints=self.saved,
            profile=profile.result(cfg, self.run_dir, steps_run, self.window, waits))

    def announce(self) -> None:
        """Rank 0's start line, its first: the devices, the wrapper, the switch, the graphs, the
        run's folder, and the fusions Megatron-LM would use that this run goes without."""
        cfg, on_cpu = self.cfg, self.on_cpu
        hosts = f" on {len(self.devices)} hosts" if len(self.devices) > 1 else ""
        off = build.run_fusions(cfg, on_cpu).start_line()
        print(f"[launch] {self.devices[socket.gethostname()][0]} x{self.me.world_size}{hosts}, "
              f"{build.FullyShardedDataParallel.__name__} ({cfg.fsdp.sharding_strategy.value}), "
              f"prefetch_first_param_group={cfg.fsdp.prefetch_first_param_group}, "
              f"cuda_graph.impl={cfg.cuda_graph.impl.value}"
              + (" through FullCudaGraphWrapper, not captured: a CPU runs it eagerly"
                 if cfg.cuda_graph.enabled and on_cpu else "")
              + f"; outputs in {self.run_dir}"
              + (f"; {off}" if off else ""), flush=True)


@dataclass(frozen=True)
class Batch:
    """The shape of one step, as megatron's schedule takes it."""

    num_microbatches: int
    seq_length: int
    micro_batch_size: int

    @classmethod
    def of(cls, cfg: Config) -> "Batch":
        """After megatron's groups exist: the data-parallel size divides the global batch."""
        train, dp_size = cfg.train, parallel_state.get_data_parallel_world_size()
        return cls(train.global_batch_size // (train.micro_batch_size * dp_size),
                   cfg.model.seq_length, train.micro_batch_size)

    def schedule(self) -> dict:
        """The schedule's keyword arguments for this shape."""
        return {"num_microbatches": self.num_microbatches, "seq_length": self.seq_length,
                "micro_batch_size": self.micro_batch_size}


def forward_step(poison: bool):
    """The forward step megatron's schedule calls per microbatch; `poison` makes its loss NaN
    (train.inject_nan_at_step: a test hook for the NaN guard)."""

    def step(data_iterator, model):
        batch = next(data_iterator)  # a dict (launcher.data.datasets.microbatches)
        loss_mask = batch["loss_mask"]
        output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

        def loss_func(losses):
            loss = torch.sum(losses.float().view(-1) * loss_mask.view(-1)) / loss_mask.sum()
            if poison:
                loss = loss * float("nan")
            return loss, {"lm loss": loss.detach().clone()}  # the schedule scales loss in place

        return output, loss_func

    return step


def mean_loss(outputs) -> float:
    """The step's loss: the mean over microbatches, averaged over data-parallel ranks."""
    loss = torch.stack([o["lm loss"] for o in outputs]).mean() if outputs else torch.zeros(())
    torch.distributed.all_reduce(loss, group=parallel_state.get_data_parallel_group())
    return (loss / parallel_state.get_data_parallel_world_size()).item()


class ReadsInRanges:
    """A profiled step's data iterator: each microbatch read (by megatron's schedule, or by the
    graph wrapper into its static buffers) is a `data` range."""

    def __init__(self, iterator, span: Callable):
        self.iterator, self.span = iterator, span

    def __iter__(self):
        return self

    def __next__(self):
        with self.span("data"):
            return next(self.iterator)


def gather_ranks(on_cpu: bool) -> tuple:
    """({host: [device of each of its ranks]}, [the environment each rank saw]), gathered from
    every rank: the job's host list, and the variables of launcher.preflight.environment."""
    mine = (socket.gethostname(), "cpu" if on_cpu else torch.cuda.get_device_name(),
            {name: os.environ.get(name) for name in RECORDED})
    everyone = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, mine)
    devices = {}
    for host, device, _ in everyone:
        devices.setdefault(host, []).append(device)
    return devices, [env for _, _, env in everyone]
