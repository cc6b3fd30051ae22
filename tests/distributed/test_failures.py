"""A 2-rank run whose rank dies or stalls ends promptly, classified, with the rank named; a NaN
loss stops the run before the optimizer step."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

LAUNCH = str(Path(sys.executable).parent / "launch")
LONG_RUN = ["+recipe=tiny_cpu", "train.steps=500", "logging.wandb.mode=disabled",
            "runtime.nproc_per_node=2"]


def rank_pid(parent: int, rank: int) -> int:
    """The pid of the process running `rank`: torch's elastic launch spawns the ranks of a node
    in order, beside multiprocessing's resource tracker (RANK is set after the spawn, so it is
    not in /proc/PID/environ)."""
    children = sorted(int(c) for c in
                      Path(f"/proc/{parent}/task/{parent}/children").read_text().split())
    ranks = [c for c in children
             if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()]
    assert len(ranks) == 2, ranks
    return ranks[rank]


def start_and_wait_for_steps(tmp_path, *extra, steps=2):
    run_dir = tmp_path / "run"
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    proc = subprocess.Popen([LAUNCH, *LONG_RUN, *extra, f"hydra.run.dir={run_dir}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= steps):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run never reached its first steps"
        time.sleep(0.2)
    return proc, run_dir


def finish(proc, limit_s):
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=limit_s)
    finally:
        proc.kill()
    return out, err, time.monotonic() - start


def test_a_killed_rank_fails_the_job_within_60_s_and_is_named(tmp_path):
    proc, run_dir = start_and_wait_for_steps(tmp_path)
    os.kill(rank_pid(proc.pid, 1), signal.SIGKILL)
    _, err, seconds = finish(proc, 90)
    assert seconds < 60 and proc.returncode == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "rank_died" and summary["failed_rank"] == 1
    assert "error: rank 1 failed (rank_died)" in err


def test_a_rank_killed_by_a_signal_leaves_its_stack_and_the_summary_says_where(tmp_path):
    proc, run_dir = start_and_wait_for_steps(tmp_path)
    os.kill(rank_pid(proc.pid, 1), signal.SIGSEGV)
    _, err, _ = finish(proc, 90)
    assert proc.returncode == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "rank_died" and summary["failed_rank"] == 1
    # the crashing thread's newest frames, e.g. "... (SIGSEGV) ... at wait (... .py:123) <- ..."
    assert re.search(r"SIGSEGV.* at .*\(\w+\.py:\d+\)", summary["message"]), summary["message"]
    stack = (run_dir / "crash.rank1.log").read_text()
    assert "Fatal Python error: Segmentation fault" in stack and "Current thread" in stack
    assert "Fatal Python error: Segmentation fault" in summary["log_excerpt"]
    assert summary["crash_log"] == str(run_dir / "crash.rank1.log")
    assert not (run_dir / "crash.rank0.log").exists()  # stopped by the launcher: no stack
    assert summary["message"] in err


def test_a_stalled_rank_times_out_as_configured(tmp_path):
    proc, run_dir = start_and_wait_for_steps(tmp_path, "runtime.timeout_s=5")
    stalled = rank_pid(proc.pid, 1)
    os.kill(stalled, signal.SIGSTOP)
    try:
        _, err, seconds = finish(proc, 120)
    finally:
        try:
            os.kill(stalled, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 1 and seconds < 60
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "timeout" and summary["failed_rank"] == 0
    assert "error: rank 0 failed (timeout)" in err


def test_a_nan_loss_stops_before_the_optimizer_step(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([LAUNCH, *LONG_RUN[:3], "runtime.nproc_per_node=2", "train.steps=6",
                           "train.inject_nan_at_step=4", f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HOME=str(tmp_path / "home")))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "(nan): NonFiniteError: step 4: the loss is non-finite (nan); stopped before the " \
           "optimizer step applied it" in last
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "nan"
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
