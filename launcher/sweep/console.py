"""Every line a sweep prints on its console: the plan table before the first job (or each cell's
Megatron-LM command), one line per job (its cell, its repeat, its result, and the sweep's
progress: time so far and about how much is left), its total time, the closing results table,
where to look at every run at once, and a tuning sweep's tuned recipe, at the end; a sweep
refused as a whole; Slurm's word while it is asked (a job submitted, pending or given up, a dry
run's "no Slurm answers here"); `launch-report`'s usage.

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
from launcher.sweep.folders import run_placeholder, runs_glob, runs_pattern
from launcher.sweep.plan import Plan
from launcher.sweep.results import Results
from launcher.sweep.schedule import has_ok_run
from launcher.sweep.tables import ONE_RUN_NOTE, display

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
    runs = runs_glob(sweep_dir)
    lines = []
    offline = sorted(glob.glob(os.path.join(runs, "wandb", "offline-run-*")))
    table = glob.glob(os.path.join(glob.escape(sweep_dir), "wandb", "offline-run-*"))
    if offline:
        send = f"{runs_pattern(folder)}/wandb/offline-run-*" + (
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
        lines.append(f"[sweep] each run's own output: {run_placeholder(sweep_dir)}/{CONSOLE_LOG}")
    return lines


def print_dashboards(sweep_dir: str, tensorboard_dir: Optional[str], wandb_group: str,
                     wandb_page: Optional[str], traced: bool) -> None:
    for line in dashboard_lines(sweep_dir, tensorboard_dir, wandb_group, wandb_page, traced):
        print(line, flush=True)


def print_job_start(title: str) -> None:
    """A job's line's start, while it runs (its end follows once it has: print_job_end)."""
    print(title, end="", flush=True)


def print_line_end() -> None:
    """An interrupted job's line ends, so that what follows starts on a line of its own."""
    print(flush=True)


def print_job_end(title: str, summary, seconds: Optional[float], log: Optional[str],
                  progress: Progress) -> None:
    """A job's line (or its end, after print_job_start's `title`), counted in `progress`."""
    print(title + run_result(summary, seconds, log) + progress.finish_one(), flush=True)


def print_closing_line(progress: Progress) -> None:
    print(progress.closing_line(), flush=True)


def print_refusal(why: str) -> None:
    """A sweep refused as a whole (its one line; the exit code is 2)."""
    print(f"error: {why}", file=sys.stderr)


def print_no_valid_cell(plan: Plan) -> None:
    reasons = sorted({cell.reason for cell in plan.cells})
    why = f": {reasons[0]}" if len(reasons) == 1 else " (reasons above); fix the grid"
    print_refusal(f"no cell of the sweep is valid{why}")


def print_dry_run_end() -> None:
    print("[sweep] dry run: nothing started")


def print_slurm_silent(err: Exception) -> None:
    """A dry run's note where no Slurm answers (its checks of the partition and the job skipped)."""
    print(f"[sweep] no Slurm answers here ({err}): the partition and the job are not "
          "checked in this dry run", flush=True)


def print_test_only_silent(err: Exception) -> None:
    print(f"[sweep] sbatch --test-only did not answer ({str(err).splitlines()[0]}): the "
          "job is not checked before submitting", flush=True)


def print_submitted(job_id: str, name: str) -> None:
    print(f"[sweep] submitted job {job_id}: {name}", flush=True)


def print_slurm_line(text: str) -> None:
    """Slurm's word on one job: not submitted, or given up (its reason)."""
    print(f"[sweep] {text}", flush=True)


def print_pending(job_id: str, name: str, waited_s: float, reason: str,
                  pending_limit_s: float) -> None:
    print(f"[sweep] job {job_id} ({name}) pending for {waited_s / 60:.0f} min: "
          f"{reason}; gives up after sweep.pending_limit_min={pending_limit_s / 60:g}",
          flush=True)


def print_report_usage() -> None:
    print("usage: launch-report SWEEP_DIR  (the directory a `launch -m` sweep wrote)",
          file=sys.stderr)


def predicted_order(cells: list) -> List[str]:
    """With a prediction for two cells or more: the fastest predicted, and which cells the model
    cannot tell from it (the fast end of their band at or below the slow end of its band),
    unranked; the others are slower beyond the band."""
    banded = [c for c in cells if c.valid and c.predicted_steps]
    if len(banded) < 2:
        return []
    best = min(banded, key=lambda c: c.predicted_steps[1])
    near = [c for c in banded if c is not best and c.predicted_steps[2] <= best.predicted_steps[0]]
    slower = [c for c in banded if c is not best and c not in near]
    named = lambda group: ", ".join(f"{c.id} ({c.label})" for c in group) or "none"  # noqa: E731
    return [f"[sweep] predicted fastest: {best.id} ({best.label}), "
            f"{best.predicted_steps[1]:.3g} s/step; indistinguishable from it within the "
            f"prediction's band: {named(near)}; slower beyond the band: {named(slower)}"]


def print_plan(plan: Plan, rounds: list, race=None) -> None:
    """The plan table; in a tuning sweep, `race` (replayed from disk) marks the dropped cells."""
    todo = {(cell.id, repeat) for round_ in rounds for cell, repeat, _ in round_
            if race is None or (cell.id in race.alive and not race.ended)}
    keys = plan.keys
    widths = [max([len(k)] + [len(c.values[k]) for c in plan.cells]) for k in keys]
    print(f"[sweep] {plan.name}: {len(plan.cells)} cells x {plan.repeats} repeat(s) "
          f"into {plan.sweep_dir}")
    worlds = {c.world for c in plan.cells if c.world}
    if len(worlds) == 1:  # several: each cell's is in its row
        print(f"[sweep] each job's world: {next(iter(worlds))}")
    guess = max([len(c.predicted) for c in plan.cells if c.predicted], default=0)
    predicted = [f"{'predicted':<{guess}}"] if guess else []
    print("  " + "  ".join([f"{'cell':<10}"] + [f"{k:<{w}}" for k, w in zip(keys, widths)]
                           + predicted + ["plan"]))
    for cell in plan.cells:
        if race and cell.id in race.dropped:
            what = race.dropped[cell.id].reason
        elif cell.valid:
            left = sum((cell.id, r) in todo for r in range(plan.repeats))
            what = (f"run {left} of {plan.repeats} repeat(s)" + (" at most" if race else "")
                    if left else f"kept to the end of the race ({race.ended})" if race
                    else f"done ({plan.repeats} ok)")
            what += " (baseline)" if cell.id == plan.baseline else ""
            what += f", world {cell.world}" if len(worlds) > 1 else ""
        else:
            what = f"invalid, will not run: {cell.reason}"
        print("  " + "  ".join([f"{cell.id:<10}"]
                               + [f"{cell.values[k]:<{w}}" for k, w in zip(keys, widths)]
                               + ([f"{cell.predicted:<{guess}}"] if guess else []) + [what]))
    for line in predicted_order(plan.cells):
        print(line)
    valid = sum(c.valid for c in plan.cells)
    ok = sum(has_ok_run(plan.sweep_dir, c.id, r) for c in plan.cells if c.valid
             for r in range(plan.repeats))
    print(f"[sweep] {valid} valid cells: {'at most ' if race else ''}{len(todo)} runs to do, "
          f"{ok} already ok; {len(plan.cells) - valid} refused", flush=True)
    if race:
        print(f"[sweep] tuning: from round {plan.min_repeats} on, a cell whose throughput "
              "interval lies wholly below the best cell's stops running"
              + (f"; the race has ended: {race.ended}" if race.ended else ""), flush=True)


def print_commands(plan: Plan) -> None:
    """runtime.print_megatron_lm=true under -m: each cell's Megatron-LM command (an invalid
    cell's reason), and nothing started."""
    for cell in plan.cells:
        print(f"# cell {cell.id}: {cell.label}")
        print(cell.megatron_lm if cell.valid else f"# invalid, no command: {cell.reason}")
        print()
    print(f"[sweep] runtime.print_megatron_lm=true: {sum(c.valid for c in plan.cells)} "
          "command(s); nothing started", flush=True)


def shows_numerics(row: dict) -> bool:
    """Whether a console line shows its cell's losses against the baseline's: not the baseline's
    own, nor a failed cell's `n/a` (its reason is on the line)."""
    kind = row.get("numerics")
    return kind not in (None, "baseline") and (kind != "n/a" or row["status"] == "ok")


CONSOLE_HEADERS = ("cell", "status", "tokens/s/GPU", "speedup vs baseline [95% CI]",
                   "losses vs baseline", "note")


def console_cells(row: dict) -> tuple:
    """A row of the closing table, under CONSOLE_HEADERS."""
    tps = row.get("tokens_per_s_per_gpu")
    note = row["reason"] if row["status"] not in ("ok", "pending") else (
        row["race"] if row.get("race", "").startswith("dropped") else "")
    return (display(row, "label"), display(row, "status"), "" if tps is None else f"{tps:,.0f}",
            display(row, "speedup"), display(row, "numerics") if shows_numerics(row) else "",
            note or "")


def console_table(results: Results) -> List[str]:
    """The closing table: a header, then a row per cell, columns aligned; the note (a failure's
    reason, a race's drop) last, unpadded, as it may be long."""
    rows = [CONSOLE_HEADERS, *(console_cells(r) for r in results.rows)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(CONSOLE_HEADERS) - 1)]
    return ["  " + "  ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]).rstrip()
            for r in rows]


def print_results(results: Results, paths: list) -> None:
    for line in console_table(results):
        print(line)
    if any(r.get("step_noise_only") for r in results.rows):
        print(f"[sweep] {ONE_RUN_NOTE}")
    for defect in results.defects:
        print(f"[sweep] {defect.line}")
    print("[sweep] report: " + ", ".join(paths), flush=True)


def print_tuned(results: Results, path: Optional[str]) -> None:
    """The tuned recipe's path (launcher.sweep.tuned.write's) and the command that runs it: the
    sweep's last lines."""
    from launcher.sweep import tuned

    chosen, _, why = tuned.choose(results)
    if path is None:
        print(f"[sweep] tuned: no recipe written ({why})", flush=True)
        return
    folder = results.plan.sweep_dir
    print(f"[sweep] the race ended: {results.race.ended or 'not yet (rounds left to run)'}",
          flush=True)
    print(f"[sweep] tuned: {chosen['label']}. {why}. Recipe: {path}", flush=True)
    print(f"[sweep] run it: launch --config-dir {folder} +recipe=tuned", flush=True)
