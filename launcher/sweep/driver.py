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
import time
from typing import List, Optional

from omegaconf import DictConfig, OmegaConf

from launcher.config import ConfigError, ProfileConfig
from launcher.summary import read as read_summary
from launcher.sweep import folders, submit
from launcher.sweep.console import (
    CONSOLE_LOG, Progress, output_to, print_closing_line, print_commands, print_dashboards,
    print_dry_run_end, print_job_end, print_job_start, print_line_end, print_no_valid_cell,
    print_plan, print_refusal, print_results, print_tuned,
)
from launcher.sweep.error import SweepError
from launcher.sweep.grid import bare_key, canonical
from launcher.sweep.plan import Plan, build_plan
from launcher.sweep.race import replay
from launcher.sweep.schedule import schedule
from launcher.sweep.settings import check_sweep
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
            f"hydra.sweep.subdir={folders.subdir(cell.id, repeat, attempt)}",
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


def run_round(launcher, plan: Plan, master: DictConfig, round_, progress: Progress) -> None:
    """Runs a round's jobs; each leaves a summary (record_crash's where it wrote none) and one
    console line (launcher.sweep.console), which counts it in `progress`."""
    first = progress.done
    batch = [job_overrides(plan, master, cell, r, n) for cell, r, n in round_]
    run_dirs = [folders.run_dir(plan.sweep_dir, cell.id, r, n) for cell, r, n in round_]
    titles = [progress.title(i, cell.label, r, n) for i, (cell, r, n) in enumerate(round_)]
    if is_submitit(master.hydra.launcher):
        names = [folders.job_name(plan.name, cell.id, r, n) for cell, r, n in round_]
        try:
            ended = submit.launch(launcher, batch, first, names,
                                  master.sweep.pending_limit_min)
        except Exception as err:  # noqa: BLE001  a launcher that raises fails its round only
            ended = [(err, None)] * len(batch)
        for title, folder, (job_return, log) in zip(titles, run_dirs, ended):
            record_crash(folder, job_return)
            print_job_end(title, read_summary(folder), None, log, progress)
        return
    for index, (title, folder, overrides) in enumerate(zip(titles, run_dirs, batch), start=first):
        run_here(launcher, overrides, index, title, folder,
                 captured=master.logging.print_steps is not True, progress=progress)


def run_here(launcher, overrides: List[str], index: int, title: str, folder: str,
             captured: bool, progress: Progress) -> None:
    """One job through a launcher that runs it in this process (Hydra's basic), its output into
    its folder's console.log unless not `captured` (logging.print_steps=true asked for the runs'
    own consoles); its line's start is shown while it runs, its result when it ends."""
    log = os.path.join(folder, CONSOLE_LOG) if captured else None
    if captured:
        print_job_start(title)
    start = time.monotonic()
    try:
        with output_to(log) if captured else contextlib.nullcontext():
            job_return = launch_one(launcher, overrides, index)
    except BaseException:  # an interrupt: what follows starts on a line of its own
        print_line_end()
        raise
    record_crash(folder, job_return)
    print_job_end("" if captured else title, read_summary(folder), time.monotonic() - start, log,
                  progress)


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
        check_sweep(master, fixed + list(arguments))
        plan = build_plan(master, load, fixed + list(arguments), config_loader)
    except (ConfigError, SweepError) as err:
        print_refusal(str(err))
        return 2
    if master.runtime.print_megatron_lm and plan.baseline is not None:
        print_commands(plan)
        return 0
    rounds = schedule(plan)
    print_plan(plan, rounds, replay(plan) if plan.tune else None)
    if plan.baseline is None:
        print_no_valid_cell(plan)
        return 2
    if master.runtime.dry_run:
        print_dry_run_end()
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
        print_closing_line(progress)
    # A rerun that ran nothing logs no second wandb table.
    return finish(plan, master, log=progress.done > 0 or not reported)


def finish(plan: Plan, master: DictConfig, log: bool) -> int:
    from launcher.sweep.report import write_all
    from launcher.sweep.results import collect

    results = collect(plan)
    paths = write_all(results)
    wandb_page = log_table(results, master) if log else None
    print_results(results, paths)
    tensorboard = master.logging.tensorboard
    print_dashboards(plan.sweep_dir, tensorboard.dir if tensorboard.enabled else None,
                     plan.wandb_group, wandb_page, any(r.get("profile_trace") for r in results.rows))
    if plan.tune:
        print_tuned(results, write_tuned(results, master))
    failed = [r for r in results.rows if r["status"] not in ("ok", "invalid")]
    return 1 if failed else 0


def write_tuned(results, master: DictConfig) -> Optional[str]:
    """Writes the tuned recipe (launcher.sweep.tuned); its path, or None where none was chosen."""
    from launcher.sweep import tuned

    choices = dict(master.hydra.runtime.choices)
    return tuned.write(results, choices.get("recipe"), [k for k in choices if "/" not in k])


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
