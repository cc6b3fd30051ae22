"""What a sweep shows on its console: one line per job (its cell, its repeat, its result, and
the sweep's progress: time so far and about how much is left), its total time, and where to
look at every run at once, at the end.

A job's own output (Hydra's launch line with the job's overrides, the run's start line, its
dashboards' lines, every rank's warnings, what libraries below Python print) goes to
console.log in the job's run folder, as the console would have shown it; a failed job's line
names that file. logging.print_steps=true (a console line per step, asked for) leaves the jobs'
output on the console.
"""

import contextlib
import glob
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from launcher.run.console import duration

CONSOLE_LOG = "console.log"
PERFETTO = "https://ui.perfetto.dev"


@contextlib.contextmanager
def output_to(path: str):
    """This process's stdout and stderr appended to `path` meanwhile, at the file-descriptor
    level: Python's prints and logging, and what the job's rank processes (they inherit the
    descriptors) and libraries below Python (kineto, gloo, NCCL) write."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def run_title(number: int, total: int, label: str, repeat: int, attempt: int) -> str:
    """`[sweep] 3/6 prefetch_first_param_group=false, impl=none, repeat 1: `, the line's start."""
    again = f" (attempt {attempt + 1})" if attempt else ""
    return f"[sweep] {number}/{total} {label}, repeat {repeat}{again}: "


def run_result(summary, seconds: Optional[float], log: Optional[str]) -> str:
    """The line's end: ok with the throughput, invalid with the reason, or failed with its class,
    its one-line reason and where its log is. `seconds`: the job's wall time, where the sweep
    saw it alone (not a Slurm round's)."""
    took = f"{seconds:.0f} s" if seconds is not None else ""
    where = f"; log: {log}" if log else ""
    if summary is None:  # record_crash writes one for every failed job: not expected
        return f"no summary.json{where}"
    if summary.status == "ok":
        m = summary.metrics
        measured = (f"{m.tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
                    if m.tokens_per_s_per_gpu is not None
                    else f"throughput null ({m.throughput_null_reason})")
        return f"ok, {measured}" + (f" ({took})" if took else "")
    if summary.status == "invalid":
        return f"invalid: {summary.message}"
    return f"failed ({summary.status}{', ' + took if took else ''}): {summary.message}{where}"


def progress_note(done: int, total: int, elapsed_s: float) -> str:
    """`[48 s elapsed, about 48 s left]`: the time since the first job, and the mean job so far
    times the jobs left (jobs differ in length, so it is about)."""
    if done >= total:
        return f"  [{duration(elapsed_s)} elapsed]"
    left = elapsed_s / done * (total - done)
    return f"  [{duration(elapsed_s)} elapsed, about {duration(left)} left]"


@dataclass
class Progress:
    """A sweep's jobs as they end: how many of `total` are done, and since when it runs."""

    total: int
    done: int = 0
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self):
        self.started = self.clock()

    def title(self, index_in_round: int, label: str, repeat: int, attempt: int) -> str:
        """The line's start of the round's job at `index_in_round`."""
        return run_title(self.done + index_in_round + 1, self.total, label, repeat, attempt)

    def finish_one(self) -> str:
        """Counts a job as done; its line's end: the time so far and about how much is left."""
        self.done += 1
        return progress_note(self.done, self.total, self.clock() - self.started)

    def closing_line(self) -> str:
        """`[sweep] 6 jobs in 2 min 06 s`: the sweep's jobs and their time, at the end."""
        ran = f"{self.done} of {self.total} planned" if self.done < self.total else f"{self.done}"
        return f"[sweep] {ran} job(s) ran in {duration(self.clock() - self.started)}"


def dashboard_lines(sweep_dir: str, tensorboard_dir: Optional[str], wandb_group: str,
                    wandb_page: Optional[str], traced: bool) -> List[str]:
    """Where every run of the sweep can be looked at, once: wandb (its offline runs and the
    command that sends them, or the group's page), TensorBoard (one command for every run; its
    logging.tensorboard.dir where one is set, else the sweep's folder), the traces, and the
    jobs' own output."""
    folder = shlex.quote(sweep_dir)
    runs = os.path.join(glob.escape(sweep_dir), "*", "repeat*", "attempt*")
    lines = []
    offline = sorted(glob.glob(os.path.join(runs, "wandb", "offline-run-*")))
    table = glob.glob(os.path.join(glob.escape(sweep_dir), "wandb", "offline-run-*"))
    if offline:
        send = f"{folder}/*/repeat*/attempt*/wandb/offline-run-*" + (
            f" {folder}/wandb/offline-run-*" if table else "")
        one = shlex.quote(os.path.dirname(offline[0]))
        lines.append(f"[sweep] wandb: {len(offline) + len(table)} offline runs of group "
                     f"{wandb_group} (the results table's run included); send them with "
                     f"`wandb sync {send}`; look at one with `wandb leet {one}`")
    elif wandb_page:
        lines.append(f"[sweep] wandb: every run of group {wandb_group}, and the results table, "
                     f"at {wandb_page}")
    tensorboard = tensorboard_dir or sweep_dir
    if glob.glob(os.path.join(runs, "tb", "*")) or tensorboard_dir:
        lines.append("[sweep] tensorboard: every run, side by side (its HParams tab: each cell's "
                     "values against its results); look at them with "
                     f"`tensorboard --logdir {shlex.quote(tensorboard)}`")
    if traced:
        lines.append(f"[sweep] traces: one per cell (its first repeat's), linked from "
                     f"report.html's table; open one at {PERFETTO} (or chrome://tracing)")
    if glob.glob(os.path.join(runs, CONSOLE_LOG)):
        lines.append(f"[sweep] each run's own output: {sweep_dir}/CELL/repeatN/attemptM/"
                     f"{CONSOLE_LOG}")
    return lines
