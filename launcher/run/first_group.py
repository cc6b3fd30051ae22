"""The first parameter group's all-gather, measured: where it is issued, its size, how long it
takes, and how much of it the first forward waits for.

The switch (fsdp.prefetch_first_param_group) moves one collective: the all-gather of the bucket
that holds the model's first parameter (Megatron-FSDP's start_param_sync gathers
`list(module.parameters())[0]`'s bucket). With it on, the DistributedOptimizer's step issues it
from start_param_sync; with it off, the first forward pre-hook issues it and waits at once. What
the switch can save per step is bounded by that wait.

Instruments the instance, never megatron's source, and adds no host-device synchronisation:
- The DistributedOptimizer calls the *adapter's* `start_param_sync` attribute (a copy of the
  engine's bound method taken at construction): wrapped, to know where an all-gather is issued.
- The engine calls its pipeline's `all_gather_params` and `wait_bucket_ready` through attribute
  look-ups on each call: wrapped, to see the first bucket go from EMPTY/PRESERVED to
  COMMUNICATING (the issue) and the first wait on it after that (the forward's).
Clocks: on a CPU the host clock, with the completion time noted by a thread that waits on gloo's
work beside the rank (no wait is added to the rank); on a GPU CUDA events: one on the compute
stream at the issue, one on a side stream made to wait for the collective (a device-side wait),
one on the compute stream where the forward waits; they are read after the step's own sync point
(launcher.run.trainer: Trainer.train).
Inside a CUDA-graph capture nothing is recorded, and a replay runs no Python, so a captured run
has no timing samples (its summary says why).
"""

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Dict, Optional

import torch

from launcher.run.hooks import NO_SPAN, StepHook
from launcher.run.outputs import Metric

START_PARAM_SYNC, FORWARD = "start_param_sync", "forward"
WATCH_LIMIT_S = 60.0


@dataclass
class _Issue:
    where: str
    nbytes: int
    start: object  # the clock's mark at the issue
    done: object  # the clock's completion handle
    active: bool  # issued inside a training step


@dataclass
class Sample:
    """One training step's first-group all-gather."""

    issued_in: str
    nbytes: int
    allgather_s: float
    wait_s: float


class HostClock:
    """A CPU run: perf_counter. A short-lived thread per all-gather waits on gloo's works and
    notes when they completed. Nothing of the probe runs in gloo's worker thread: a Python
    callback there (a future's `then`) would hold the group's only worker (launcher.run.gloo)
    until it got the GIL, delaying the collectives queued behind it."""

    def mark(self):
        return time.perf_counter()

    def completion(self, handle):
        done = []
        watcher = threading.Thread(target=_note_completion, args=(_works(handle), done),
                                   name="first-group-clock", daemon=True)
        watcher.start()
        return watcher, done

    def seconds(self, issue: _Issue, waited) -> tuple:
        watcher, done = issue.done
        watcher.join(timeout=WATCH_LIMIT_S)  # the work completed before the step's wait returned
        if not done:
            raise RuntimeError(
                f"the first-group clock waited {WATCH_LIMIT_S:.0f} s for the note of an all-gather "
                "the step had already waited for; set logging.measure_first_group=false to run "
                "without it")
        # the wait, as CudaClock measures it: from reaching it to the all-gather's completion
        # (not megatron's bookkeeping after it, mark_bucket_ready_to_use)
        return done[0] - issue.start, max(0.0, done[0] - waited)

    def waiting(self):
        start = time.perf_counter()
        return lambda: start


def _note_completion(works: list, done: list) -> None:
    try:
        for work in works:
            work.wait()  # releases the GIL; a second waiter beside the rank's own is allowed
    except RuntimeError:
        return  # the collective failed: the rank's own wait raises it
    done.append(time.perf_counter())


class CudaClock:
    """A GPU run: CUDA events, read after the step's sync point."""

    def __init__(self):
        self.side = torch.cuda.Stream()

    def mark(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def completion(self, handle):
        # the side stream waits for the collective on the device; the host does not
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            handle.wait()
            return self.mark()

    def seconds(self, issue: _Issue, waited) -> tuple:
        ready = waited
        return (issue.start.elapsed_time(issue.done) / 1e3,
                max(0.0, ready.elapsed_time(issue.done) / 1e3))

    def waiting(self):
        ready = self.mark()
        return lambda: ready


def _works(handle):
    """The gloo works behind an all-gather's handle (a coalescing manager, or one work)."""
    return list(getattr(handle, "works", None) or [handle])


class FirstGroupProbe(StepHook):
    """Counts first-group prefetches from start_param_sync and, with `timed`, measures each
    training step's first-group all-gather (a Sample per step that issued and waited for it): a
    step hook (launcher.run.hooks), whose record is the step's sample."""

    declared = (
        Metric("first_group_allgather_s", "perf/first_group_allgather_s", "s",
               "the first group's all-gather, from its issue to its completion; steps that "
               "issued and waited for it"),
        Metric("first_group_wait_s", "perf/first_group_wait_s", "s",
               "how long the step's first forward waited for it: what the switch can save"),
    )

    def __init__(self, adapter, timed: bool):
        self.prefetches = 0
        self.samples: Dict[int, Sample] = {}  # step -> its measurement, once the step has ended
        self._pending: Optional[tuple] = None  # (issue, waited) of the step running now
        self.clock = (CudaClock() if torch.cuda.is_available() else HostClock()) if timed else None
        self._engine = adapter.module
        self._pipeline = self._engine.all_gather_pipeline
        self._first = first_bucket(self._engine)
        self._inside_start = self._active = False
        self._step, self._span = None, NO_SPAN
        self._issue: Optional[_Issue] = None
        self._wrap(adapter)

    def nbytes(self) -> int:
        """Bytes the first group's all-gather fills: its unsharded bucket(s)."""
        return sum(bucket_bytes(self._pipeline, b) for b in self._coalesced_with_first())

    def begin(self, step: int, span=NO_SPAN) -> None:
        """`span`: the profiling window's named ranges in a profiled step (launcher.run.profile),
        around the first group's issue and the forward's wait for it."""
        self._active, self._step, self._span = True, step, span

    def end(self, step: int) -> None:
        """After the step's sync point: the step's events are complete and can be read."""
        self._active, self._span = False, NO_SPAN
        if self._pending is not None:
            (issue, waited), self._pending = self._pending, None
            allgather, wait = self.clock.seconds(issue, waited)
            self.samples[self._step] = Sample(issue.where, issue.nbytes, allgather, wait)

    def record(self, step: int) -> dict:
        sample = self.samples.get(step)
        if sample is None:
            return {}
        return {"first_group_allgather_s": sample.allgather_s, "first_group_wait_s": sample.wait_s}

    def settle(self) -> None:
        """Waits until every all-gather in flight has run: the first group's prefetch that the
        last step's start_param_sync issued, and the buckets M-FSDP prefetched with it
        (`suggested_AG_prefetch_size`). The profiling window stops only then
        (launcher.run.profile), so that no collective issued while torch.profiler recorded is
        still running on gloo's worker thread when it stops: such a collective ends its profiler
        range after the profiler is gone (pytorch/pytorch#187483 fixes such a teardown race for
        the profiler's global callbacks), and a rank died of it at its next wait
        (docs/crashes.md)."""
        for handle, _ in list(self._pipeline.param_gather_event_map.values()):
            for work in _works(handle):
                work.wait()

    def _wrap(self, adapter) -> None:
        start_param_sync = adapter.start_param_sync
        all_gather = self._pipeline.all_gather_params
        wait = self._pipeline.wait_bucket_ready

        def probed_start_param_sync(*args, **kwargs):
            self._inside_start = True
            try:
                return start_param_sync(*args, **kwargs)
            finally:
                self._inside_start = False

        def probed_all_gather(*args, **kwargs):
            if kwargs.get("bwd") or not self._first_is_idle():
                return all_gather(*args, **kwargs)
            span = self._span if self._requests_first(*args, **kwargs) else NO_SPAN
            with span("first_group.all_gather"):
                start = self._mark()
                result = all_gather(*args, **kwargs)
                self._issued(start)
            return result

        def probed_wait(bucket_id, bwd, *args, **kwargs):
            if bucket_id != self._first or bwd or self._issue is None:
                return wait(bucket_id, bwd, *args, **kwargs)
            issue, self._issue = self._issue, None
            waited = self.clock.waiting() if self._measuring(issue) else None
            with self._span("first_group.wait"):
                result = wait(bucket_id, bwd, *args, **kwargs)
            if waited is not None and self._pending is None:  # the step's first wait on it
                self._pending = (issue, waited())
            return result

        adapter.start_param_sync = probed_start_param_sync
        self._pipeline.all_gather_params = probed_all_gather
        self._pipeline.wait_bucket_ready = probed_wait

    def _requests_first(self, params=(), *args, **kwargs) -> bool:
        """Whether an all_gather_params call asks for the first group (its `params` argument)."""
        groups = self._pipeline.buffer.param_to_param_group
        return any(groups.get(p) == self._first for p in kwargs.get("params", params))

    def _first_is_idle(self) -> bool:
        from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import (
            BucketStatus,
        )

        status = self._pipeline.bucket_status[self._pipeline.get_bucket_key(self._first, False)]
        return status in (BucketStatus.EMPTY, BucketStatus.PRESERVED)

    def _mark(self):
        """The clock's mark at an issue; None where it is not timed: inside a capture, and in a
        profiled step on a CPU, where the HostClock's watcher thread, blocked in gloo's wait on a
        work the profiler records, crashed the rank later (SIGSEGV at the next step's first-group
        wait, 2 in about 25 two-rank runs; none in 12 without the watcher). The profiled steps
        are out of throughput anyway, and the window's breakdown reads the wait from its trace."""
        if not self.clock or _capturing():
            return None
        if self._span is not NO_SPAN and isinstance(self.clock, HostClock):
            return None
        return self.clock.mark()

    def _issued(self, start) -> None:
        key = self._pipeline.get_bucket_key(self._first, False)
        if key not in self._pipeline.param_gather_event_map:
            return  # gathered synchronously (not the overlapped path): nothing to time
        where = START_PARAM_SYNC if self._inside_start else FORWARD
        if where == START_PARAM_SYNC:
            self.prefetches += 1
        handle = self._pipeline.param_gather_event_map[key][0]
        done = self.clock.completion(handle) if start is not None else None
        self._issue = _Issue(where, self.nbytes(), start, done, self._active)

    def _measuring(self, issue: _Issue) -> bool:
        return (issue.active and self._active and issue.start is not None
                and not _capturing())

    def _coalesced_with_first(self) -> list:
        """The first bucket, and the buckets M-FSDP coalesces into one collective with it (those
        of its bucket group)."""
        groups = self._pipeline.buffer.bucket_to_bucket_group
        return sorted(groups.get(self._first, [self._first]))


def first_bucket(engine) -> int:
    """The bucket of the module's first parameter: what start_param_sync all-gathers. Looked up
    through the raw parameter (the module may hold its DTensor stand-in between steps)."""
    name = next(name for name, _ in engine.module.named_parameters())
    return engine.param_and_grad_buffer.param_to_param_group[engine.raw_param[name]]


def bucket_bytes(pipeline, bucket_id: int) -> int:
    """Bytes of the unsharded bucket an all-gather of `bucket_id` fills."""
    buffer = pipeline.get_fsdp_buffer(bucket_id)
    return buffer.bucket_index.size * buffer.data.element_size()


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def summarise(probe: FirstGroupProbe, steady_steps: list, captured: bool) -> dict:
    """The summary's first-group fields over the steady-state steps: medians of the samples."""
    samples = [probe.samples[s] for s in steady_steps if s in probe.samples]
    fields = {"first_group_prefetches": probe.prefetches, "first_group_bytes": probe.nbytes(),
              "first_group_allgather_s": None,
              "first_group_wait_s": None, "first_group_issued_in": None,
              "first_group_samples": len(samples)}
    if samples:
        places = sorted({s.issued_in for s in samples})
        fields.update(first_group_allgather_s=statistics.median(s.allgather_s for s in samples),
                      first_group_wait_s=statistics.median(s.wait_s for s in samples),
                      first_group_issued_in=places[0] if len(places) == 1 else "+".join(places))
        return fields
    fields["first_group_null_reason"] = null_reason(probe, steady_steps, captured)
    return fields


def null_reason(probe: FirstGroupProbe, steady_steps: list, captured: bool) -> str:
    if probe.clock is None:
        return "logging.measure_first_group=false"
    if captured:
        return ("the training step ran as a captured CUDA graph, whose replays run no Python: "
                "the all-gather is inside the graph and cannot be timed from the host")
    if not steady_steps:
        return "no steady-state step"
    return ("no steady-state step issued and waited for the first group's all-gather "
            "(fsdp.sharding_strategy gathers nothing, or fsdp.overlap_param_gather=false)")
