"""The c10d rendezvous as a user meets it when it cannot complete: a port another program holds,
a node that never comes. The real `launch` each time, a real socket holding the port: one line
naming the endpoint and what it waited for, well within the bound, and no summary claiming
success."""

import json
import socket
import time
from contextlib import contextmanager

import pytest

from conftest import run_launch

pytestmark = pytest.mark.integration

COMMON = ["+recipe=tiny_cpu", "train.steps=2", "logging.wandb.mode=disabled"]
TWO_NODES = ["runtime.nnodes=2", "runtime.nproc_per_node=1", "runtime.rdzv_timeout_s=5"]
BOUND_S = 120  # a rendezvous that waited for ever (torch's TCPStore does) fails the run here


@contextmanager
def held_port():
    """A port of this machine that a program other than torch listens on and never answers."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed_launch(tmp_path, *overrides):
    """(the process, its run folder, its seconds)."""
    start = time.monotonic()
    proc, run_dir = run_launch(tmp_path, *COMMON, *overrides, timeout=BOUND_S)
    return proc, run_dir, time.monotonic() - start


def one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stdout[-1000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    return lines[0]


def test_a_held_port_of_a_one_node_run_is_refused_before_any_rank(tmp_path):
    with held_port() as port:
        proc, run_dir, _ = timed_launch(tmp_path, f"runtime.rdzv_endpoint=127.0.0.1:{port}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert one_line(proc) == (
        f"error: runtime.rdzv_endpoint=127.0.0.1:{port}: port {port} on this machine is already "
        "in use by another process, and a one-node run hosts its rendezvous there; set "
        "runtime.rdzv_endpoint to a free port, or drop it (launch then picks a free one)")
    assert not (run_dir / "summary.json").exists() and not (run_dir / "metrics.jsonl").exists()


def test_a_dry_run_does_not_refuse_a_held_port(tmp_path):
    """Nothing starts in a dry run: the port is not its to take."""
    with held_port() as port:
        proc, _, _ = timed_launch(tmp_path, f"runtime.rdzv_endpoint=127.0.0.1:{port}",
                                  "runtime.dry_run=true")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[dry run] nothing started" in proc.stdout


def test_a_held_port_of_several_nodes_ends_at_the_limit_in_one_line(tmp_path):
    """On several nodes the port may be another node's store, so only the limit applies; torch's
    store client alone would wait for the holder's answer for ever."""
    with held_port() as port:
        proc, run_dir, seconds = timed_launch(tmp_path, *TWO_NODES,
                                              f"runtime.rdzv_endpoint=127.0.0.1:{port}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert one_line(proc) == (
        f"error: the rendezvous at runtime.rdzv_endpoint=127.0.0.1:{port} timed out after "
        "runtime.rdzv_timeout_s=5: it waited for its store there to answer, and what listens on "
        "that port never did (another program holds it); set runtime.rdzv_endpoint to a port "
        f"only the rendezvous uses (no rank started; the summary is {run_dir}/summary.json)")
    assert seconds < BOUND_S
    assert_failed_as_timeout(run_dir)


def test_a_node_that_never_joins_ends_the_rendezvous_at_its_limit(tmp_path):
    """Two nodes asked for, one comes: the store answers, the other node never joins."""
    endpoint = f"127.0.0.1:{free_port()}"
    proc, run_dir, seconds = timed_launch(tmp_path, *TWO_NODES, f"runtime.rdzv_endpoint={endpoint}")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert one_line(proc) == (
        f"error: the rendezvous at runtime.rdzv_endpoint={endpoint} timed out after "
        "runtime.rdzv_timeout_s=5: it waited for 2 nodes (runtime.nnodes=2) to join, and not all "
        "did; start launch on every node with the same runtime.rdzv_endpoint, or raise "
        f"runtime.rdzv_timeout_s (no rank started; the summary is {run_dir}/summary.json)")
    assert seconds < BOUND_S
    assert_failed_as_timeout(run_dir)


def assert_failed_as_timeout(run_dir):
    """The summary says what failed, and nothing of a run that trained."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "timeout" and summary["failed_rank"] is None
    assert summary["message"].startswith("the rendezvous at runtime.rdzv_endpoint=")
    assert "metrics" not in summary and not (run_dir / "metrics.jsonl").exists()
