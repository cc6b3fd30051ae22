"""The profiling window (config section `profile`), as Megatron-LM's training loop runs its own:
cudaProfilerStart/Stop around the window for Nsight Systems (with torch's NVTX ranges per op,
autograd.profiler.emit_nvtx, as megatron/training/training.py enters them), or torch.profiler over
exactly the window's steps; the CUDA allocator's history recorded from the rank's start and dumped
after the window, and on an out-of-memory error before it is raised (Megatron-LM's
--record-memory-history in pretrain_gpt.py's model provider: _record_memory_history and an OOM
observer).

Named ranges mark the step's parts, in both kinds: `step N` around each profiled step (its sync
point included), `forward_backward` (`graph.replay` when the step replays a captured CUDA graph),
`optimizer`, `data` (each microbatch's read), `first_group.all_gather` (the first parameter
group's issue, in start_param_sync or in the forward: launcher.run.first_group) and
`first_group.wait` (the forward's wait for it). Outside the window, and on ranks that do not
profile, no range is entered: the step's spans are `NO_SPAN` (launcher.run.hooks), a shared null
context.
"""

import gzip
import json
import os
import statistics
from typing import Callable, Dict, List, Optional

import torch

from launcher.config import Config, ProfileConfig, ProfileKind
from launcher.run.hooks import StepHook
from launcher.summary import ProfileResult
MEMORY_ENTRIES = 100_000  # alloc/free events kept, as Megatron-LM keeps
PARTS = ("forward_backward", "graph.replay", "optimizer", "first_group.wait")


def trace_path(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, "profile", f"rank{rank}.json.gz")


def memory_path(run_dir: str, rank: int, oom: bool = False) -> str:
    return os.path.join(run_dir, "profile", f"memory{'_oom' if oom else ''}_rank{rank}.pickle")


class Window(StepHook):
    """This rank's profiling window, a step hook (launcher.run.hooks): its steps' named ranges
    (`span(name)`), the profiler started at the first step it sees and, after the last one's
    sync point, `settle` (every collective in flight runs to its end) before it stops."""

    def __init__(self, cfg: ProfileConfig, steps: tuple, rank: int, run_dir: str,
                 settle: Callable):
        self.cfg, self.rank, self.run_dir, self.settle = cfg, rank, run_dir, settle
        self.first, self.last = steps
        self.profiler = self._nvtx = None
        self._step_range, self._ran = None, False
        os.makedirs(os.path.join(run_dir, "profile"), exist_ok=True)

    def covers(self, step: int) -> bool:
        return self.first <= step <= self.last

    def span(self, name: str):
        if self.cfg.kind == ProfileKind.torch:
            return torch.profiler.record_function(name)
        return torch.cuda.nvtx.range(name)

    def ranges(self, step: int) -> Optional[Callable]:
        return self.span if self.covers(step) else None

    def begin(self, step: int, span: Callable) -> None:
        if not self.covers(step):
            return
        if not self._ran:  # the window's first step this run makes (a resumed run: maybe later)
            self._start()
            self._ran = True
        self._step_range = self.span(f"step {step}")
        self._step_range.__enter__()

    def end(self, step: int) -> None:
        if not self.covers(step):
            return
        self._step_range.__exit__(None, None, None)
        if step == self.last:
            self.settle()  # no collective issued under the profiler may outlive it
            self._stop()

    def _start(self) -> None:
        if self.cfg.kind == ProfileKind.nsys:
            torch.cuda.check_error(torch.cuda.cudart().cudaProfilerStart())
            self._nvtx = torch.autograd.profiler.emit_nvtx(record_shapes=True)
            self._nvtx.__enter__()
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        else:
            quiet_kineto_without_cuda()
        # acc_events: one window is one profiling cycle, so keeping events across cycles changes
        # nothing; without it torch warns at every start that it clears them between cycles.
        self.profiler = torch.profiler.profile(activities=activities,
                                               with_stack=self.cfg.with_stack, acc_events=True)
        self.profiler.start()

    def _stop(self) -> None:
        if self._nvtx is not None:
            self._nvtx.__exit__(None, None, None)
            torch.cuda.check_error(torch.cuda.cudart().cudaProfilerStop())
        if self.profiler is not None:
            self.profiler.stop()
            path = trace_path(self.run_dir, self.rank)
            partial = path.replace(".json.gz", ".partial.json.gz")  # nothing half-written
            self.profiler.export_chrome_trace(partial)
            os.replace(partial, path)
        if self.cfg.memory:
            torch.cuda.memory._dump_snapshot(memory_path(self.run_dir, self.rank))
            torch.cuda.memory._record_memory_history(enabled=None)  # no cost after the window


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


def quiet_kineto_without_cuda() -> None:
    """Where no CUDA device is usable, kineto (torch.profiler's library, built with CUDA) still
    asks the driver for the device count when it writes a trace's device properties, and logs
    `ERROR: ... DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35` (no driver) once
    per profiled rank: an error about GPUs a CPU run never asked for (its activities are CPU
    only; leaving CUDA out does not stop the query). KINETO_LOG_LEVEL, which kineto reads once
    when it first starts (here, the profiler's start), set to 5 (above its ERROR level 4) keeps
    that line off the console. It also hides whatever else kineto would log in this process, so
    it is set only on this path, and a value the user set (to debug kineto) is kept. A CPU
    trace does not depend on kineto's log: it is moved into place and read back for the step's
    breakdown (Window._stop, step_breakdown), which fail loudly where kineto wrote none."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")


def window_for(cfg: Config, rank: int, run_dir: str, settle: Callable) -> Optional[Window]:
    """This rank's window; None where it does not profile. `settle`: waits for every collective
    in flight (launcher.run.first_group.FirstGroupProbe.settle)."""
    if not profiles(cfg, rank):
        return None
    return Window(cfg.profile, cfg.profile_window, rank, run_dir, settle)


def profiles(cfg: Config, rank: int) -> bool:
    return cfg.profile.enabled and rank in cfg.profile.ranks


def record_memory(cfg: Config, rank: int, run_dir: str) -> None:
    """With profile.memory on a profiled rank, the CUDA allocator's history from now on (call it
    before the build, as Megatron-LM's model provider does); the window dumps it at its end."""
    if profiles(cfg, rank) and cfg.profile.memory:
        os.makedirs(os.path.join(run_dir, "profile"), exist_ok=True)
        record_memory_history(memory_path(run_dir, rank, oom=True))


def result(cfg: Config, run_dir: str, steps_run: List[int], window: Optional[Window],
           waits_s: Dict[int, float]) -> Optional[ProfileResult]:
    """Rank 0's account of the run's window, after it: the steps it covered and the files every
    profiled rank wrote; with torch on a profiled rank 0, the breakdown of its steps. `waits_s`:
    the first-group waits the probe measured per step (CUDA events on a GPU), preferred to the
    host's range."""
    if not cfg.profile.enabled:
        return None
    first, last = cfg.profile_window
    steps = [s for s in steps_run if first <= s <= last]
    if not steps:
        return ProfileResult(cfg.profile.kind.value, [])
    files = []
    for rank in cfg.profile.ranks:
        if cfg.profile.kind == ProfileKind.torch:
            files.append(trace_path(run_dir, rank))
        if cfg.profile.memory:
            files.append(memory_path(run_dir, rank))
    breakdown = (step_breakdown(trace_path(run_dir, 0), steps, waits_s)
                 if window is not None and cfg.profile.kind == ProfileKind.torch else None)
    return ProfileResult(cfg.profile.kind.value, steps,
                         [os.path.relpath(f, run_dir) for f in files], breakdown)


def describe(profile: ProfileResult, run_dir: str) -> str:
    """The run's last line: where the window's files are and what opens them."""
    if not profile.steps:
        return ("[launch] profile: nothing profiled, the window lies before the steps this run "
                "made (it resumed after it)")
    window = f"steps {profile.steps[0]}..{profile.steps[-1]}"
    files = [os.path.join(run_dir, f) for f in profile.files]
    traces = [f for f in files if f.endswith(".json.gz")]
    snapshots = [f for f in files if f.endswith(".pickle")]
    if profile.kind == ProfileKind.torch.value:
        line = (f"[launch] profile: {window} traced in {', '.join(traces)}; open a trace at "
                "https://ui.perfetto.dev (or chrome://tracing)")
    else:
        line = (f"[launch] profile: {window} between cudaProfilerStart/Stop, with NVTX ranges; "
                "Nsight Systems captures them when the run is started under `nsys profile "
                "--capture-range=cudaProfilerApi --capture-range-end=stop "
                "--cuda-graph-trace=node`")
    if snapshots:
        line += (f"; memory snapshots {', '.join(snapshots)}: drag one into "
                 "https://pytorch.org/memory_viz")
    return line


def record_memory_history(oom_path: str) -> None:
    """The CUDA allocator's history from now on, and a snapshot at an out-of-memory error, taken
    by the allocator's observer before the error is raised."""
    torch.cuda.memory._record_memory_history(max_entries=MEMORY_ENTRIES)

    def on_oom(device, alloc, device_alloc, device_free):
        torch.cuda.memory._dump_snapshot(oom_path)

    torch._C._cuda_attach_out_of_memory_observer(on_oom)


def read_ranges(path: str) -> List[dict]:
    """The trace's named ranges (record_function), host-side and GPU-side, as Chrome events."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("ph") == "X"
            and e.get("cat") in ("user_annotation", "gpu_user_annotation")]


def step_breakdown(path: str, steps: List[int], waits_s: Dict[int, float]) -> Dict[str, float]:
    """Per part, the median over `steps` of its time in each step (ms)."""
    ranges = read_ranges(path)
    per_step = {s: parts_of(ranges, s, waits_s.get(s)) for s in steps}
    keys = sorted({k for parts in per_step.values() for k in parts})
    return {k: statistics.median(parts.get(k, 0.0) for parts in per_step.values()) for k in keys}


def parts_of(ranges: List[dict], step: int, wait_s: Optional[float]) -> Dict[str, float]:
    """One step's parts (ms): the ranges inside its `step N` range, GPU-side where there are."""
    [outer] = [r for r in ranges if r["name"] == f"step {step}" and r["cat"] == "user_annotation"]
    start, stop = outer["ts"], outer["ts"] + outer["dur"]
    parts = {"step": outer["dur"] / 1e3}
    for name in PARTS:
        inside = [r for r in ranges if r["name"] == name and start <= r["ts"] < stop]
        on_gpu = [r for r in inside if r["cat"] == "gpu_user_annotation"]
        chosen = on_gpu or [r for r in inside if r["cat"] == "user_annotation"]
        if chosen:
            key = "forward_backward" if name == "graph.replay" else name
            parts[key] = parts.get(key, 0.0) + sum(r["dur"] for r in chosen) / 1e3
    if wait_s is not None:
        parts["first_group.wait"] = wait_s * 1e3
    return parts
