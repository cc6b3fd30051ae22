"""Starts a run's ranks, or runs this process's rank when another starter already started it.

`launch` on its own: every rank of this node in a fresh process, through torch's elastic launch
API (as torchrun does), the world the pre-flight resolved (launcher.config.world); on more
than one node each node's `launch` joins the c10d rendezvous at
runtime.rdzv_endpoint. Under torchrun or Slurm (submitit) this process is one rank: it trains in
place. Either way the global rank 0 alone writes summary.json.
"""

import dataclasses
import logging
import socket
import sys
import traceback
import uuid
from typing import Optional

import torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from launcher.run import ranks
from launcher.config import Config, ConfigError, Device, World, as_dict, check_world_size, \
    resolve_world
from launcher.run.crashes import crash_log_path, crash_report, remove_empty
from launcher.run.failures import classify_failure, excerpt
from launcher.run.support import check_device
from launcher.run.worker import run_rank
from launcher import summary as run_summary
from launcher.summary import RunFailure, RunSummary

RDZV_ID = "mfsdp-launcher"  # the same on every node of a multi-node job, as torchrun's default


def resolve_device(device: Device) -> str:
    if device == Device.auto:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == Device.cuda and not torch.cuda.is_available():
        raise ConfigError("runtime.device=cuda but no CUDA device is visible; "
                          "set runtime.device=cpu or auto")
    return device.value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cfg: Config, run_dir: str, world: World, resume_from: Optional[str] = None) -> int:
    """Runs the job's ranks (or this one) in `world`, the pre-flight's; returns the exit code.
    ConfigError: refused input."""
    starter = ranks.external_starter()
    if starter:
        return run_this_rank(cfg, run_dir, starter, resume_from)
    device_type = resolve_device(cfg.runtime.device)
    check_device(cfg, device_type)
    return launch_ranks(cfg, run_dir, device_type, resume_from, world)


def launch_ranks(cfg: Config, run_dir: str, device_type: str,
                 resume_from: Optional[str], world: World) -> int:
    runtime, nnodes = cfg.runtime, world.nodes
    launch_config = LaunchConfig(
        min_nodes=nnodes, max_nodes=nnodes, nproc_per_node=world.per_node,
        run_id=RDZV_ID if nnodes > 1 else uuid.uuid4().hex, rdzv_backend="c10d",
        rdzv_endpoint=runtime.rdzv_endpoint or f"127.0.0.1:{free_port()}",
        max_restarts=0, monitor_interval=0.5, start_method="spawn",
    )
    # A failed rank is reported once, in one line, with its traceback's end in summary.json;
    # torch's agent would also log each failure's whole traceback.
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").setLevel(logging.CRITICAL)
    try:
        results = elastic_launch(launch_config, run_rank)(cfg, run_dir, device_type, resume_from)
    except ChildFailedError as err:
        return report_failure(failure_summary(err, run_dir), cfg, run_dir,
                              write=nnodes == 1 or 0 in err.failures)
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


def report_ok(summary: RunSummary, run_dir: str) -> int:
    run_summary.write(run_dir, summary)
    m = summary.metrics
    measured = (f"{m.tokens_per_s_per_gpu:.0f} tokens/s/GPU" if m.tokens_per_s_per_gpu
                is not None else f"throughput null ({m.throughput_null_reason})")
    print(f"[launch] ok: {measured}, first_group_prefetches={m.first_group_prefetches}, "
          f"outputs in {run_dir}", flush=True)
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
