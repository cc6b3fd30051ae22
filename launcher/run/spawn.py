"""Starts a run's ranks, or runs this process's rank when another starter already started it.

`launch` on its own: every rank of this node in a fresh process, through torch's elastic launch
API (as torchrun does), the world the pre-flight resolved (launcher.config.world), after a
c10d rendezvous bounded by runtime.rdzv_timeout_s (`Rendezvous`); on more than one node each
node's `launch` joins it at runtime.rdzv_endpoint. Under torchrun or Slurm (submitit) this
process is one rank: it trains in place. Either way the global rank 0 alone writes summary.json.
"""

import dataclasses
import logging
import os
import socket
import sys
import threading
import time
import traceback
import uuid
from typing import Optional, Tuple

import torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous import RendezvousConnectionError, RendezvousError, \
    RendezvousParameters, RendezvousTimeoutError
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from launcher.preflight import ranks
from launcher.config import Config, ConfigError, Device, RuntimeConfig, World, as_dict, \
    check_world_size, resolve_world
from launcher.preflight.rendezvous import LOG, RendezvousFailed, accepts, detail, failed, log_lines, \
    native_stderr_to, not_joined, unanswered, unreached
from launcher.run.console import result_lines
from launcher.run.device import resolve_device
from launcher.run.crashes import crash_log_path, crash_report, remove_empty
from launcher.run.failures import classify_failure, excerpt
from launcher.preflight.support import check_device
from launcher.run.worker import run_rank
from launcher import summary as run_summary
from launcher.run.megatron_lm_args import check_megatron_lm_args
from launcher.summary import RunFailure, RunSummary

RDZV_ID = "mfsdp-launcher"  # the same on every node of a multi-node job, as torchrun's default


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cfg: Config, run_dir: str, world: World, resume_from: Optional[str] = None) -> int:
    """Runs the job's ranks (or this one) in `world`, the pre-flight's; returns the exit code.
    ConfigError: refused input."""
    check_megatron_lm_args(resume_from, cfg, world.size)
    starter = ranks.external_starter()
    if starter:
        return run_this_rank(cfg, run_dir, starter, resume_from)
    device_type = resolve_device(cfg.runtime.device)
    check_device(cfg, device_type)
    return launch_ranks(cfg, run_dir, device_type, resume_from, world)


def launch_ranks(cfg: Config, run_dir: str, device_type: str,
                 resume_from: Optional[str], world: World) -> int:
    nnodes = world.nodes
    meeting = Rendezvous(cfg.runtime, world, run_dir)
    # A failed rank is reported once, in one line, with its traceback's end in summary.json;
    # torch's agent would also log each failure's whole traceback.
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    try:
        launch_config = meeting.reach()  # holds the store until the ranks are done
        results = elastic_launch(launch_config, run_rank)(cfg, run_dir, device_type, resume_from)
    except ChildFailedError as err:
        return report_failure(failure_summary(err, run_dir), cfg, run_dir,
                              write=nnodes == 1 or 0 in err.failures)
    except (RendezvousFailed, RendezvousError) as err:
        return report_rendezvous(meeting.failed(err), cfg, run_dir, nnodes)
    finally:
        remove_empty(run_dir)
    if 0 not in results:  # another node holds global rank 0 and writes the summary
        print(f"[launch] ok: ranks {sorted(results)} of this node finished; the node of rank 0 "
              "writes the summary", flush=True)
        return 0
    return report_ok(results[0], run_dir)


def run_this_rank(cfg: Config, run_dir: str, starter: str,
                  resume_from: Optional[str]) -> int:
    """Under torchrun or submitit: this process is one rank. Checks the world it was given."""
    found = ranks.layout(starter)
    world = resolve_world(cfg.runtime, cfg.cluster, found.stated())
    check_world_size(cfg, world.size, world.source)
    device_type = resolve_device(cfg.runtime.device)
    check_device(cfg, device_type)
    try:
        summary = run_rank(cfg, run_dir, device_type, resume_from)
    except Exception as err:  # noqa: BLE001  (classified, summarised, one line; not a traceback)
        text = traceback.format_exc()
        failure = RunFailure(status=classify_failure(1, text), failed_rank=found.rank, exitcode=1,
                             message=f"{type(err).__name__}: {err}".splitlines()[0],
                             log_excerpt=excerpt(text))
        return report_failure(failure, cfg, run_dir, write=found.rank == 0)
    return report_ok(summary, run_dir) if found.rank == 0 else 0


TRY_S = 10
"""One store connection's own limit: torch's client backs off between its retries up to a minute,
so short tries, repeated, keep it from running past runtime.rdzv_timeout_s."""
GRACE_S = 10
"""How long a try still connecting at the limit may take to give up by itself (its back-off)."""


class Rendezvous:
    """This node's c10d rendezvous, bounded by runtime.rdzv_timeout_s as a whole: reaching its
    store, then every node joining (torch's join_timeout gets what is left)."""

    def __init__(self, runtime: RuntimeConfig, world: World, run_dir: str):
        self.world, self.seconds = world, runtime.rdzv_timeout_s
        self.stated = runtime.rdzv_endpoint is not None
        self.endpoint = runtime.rdzv_endpoint or f"127.0.0.1:{free_port()}"
        self.run_id = RDZV_ID if world.nodes > 1 else uuid.uuid4().hex
        self.log = os.path.join(run_dir, LOG)
        self.deadline = time.monotonic() + self.seconds
        self.store = None

    def left(self) -> int:
        return max(1, int(self.deadline - time.monotonic()))

    def reach(self) -> LaunchConfig:
        """The launch config, once the store answered. RendezvousFailed: it did not in time."""
        with native_stderr_to(self.log):  # torch's C++ log of each failed try, kept there
            self.store = self.reach_store()
        return LaunchConfig(
            min_nodes=self.world.nodes, max_nodes=self.world.nodes,
            nproc_per_node=self.world.per_node, run_id=self.run_id, rdzv_backend="c10d",
            rdzv_endpoint=self.endpoint, rdzv_configs={"join_timeout": self.left()},
            max_restarts=0, monitor_interval=0.5, start_method="spawn",
        )

    def reach_store(self):
        """torch's c10d backend and store for this endpoint (hosted here where the host is this
        machine), tried in a thread until the limit: torch 2.11's TCPStore client waits for a
        listener's first answer (TCPStore::ping) with no limit, so a port another program holds
        would hold `launch` for ever. Kept for the run: the store torch makes next for this port
        shares its server (multi_tenant) instead of binding it again."""
        while True:
            thread, outcome = start_try(self.params(min(TRY_S, self.left())))
            thread.join(self.left())
            if thread.is_alive() and accepts(self.endpoint):  # connected; no answer, ever
                raise unanswered(self.endpoint, self.stated, self.seconds)
            thread.join(GRACE_S)
            if "store" in outcome:
                return outcome["store"]
            err = outcome.get("error")
            if not isinstance(err, RendezvousConnectionError):
                raise failed(self.endpoint, self.stated, err, before_ranks=True) from err
            if time.monotonic() >= self.deadline:
                raise unreached(self.endpoint, self.stated, self.seconds, detail(err)) from err
            time.sleep(1)  # refused or unreachable: the host's node may not have started yet

    def params(self, seconds: int) -> RendezvousParameters:
        return RendezvousParameters(backend="c10d", endpoint=self.endpoint, run_id=self.run_id,
                                    min_nodes=self.world.nodes, max_nodes=self.world.nodes,
                                    read_timeout=seconds)  # the connect retries this long

    def failed(self, err: Exception) -> RendezvousFailed:
        """torch's errors said as what the rendezvous waited for (launcher.preflight.rendezvous)."""
        if isinstance(err, RendezvousTimeoutError):  # the join: before any rank starts
            return not_joined(self.endpoint, self.stated, self.seconds, self.world)
        if isinstance(err, RendezvousFailed):
            return err
        return failed(self.endpoint, self.stated, err)


def start_try(params: RendezvousParameters) -> Tuple[threading.Thread, dict]:
    """torch's create_backend in a daemon thread: its `store` or its `error` lands in the dict.
    A thread stuck in a recv that never returns is left behind; it holds nothing of the run."""
    outcome: dict = {}

    def create() -> None:
        try:
            outcome["store"] = create_backend(params)
        except Exception as err:  # noqa: BLE001  (read by the caller's thread)
            outcome["error"] = err

    thread = threading.Thread(target=create, name="rendezvous-store", daemon=True)
    thread.start()
    return thread, outcome


def report_rendezvous(err: RendezvousFailed, cfg: Config, run_dir: str, nodes: int) -> int:
    """One line, exit code 1, and a summary that says what failed. Before any rank every node
    writes it (no node holds rank 0 yet); later, as a rank's failure, only a one-node run."""
    log = os.path.join(run_dir, LOG)  # torch's own lines, where it wrote some
    text = log_lines(open(log).read()) if os.path.exists(log) else traceback.format_exc()
    failure = RunFailure(status="timeout" if err.timed_out else "error", message=str(err),
                         log_excerpt=excerpt(text), config=as_dict(cfg))
    where = "no rank started; " if err.before_ranks else ""
    if err.before_ranks or nodes == 1:
        where += f"the summary is {run_summary.write(run_dir, failure)}"
    else:
        where += "the node of rank 0 writes the summary"
    print(f"error: {err} ({where})", file=sys.stderr)
    return 1


def report_ok(summary: RunSummary, run_dir: str) -> int:
    run_summary.write(run_dir, summary)
    print("\n".join(result_lines(summary, run_dir)), flush=True)
    if summary.profile is not None:
        from launcher.run.profile import describe

        print(describe(summary.profile, run_dir), flush=True)
    return 0


def report_failure(failure: RunFailure, cfg: Config, run_dir: str, write: bool) -> int:
    where = "the node of rank 0 writes the summary"
    if write:
        path = run_summary.write(run_dir, dataclasses.replace(failure, config=as_dict(cfg)))
        where = f"the end of its traceback is in {path}"
    print(f"error: rank {failure.failed_rank} failed ({failure.status}): "
          f"{failure.message} ({where})", file=sys.stderr)
    return 1


def failure_summary(err: ChildFailedError, run_dir: str) -> RunFailure:
    """The first failing rank, its status (launcher.run.failures) and the end of its traceback;
    for a rank killed by a signal, where it died (its crash log, launcher.run.crashes)."""
    rank, failure = err.get_first_failure()
    message, callstack = failure.message, ""
    if isinstance(message, dict):  # the error file of a Python entry point
        callstack = message.get("extraInfo", {}).get("py_callstack", "")
        message = message.get("message", str(message))
    text = f"{callstack}\n{message}"
    summary = RunFailure(status=classify_failure(failure.exitcode, text), failed_rank=rank,
                         exitcode=failure.exitcode,
                         message=str(message).strip().splitlines()[-1],
                         log_excerpt=excerpt(callstack or str(message)))
    crashed = crash_report(run_dir, rank) if failure.exitcode < 0 else None
    if crashed:
        top, stack = crashed
        summary = dataclasses.replace(summary, message=f"{summary.message} at {top}",
                                      log_excerpt=stack, crash_log=crash_log_path(run_dir, rank))
    return summary
