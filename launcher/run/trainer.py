"""One rank's run as one object: the `Trainer` builds the model, optimizer, scheduler, data,
recorder and step hooks once, holds them as attributes, and `train()` runs the steps.

A step is Megatron-LM's train_step (megatron/training/training.py): the grad buffers zeroed,
forward and backward over the microbatches (megatron's schedule, or megatron-core's
FullCudaGraphWrapper around it: launcher/run/graphs.py; the step does not know which), the loss
checked, the optimizer and the scheduler stepped. What runs in Python around the schedule runs
outside any graph, as in Megatron-LM.
"""

import math
import time
from functools import partial
from typing import Callable, Optional

import torch

from launcher.config import Config
from launcher.run import build, experts, graphs, profile, rank_setup, record
from launcher.run.checkpoint import Checkpoints
from launcher.run.megatron_lm_args import megatron_args
from launcher.run.failures import classify_failure
from launcher.run.first_group import FirstGroupProbe
from launcher.run.forward import forward_step, mean_loss
from launcher.run.hooks import NO_SPAN, PeakMemory, StepHooks
from launcher.preflight.ranks import Layout
from launcher.summary import RunSummary


class NonFiniteError(RuntimeError):
    """A non-finite loss or gradient norm; classified `nan` (launcher.run.failures)."""


class Trainer:
    """One rank's training run: built whole, then `train()`."""

    def __init__(self, cfg: Config, run_dir: str, layout: Layout, on_cpu: bool,
                 resume_from: Optional[str] = None):
        self.cfg, self.layout = cfg, layout
        # the CUDA allocator's history, recorded from before the build
        profile.record_memory(cfg, layout.rank, run_dir)
        rank_setup.init_parallel(cfg.parallel, cfg.fsdp.num_distributed_optimizer_instances,
                            cfg.train.seed, cfg.runtime.timeout_s,
                            graph_safe_rng=cfg.cuda_graph.enabled)
        self.hosts = rank_setup.gather_hosts(on_cpu)
        self.fusions = build.run_fusions(cfg, on_cpu)  # once a rank: the start line, the build
        if layout.rank == 0:  # before megatron's build logs and the loggers' lines
            print(rank_setup.start_line(cfg, self.hosts, layout.world_size, run_dir, self.fusions,
                                   on_cpu), flush=True)
        self.model, self.optimizer, self.scheduler = build.build_all(cfg, self.fusions, on_cpu)
        self.probe = FirstGroupProbe(self.model, timed=cfg.logging.measure_first_group)
        self.checkpoints = Checkpoints(
            cfg, run_dir, layout.rank, (self.model, self.optimizer, self.scheduler),
            partial(megatron_args, cfg, self.fusions, on_cpu))
        self.first_step = 1 + self.checkpoints.resume(resume_from)
        self.batch = rank_setup.Batch.of(cfg)
        self.data, self.valid_data = rank_setup.build_microbatches(
            cfg, run_dir, self.first_step, next(self.model.parameters()).device)
        self.forward_backward, self.evaluation = graphs.forward_backward_funcs(
            cfg.cuda_graph, self.model.config.cuda_graph_use_single_mempool, on_cpu)
        self.window = profile.window_for(cfg, layout.rank, run_dir, settle=self.probe.settle)
        # the order of the hooks is the order they act in: launcher.run.hooks.StepHooks
        self.hooks = StepHooks([PeakMemory(self.first_step), self.probe, self.window,
                                experts.probe_for(self.model, cfg, self.batch.num_microbatches)])
        self.recorder = record.Recorder(cfg, run_dir, layout, on_cpu, self.first_step,
                                        self.hooks.declared)

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
                    self.checkpoints.save(step)
            summary = self.recorder.finish(self.model, self.hosts, self.probe, self.window,
                                           self.checkpoints)
            status = "ok"
        except BaseException as err:
            status = classify_failure(1, f"{type(err).__name__}: {err}")  # nan for a NaN stop
            raise
        finally:
            self.recorder.close(status)
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
                data_iterator=profile.ReadsInRanges(self.data, span) if profiled else self.data,
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
        self.scheduler.step(increment=self.cfg.train.global_batch_size)  # samples, as Megatron-LM
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
