"""`launch -m`: plan and validate the whole grid, run the rounds through Hydra's launcher, report.

Called by the Hydra sweeper plugin (hydra_plugins/launch_sweeper). Each job is launched through
whatever hydra/launcher is configured (basic: one after another in this process, each job's ranks
in fresh processes; submitit: Slurm jobs). The results are read back from the runs' summary.json,
so they are the same whichever launcher ran them. The console shows a line per job and, at the
end, where to look at every run (launcher.sweep.console); a job's own output is in its folder.
"""

import contextlib
import dataclasses
import os
import sys
import time
from typing import List, Optional

from omegaconf import DictConfig, OmegaConf

from launcher.config import ConfigError, ProfileConfig
from launcher.sweep.plan import (
    Plan, SweepError, bare_key, build_plan, canonical, has_ok_run, run_dir, schedule,
)
from launcher.summary import read as read_summary
from launcher.sweep import submit
from launcher.sweep.console import CONSOLE_LOG, Progress, dashboard_lines, output_to, run_result
from launcher.sweep.race import replay
from launcher.sweep.slurm import is_submitit
from launcher.sweep.submit import JobEnded


def quote(text: str) -> str:
    """A Hydra override value that stays a string whatever it holds (=, commas, quotes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def job_overrides(plan: Plan, master: DictConfig, cell, repeat: int, attempt: int) -> List[str]:
    """A cell's overrides, plus where it writes and how its wandb run is grouped and tagged."""
    tags = [*master.logging.wandb.tags, *(f"{k}={v}" for k, v in cell.values.items())]
    quiet = ["logging.print_steps=false"] if master.logging.print_steps is None else []
    name = quote(run_name(cell.label, repeat, attempt))
    # only where they act: a key set where it has no effect is refused (launcher.config.effect)
    wandb = [f"logging.wandb.group={quote(plan.wandb_group)}", f"logging.wandb.name={name}",
             "logging.wandb.tags=[" + ",".join(quote(t[:64]) for t in tags) + "]"]  # its limit
    tensorboard = [f"logging.tensorboard.name={name}",
                   "logging.tensorboard.hparams=[" + ",".join(hparams(plan, master)) + "]"]
    return [*cell.overrides, *quiet, *unprofiled(master, repeat),
            f"hydra.sweep.subdir={cell.id}/repeat{repeat}/attempt{attempt}",
            *(wandb if cell_value(master, cell, "logging.wandb.mode") != "disabled" else []),
            *(tensorboard if cell_value(master, cell, "logging.tensorboard.enabled") == "true"
              else [])]


def cell_value(master: DictConfig, cell, key: str) -> str:
    """A key's value in a cell: its swept value, else the sweep's fixed one."""
    return cell.values.get(key) or canonical(OmegaConf.select(master, key))


def unprofiled(master: DictConfig, repeat: int) -> List[str]:
    """A profiling sweep profiles each cell's first repeat only: the others run with profiling
    off, every profile key back to its default (ProfileConfig's, where it is written once)."""
    if master.profile.kind == "none" or repeat == 0:
        return []
    off = dataclasses.asdict(ProfileConfig())
    return ["profile=none", *(f"profile.{key}={canonical(value)}" for key, value in off.items()
                              if key != "kind")]


def hparams(plan: Plan, master: DictConfig) -> List[str]:
    """TensorBoard's HParams keys of every job: the sweep's own (logging.tensorboard.hparams),
    then each swept key that is a config value (a config group's choice is not one)."""
    swept = [bare_key(k) for k in plan.keys
             if not isinstance(OmegaConf.select(master, bare_key(k)), DictConfig)]
    return list(dict.fromkeys([*master.logging.tensorboard.hparams, *swept]))


def run_name(label: str, repeat: int, attempt: int) -> str:
    """`prefetch_first_param_group=false, impl=none #0` (and `retry N` after a failed attempt)."""
    return f"{label} #{repeat}" + (f" retry {attempt}" if attempt else "")


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


def record_crash(folder: str, job_return) -> None:
    """A job that failed without a summary (it raised before its spawner wrote one, or its
    launcher lost it: a Slurm job killed) still leaves a classified one. What Slurm ended
    (cancelled, timed out) replaces whatever the run wrote, unless it finished ok."""
    from hydra.core.utils import JobStatus

    from launcher import summary as run_summary
    from launcher.run.failures import classify_failure

    if isinstance(job_return, Exception):
        error = job_return
    elif job_return.status == JobStatus.FAILED:
        error = job_return._return_value
    else:
        return
    summary = run_summary.read(folder)
    slurm_ended = isinstance(error, JobEnded)
    if summary is None or (slurm_ended and summary.status != "ok"):
        os.makedirs(folder, exist_ok=True)
        text = str(error) if slurm_ended else f"{type(error).__name__}: {error}"
        status = error.status if slurm_ended else classify_failure(1, text)
        run_summary.write(folder, run_summary.RunFailure(
            status=status, message=text.splitlines()[0],
            log_excerpt=getattr(summary, "log_excerpt", "") or text[-800:],
            slurm_job_id=getattr(error, "job_id", None)))


def job_name(plan: Plan, cell, repeat: int, attempt: int) -> str:
    """A Slurm job's name: the sweep, the cell and the run, as its directory is named."""
    return f"{plan.name}/{cell.id}/repeat{repeat}" + (f"/attempt{attempt}" if attempt else "")


def run_round(launcher, plan: Plan, master: DictConfig, round_, progress: Progress) -> None:
    """Runs a round's jobs; each leaves a summary (record_crash's where it wrote none) and one
    console line (launcher.sweep.console), which counts it in `progress`."""
    first = progress.done
    batch = [job_overrides(plan, master, cell, r, n) for cell, r, n in round_]
    folders = [run_dir(plan.sweep_dir, cell.id, r, n) for cell, r, n in round_]
    titles = [progress.title(i, cell.label, r, n) for i, (cell, r, n) in enumerate(round_)]
    if is_submitit(master.hydra.launcher):
        try:
            ended = submit.launch(launcher, batch, first, [job_name(plan, *job) for job in round_],
                                  master.sweep.pending_limit_min)
        except Exception as err:  # noqa: BLE001  a launcher that raises fails its round only
            ended = [(err, None)] * len(batch)
        for title, folder, (job_return, log) in zip(titles, folders, ended):
            record_crash(folder, job_return)
            print(title + run_result(read_summary(folder), None, log) + progress.finish_one(),
                  flush=True)
        return
    for index, (title, folder, overrides) in enumerate(zip(titles, folders, batch), start=first):
        run_here(launcher, overrides, index, title, folder,
                 captured=master.logging.print_steps is not True, progress=progress)


def run_here(launcher, overrides: List[str], index: int, title: str, folder: str,
             captured: bool, progress: Progress) -> None:
    """One job through a launcher that runs it in this process (Hydra's basic), its output into
    its folder's console.log unless not `captured` (logging.print_steps=true asked for the runs'
    own consoles); its line's start is shown while it runs, its result when it ends."""
    log = os.path.join(folder, CONSOLE_LOG) if captured else None
    if captured:
        print(title, end="", flush=True)
    start = time.monotonic()
    try:
        with output_to(log) if captured else contextlib.nullcontext():
            job_return = launch_one(launcher, overrides, index)
    except BaseException:  # an interrupt: what follows starts on a line of its own
        print(flush=True)
        raise
    record_crash(folder, job_return)
    print(("" if captured else title)
          + run_result(read_summary(folder), time.monotonic() - start, log)
          + progress.finish_one(), flush=True)


def launch_one(launcher, overrides: List[str], index: int):
    """The job's JobReturn, or the exception that ended it (a launcher that raises fails the
    job, not the sweep)."""
    try:
        return launcher.launch([overrides], initial_job_idx=index)[0]
    except Exception as err:  # noqa: BLE001
        return err


def run_sweep(master: DictConfig, config_loader, make_launcher, params: dict,
              arguments: List[str]) -> int:
    """The whole sweep; returns the exit code (0 all runs ok, 1 a run failed, 2 bad input).
    make_launcher() instantiates hydra/launcher, once the pre-flight has passed."""
    fixed = [f"{k}={v}" for k, v in (params or {}).items()]

    def load(overrides):
        return config_loader.load_sweep_config(master, overrides)

    try:
        plan = build_plan(master, load, fixed + list(arguments), config_loader)
    except (ConfigError, SweepError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if master.runtime.print_megatron_lm and plan.baseline is not None:
        return print_commands(plan)
    rounds = schedule(plan)
    print_plan(plan, rounds, replay(plan) if plan.tune else None)
    if plan.baseline is None:
        reasons = sorted({cell.reason for cell in plan.cells})
        why = f": {reasons[0]}" if len(reasons) == 1 else " (reasons above); fix the grid"
        print(f"error: no cell of the sweep is valid{why}", file=sys.stderr)
        return 2
    if master.runtime.dry_run:
        print("[sweep] dry run: nothing started")
        return 0
    os.makedirs(plan.sweep_dir, exist_ok=True)
    reported = os.path.exists(os.path.join(plan.sweep_dir, "results.csv"))
    plan.save()
    OmegaConf.save(master, os.path.join(plan.sweep_dir, "multirun.yaml"))
    launcher = None
    progress = Progress(sum(len(round_) for round_ in rounds))  # a race may end sooner
    for round_ in rounds:
        if plan.tune:  # the race so far, from what is on disk: who still runs
            race = replay(plan)
            if race.ended:
                break
            round_ = [job for job in round_ if job[0].id in race.alive]
        if not round_:
            continue
        launcher = launcher or make_launcher()
        run_round(launcher, plan, master, round_, progress)
    if progress.done:
        print(progress.closing_line(), flush=True)
    # A rerun that ran nothing logs no second wandb table.
    return finish(plan, master, log=progress.done > 0 or not reported)


def print_commands(plan: Plan) -> int:
    """runtime.print_megatron_lm=true under -m: each cell's Megatron-LM command (an invalid
    cell's reason), and nothing started."""
    for cell in plan.cells:
        print(f"# cell {cell.id}: {cell.label}")
        print(cell.megatron_lm if cell.valid else f"# invalid, no command: {cell.reason}")
        print()
    print(f"[sweep] runtime.print_megatron_lm=true: {sum(c.valid for c in plan.cells)} "
          "command(s); nothing started", flush=True)
    return 0


def finish(plan: Plan, master: DictConfig, log: bool) -> int:
    from launcher.sweep.report import print_results, write_all
    from launcher.sweep.results import collect

    results = collect(plan)
    paths = write_all(results)
    wandb_page = log_table(results, master) if log else None
    print_results(results, paths)
    tensorboard = master.logging.tensorboard
    for line in dashboard_lines(plan.sweep_dir, tensorboard.dir if tensorboard.enabled else None,
                                plan.wandb_group, wandb_page,
                                any(r.get("profile_trace") for r in results.rows)):
        print(line, flush=True)
    if plan.tune:
        print_tuned(results, master)
    failed = [r for r in results.rows if r["status"] not in ("ok", "invalid")]
    return 1 if failed else 0


def print_tuned(results, master: DictConfig) -> None:
    """Writes the tuned recipe; its path and the command that runs it are the sweep's last lines."""
    from launcher.sweep import tuned

    choices = dict(master.hydra.runtime.choices)
    path = tuned.write(results, choices.get("recipe"), [k for k in choices if "/" not in k])
    chosen, _, why = tuned.choose(results)
    if path is None:
        print(f"[sweep] tuned: no recipe written ({why})", flush=True)
        return
    folder = results.plan.sweep_dir
    print(f"[sweep] the race ended: {results.race.ended or 'not yet (rounds left to run)'}",
          flush=True)
    print(f"[sweep] tuned: {chosen['label']}. {why}. Recipe: {path}", flush=True)
    print(f"[sweep] run it: launch --config-dir {folder} +recipe=tuned", flush=True)


def log_table(results, master: DictConfig) -> Optional[str]:
    """The results as a wandb Table, in one more run of the sweep's group; returns the group's
    web page (None offline, or with wandb off)."""
    from launcher.config import WandbConfig, WandbMode
    from launcher.run.outputs import WandbLogger

    wandb_cfg: WandbConfig = OmegaConf.to_object(master.logging.wandb)
    if wandb_cfg.mode == WandbMode.disabled:
        return None
    wandb_cfg.group = results.plan.wandb_group
    columns = results.columns
    # its whereabouts are in the sweep's last lines (console.dashboard_lines), not a line of its own
    logger = WandbLogger(wandb_cfg, results.plan.sweep_dir, {"sweep": results.plan.name},
                         f"{results.plan.name}-results", job_type="sweep_results", announce=False)
    logger.log_table("sweep/results", columns,
                     [[row.get(c) for c in columns] for row in results.rows])
    page = logger.group_url
    logger.close()
    return page
