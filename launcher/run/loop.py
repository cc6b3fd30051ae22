"""The training loop: one step in `train_step`, the loop in `train`.

The forward/backward function is megatron's schedule, or megatron-core's FullCudaGraphWrapper
around it (launcher/run/graphs.py): the loop does not know which. What runs in Python around it
(zeroing the grad buffers, the optimizer step, the checks of the loss) runs outside any graph,
as in Megatron-LM's train_step.
"""

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from megatron.core import parallel_state
from megatron.core.pipeline_parallel import get_forward_backward_func

from launcher.run.profile import NO_SPAN


class NonFiniteError(RuntimeError):
    """A non-finite loss or gradient norm; classified `nan` (launcher.run.failures)."""


@dataclass(frozen=True)
class Batch:
    """The shape of one step, as megatron's schedule takes it."""

    num_microbatches: int
    seq_length: int
    micro_batch_size: int


def make_forward_step(poison: bool):
    """The forward step megatron's schedule calls per microbatch; `poison` makes its loss NaN
    (train.inject_nan_at_step: a test hook for the NaN guard)."""

    def forward_step(data_iterator, model):
        batch = next(data_iterator)  # a dict (launcher.data.datasets.microbatches)
        loss_mask = batch["loss_mask"]
        output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])

        def loss_func(losses):
            loss = torch.sum(losses.float().view(-1) * loss_mask.view(-1)) / loss_mask.sum()
            if poison:
                loss = loss * float("nan")
            return loss, {"lm loss": loss.detach().clone()}  # the schedule scales loss in place

        return output, loss_func

    return forward_step


def train_step(model, optimizer, scheduler, forward_backward, data_iterator, batch: Batch,
               step: int, poison: bool = False, span: Callable = NO_SPAN,
               forward_backward_name: str = "forward_backward"):
    """Forward/backward over all microbatches, then the optimizer step, unless the loss is
    non-finite. Returns (loss, grad_norm, the learning rate the step applied). `span`: the
    profiling window's named ranges (launcher.run.profile), NO_SPAN outside it."""
    model.zero_grad_buffer()
    optimizer.zero_grad()
    with span(forward_backward_name):
        outputs = forward_backward(
            forward_step_func=make_forward_step(poison),
            data_iterator=data_iterator,
            model=[model],
            num_microbatches=batch.num_microbatches,
            seq_length=batch.seq_length,
            micro_batch_size=batch.micro_batch_size,
            forward_only=False,
        )
    loss = mean_loss(outputs)  # .item() inside: a host-device sync point, once per step
    if not math.isfinite(loss):
        raise NonFiniteError(f"step {step}: the loss is non-finite ({loss}); stopped before the "
                             "optimizer step applied it")
    lr = optimizer.param_groups[0]["lr"]
    with span("optimizer"):
        _, grad_norm, _ = optimizer.step()
    if grad_norm is not None and not math.isfinite(grad_norm):
        # megatron computes the norm inside its step: this update is applied, but the run stops
        # here and no checkpoint holds it (train.check_nan_in_grad catches it before the step).
        raise NonFiniteError(f"step {step}: the gradient norm is non-finite ({grad_norm}); "
                             "stopped, no checkpoint holds this step")
    scheduler.step(increment=1)
    return loss, grad_norm, lr


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


def mean_loss(outputs) -> float:
    """The step's loss: the mean over microbatches, averaged over data-parallel ranks."""
    loss = torch.stack([o["lm loss"] for o in outputs]).mean() if outputs else torch.zeros(())
    torch.distributed.all_reduce(loss, group=parallel_state.get_data_parallel_group())
    return (loss / parallel_state.get_data_parallel_world_size()).item()


def train(model, optimizer, scheduler, data_iterator, steps: range, batch: Batch,
          on_step: Callable, forward_backward=None, nan_at_step: Optional[int] = None,
          probe=None, window=None):
    """Runs the optimizer steps in `steps`; calls on_step(step, loss, grad_norm, seconds, lr)
    after each. Peak-memory statistics restart after the first step, so they hold the steady state
    (and a CUDA graph's pool), not start-up. `probe` (launcher.run.first_group) is told where each
    step begins and where it has synchronised, so its events are read only after that. `window`
    (launcher.run.profile): the steps it covers are profiled, their parts in named ranges."""
    from launcher.run.graphs import captured

    forward_backward = forward_backward or get_forward_backward_func()
    for step in steps:
        profiled = window is not None and window.covers(step)
        span = window.span if profiled else NO_SPAN
        if probe:
            probe.step_begins(step, span)
        if profiled:
            window.begin(step)
        start = time.perf_counter()
        loss, grad_norm, lr = train_step(
            model, optimizer, scheduler, forward_backward,
            ReadsInRanges(data_iterator, span) if profiled else data_iterator, batch, step,
            poison=step == nan_at_step, span=span,
            forward_backward_name="graph.replay" if profiled and captured()
            else "forward_backward")
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # so the step time covers the GPU work
        seconds = time.perf_counter() - start
        if profiled:
            window.end(step, settle=probe.settle if probe else None)
        if probe:
            probe.step_ends()
        if step == steps.start and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        on_step(step, loss, grad_norm, seconds, lr)


def evaluate(model, data_iterator, batch: Batch, iters: int, forward_backward=None) -> float:
    """The validation loss: forward only over `iters` global batches, averaged over them and
    over data-parallel ranks. `forward_backward`: the schedule, or the evaluation's own graph
    wrapper (its `validation` stage), as Megatron-LM's evaluate() uses."""
    forward_backward = forward_backward or get_forward_backward_func()
    model.eval()
    losses = []
    with torch.no_grad():
        for _ in range(iters):
            outputs = forward_backward(
                forward_step_func=make_forward_step(False), data_iterator=data_iterator,
                model=[model], num_microbatches=batch.num_microbatches,
                seq_length=batch.seq_length, micro_batch_size=batch.micro_batch_size,
                forward_only=True)
            losses.append(mean_loss(outputs))
    model.train()
    return sum(losses) / len(losses)
