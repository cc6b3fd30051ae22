"""What watches a training step: the step hooks, in one object and in one order.

A hook is one class, a `StepHook`: `begin(step, span)` before the step's work, `end(step)` after
its sync point, `record(step)` its values of the per-step metrics it declares in `declared`
(launcher.run.outputs.Metric: metrics.jsonl, the dashboards and the console read them there), and
`ranges(step)` where it gives the step's named ranges. Each method does nothing unless the hook
overrides it. The run's hooks, built by launcher.run.trainer: the peak-memory restart below, the
first-group probe (first_group.py), the profiling window (profile.py) and a mixture of experts'
routing (experts.py). A new hook is a subclass and one entry in the Trainer's list.
"""

import contextlib
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from launcher.run.outputs import Metric

NO_SPAN: Callable = lambda name: contextlib.nullcontext()  # noqa: E731  (no named ranges)


class StepHook:
    """Watches the training steps; every method is a no-op here."""

    declared: Tuple[Metric, ...] = ()
    """The per-step metrics `record` returns values of, by key."""

    def ranges(self, step: int) -> Optional[Callable]:
        """The named ranges the step's parts enter (`span(name)`, a context), or None."""
        return None

    def begin(self, step: int, span: Callable) -> None:
        """Before the step's work; `span`: the step's named ranges, NO_SPAN outside a window."""

    def end(self, step: int) -> None:
        """After the step's sync point: what the step did on the device has completed."""

    def record(self, step: int) -> dict:
        """The step's values of `declared`, by key (a key left out: no value this step)."""
        return {}


class StepHooks:
    """The run's hooks, called in one order, which matters (docs/crashes.md says why):

    - `begin`: in list order, each told the step's named ranges (the profiling window's in its
      steps, else NO_SPAN);
    - `end`: in reverse list order, as nested `with` blocks leave. The Trainer lists the
      peak-memory restart, the first-group probe, the profiling window, then the routing, so the
      window ends first: at its last step it waits for every all-gather in flight and only then
      stops the profiler (a collective issued under torch.profiler that completes after it stops
      killed ranks with SIGSEGV); the probe then reads the step's clocks;
    - `record`: in list order, on every rank, at the same point of every step (the routing's
      record is a collective every rank must enter).
    """

    def __init__(self, hooks: Sequence[Optional[StepHook]]):
        self.hooks: List[StepHook] = [hook for hook in hooks if hook is not None]

    @property
    def declared(self) -> Tuple[Metric, ...]:
        """Every hook's declared per-step metrics, in list order."""
        return tuple(metric for hook in self.hooks for metric in hook.declared)

    def begin(self, step: int) -> Callable:
        """Every hook told the step begins; returns the step's named ranges."""
        found = [span for span in (hook.ranges(step) for hook in self.hooks) if span]
        span = found[0] if found else NO_SPAN
        for hook in self.hooks:
            hook.begin(step, span)
        return span

    def end(self, step: int) -> None:
        for hook in reversed(self.hooks):
            hook.end(step)

    def record(self, step: int) -> dict:
        values = {}
        for hook in self.hooks:
            values.update(hook.record(step))
        return values


class PeakMemory(StepHook):
    """The CUDA allocator's peak statistics restart as the run's second step begins, so the
    summary's peaks hold the steady state (and a CUDA graph's pool), not start-up; the first
    step's line still shows the first step's peak (launcher.run.record)."""

    def __init__(self, first_step: int):
        self.first_step = first_step

    def begin(self, step: int, span: Callable) -> None:
        if step == self.first_step + 1 and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
