"""Starts a run's ranks in fresh processes with torch's elastic launch API (as torchrun does)."""

import os
import sys
import socket
import uuid

import torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from launcher.config import Config, ConfigError, Device
from launcher.failures import classify_failure, excerpt
from launcher.outputs import write_json_atomic
from launcher.worker import run_rank


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


def run(cfg: Config, resolved: dict, run_dir: str) -> int:
    """Runs every rank; writes summary.json (rank 0's, or the failure). Returns the exit code."""
    if cfg.runtime.nnodes != 1:
        print("error: runtime.nnodes>1 is not supported yet; set runtime.nnodes=1", file=sys.stderr)
        return 2
    device_type = resolve_device(cfg.runtime.device)
    port = cfg.runtime.master_port or free_port()
    launch_config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=cfg.runtime.nproc_per_node,
        run_id=uuid.uuid4().hex, rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{port}",
        max_restarts=0, monitor_interval=0.5, start_method="spawn",
    )
    summary_path = os.path.join(run_dir, "summary.json")
    try:
        results = elastic_launch(launch_config, run_rank)(cfg, resolved, run_dir, device_type)
    except ChildFailedError as err:
        failure = failure_summary(err)
        write_json_atomic(summary_path, {**failure, "config": resolved})
        print(f"error: rank {failure['failed_rank']} failed ({failure['status']}): "
              f"{failure['message']} (full log above; summary in {summary_path})", file=sys.stderr)
        return 1
    write_json_atomic(summary_path, results[0])
    m = results[0]["metrics"]
    print(f"[launch] ok: {m['tokens_per_s_per_gpu']:.0f} tokens/s/GPU, "
          f"first_group_prefetches={m['first_group_prefetches']}, outputs in {run_dir}")
    return 0


def failure_summary(err: ChildFailedError) -> dict:
    """The first failing rank, its status (launcher.failures) and the end of its traceback."""
    rank, failure = err.get_first_failure()
    message, callstack = failure.message, ""
    if isinstance(message, dict):  # the error file of a Python entry point
        callstack = message.get("extraInfo", {}).get("py_callstack", "")
        message = message.get("message", str(message))
    text = f"{callstack}\n{message}"
    return {"status": classify_failure(failure.exitcode, text), "failed_rank": rank,
            "exitcode": failure.exitcode, "message": str(message).strip().splitlines()[-1],
            "log_excerpt": excerpt(callstack or str(message))}
