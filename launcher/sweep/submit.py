"""A round's jobs through a submitit launcher (hydra/launcher=slurm, submitit_slurm,
submitit_local): one job per run, each named after the sweep and its cell, waited for with a
limit, and each ended job classified by what Slurm says of it.

hydra-submitit-launcher's own `launch` submits a round as one job array under one name and
returns the first failure's exception for the whole round; here every job is submitted on its
own, so that a cancelled or timed-out job is that job's result only. Each task runs the
launcher's own callable (Hydra composes the job there, as with the plugin), with the per-rank
log overrides of launcher.preflight.ranks.
"""

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from launcher.preflight.ranks import rank_overrides
from launcher.sweep.console import print_pending, print_slurm_line, print_submitted
from launcher.sweep.slurm import executor_for

POLL_S = 10  # one sacct call for all of a round's jobs
PENDING_PRINT_S = 60
UNKNOWN_LIMIT_S = 180  # a job neither squeue nor sacct knows: Slurm without accounting
FINAL_STATE_S = 60  # how long sacct may lag the end of a job whose tasks have returned
UNFINISHED = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "UNKNOWN")
# Slurm's end states that say why a job did not finish (sacct's State), and their failure class.
ENDED = (("CANCELLED", "cancelled"), ("PREEMPTED", "cancelled"), ("TIMEOUT", "timeout"),
         ("DEADLINE", "timeout"), ("OUT_OF_MEMORY", "oom"), ("NODE_FAIL", "rank_died"))


class JobEnded(Exception):
    """A job Slurm ended before it finished: its failure class and Slurm's words."""

    def __init__(self, status: str, message: str, job_id: str):
        super().__init__(message)
        self.status, self.job_id = status, job_id


@dataclass
class Submitted:
    job: Optional[object]  # a submitit Job; None where it was not submitted
    name: str
    since: float
    gave_up: Optional[str] = None
    printed: float = 0.0


class RankTask:
    """What each task of a job runs: the Hydra launcher's callable, with this rank's overrides."""

    def __init__(self, launcher):
        self.launcher = launcher

    def __call__(self, overrides: List[str], *rest):
        import submitit

        rank = submitit.JobEnvironment().global_rank
        return self.launcher([*overrides, *rank_overrides(rank)], *rest)


def launch(launcher, batch: Sequence[List[str]], first_index: int, names: Sequence[str],
           pending_limit_min: float) -> list:
    """Submits each run of the round as its own job, waits for all, and returns per job its
    JobReturn or the exception that ended it (JobEnded for what Slurm ended), with the path of
    its rank 0's output (submitit's log; None where it was not submitted)."""
    from hydra.core.singleton import Singleton

    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    executor = executor_for(launcher.params, launcher._EXECUTOR)
    task = RankTask(launcher)
    submitted = []
    for index, (overrides, name) in enumerate(zip(batch, names), start=first_index):
        executor.update_parameters(name=name)
        try:
            job = executor.submit(task, list(overrides), "hydra.sweep.dir", index,
                                  f"job_id_for_{index}", Singleton.get_state())
        except (RuntimeError, OSError) as err:  # sbatch's refusal: submitit's FailedJobError
            submitted.append(refused(name, err))
            continue
        print_submitted(job.job_id, name)
        submitted.append(Submitted(job, name, time.monotonic()))
    wait([s for s in submitted if s.job], launcher._EXECUTOR == "slurm", 60 * pending_limit_min)
    return [(outcome(s, launcher.params.get("timeout_min"), launcher._EXECUTOR == "slurm"),
             str(s.job.paths.stdout) if s.job else None) for s in submitted]


def refused(name: str, err: Exception) -> Submitted:
    """A run whose job the scheduler would not take (sbatch's own words): an error of that run;
    the round's other jobs still go."""
    words = " ".join(str(err).split()) or type(err).__name__
    why = f"the job {name} was not submitted: {words}"
    print_slurm_line(why)
    return Submitted(None, name, time.monotonic(), gave_up=why)


def wait(submitted: List[Submitted], slurm: bool, pending_limit_s: float) -> None:
    """Until every job is done: a pending job prints its Slurm reason every minute and is
    cancelled after pending_limit_s; a job Slurm has forgotten is given up after a while."""
    left = list(submitted)
    while left:
        if slurm:
            left[0].job.watcher.update()  # one sacct call for every job of the round
        left = [s for s in left if s.gave_up is None and not s.job.done()]
        now = time.monotonic()
        for s in left:
            state = s.job.state if slurm else "RUNNING"
            if state == "PENDING":
                watch_pending(s, now, pending_limit_s)
            elif state == "UNKNOWN" and now - s.since > UNKNOWN_LIMIT_S and not queued(s):
                s.gave_up = (f"job {s.job.job_id} ({s.name}) is in neither squeue nor sacct "
                             f"after {UNKNOWN_LIMIT_S} s: is Slurm's job accounting (slurmdbd) "
                             "set up? the sweep cannot learn how it ended")
        if left:
            time.sleep(POLL_S if slurm else 1)


def watch_pending(s: Submitted, now: float, pending_limit_s: float) -> None:
    reason = squeue_reason(s.job.job_id)
    waited = now - s.since
    if waited > pending_limit_s:
        s.job.cancel(check=False)
        s.gave_up = (f"job {s.job.job_id} ({s.name}) pended {waited / 60:.1f} min (Slurm's "
                     f"reason: {reason}), past sweep.pending_limit_min={pending_limit_s / 60:g}; "
                     "the sweep cancelled it: ask for what the partition has, or raise the limit")
        print_slurm_line(s.gave_up)
    elif now - s.printed >= PENDING_PRINT_S:
        s.printed = now
        print_pending(s.job.job_id, s.name, waited, reason, pending_limit_s)


def squeue(job_id: str, field: str) -> str:
    try:
        return subprocess.run(["squeue", "-h", "-j", job_id, "-o", field], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return ""


def squeue_reason(job_id: str) -> str:
    return squeue(job_id, "%r") or "unknown"


def queued(s: Submitted) -> bool:
    return bool(squeue(s.job.job_id, "%T"))


def outcome(s: Submitted, timeout_min, slurm: bool) -> object:
    """Rank 0's JobReturn, or the exception that ended the job: what Slurm ended (its time limit,
    scancel) is named so, also where a rank failed first of the signal Slurm sent (its wandb
    service killed by the SIGTERM, say) and returned: its run ends failed, not with an exception,
    so Slurm's final state is read for every job (a summary that says ok stays ok)."""
    if s.job is None:
        return JobEnded("error", s.gave_up, None)
    if s.gave_up:
        return JobEnded("cancelled", s.gave_up, s.job.job_id)
    try:
        result = s.job.results()[0]
    except Exception as err:  # noqa: BLE001  submitit raises what ended the job
        # submitit's own words for a time limit: "timed-out", raised at the signal before it
        state = "TIMEOUT" if "timed-out" in str(err) else s.job.state
        return slurm_ended(s, state, timeout_min) or err
    return (slurm and slurm_ended(s, final_state(s), timeout_min)) or result


def final_state(s: Submitted) -> str:
    """Slurm's end state of a job whose tasks have returned; sacct has it a few seconds after
    the job's end ("" where it has not within FINAL_STATE_S, or sacct does not know the job:
    Slurm without accounting)."""
    deadline = time.monotonic() + FINAL_STATE_S
    while True:
        state = s.job.get_info(mode="force").get("State", "")
        if not state:
            return ""
        if state.split()[0].upper() not in UNFINISHED:
            return state
        if time.monotonic() > deadline:
            return ""
        time.sleep(2)


def slurm_ended(s: Submitted, state: str, timeout_min) -> Optional[JobEnded]:
    """The failure class of a Slurm end state that says why a job did not finish, else None."""
    for prefix, status in ENDED:
        if state.upper().startswith(prefix):
            why = (f": its time limit, hydra.launcher.timeout_min={timeout_min}; raise it"
                   if status == "timeout" else "")
            return JobEnded(status, f"Slurm job {s.job.job_id} ({s.name}) ended {state}{why}",
                            s.job.job_id)
    return None
