"""The Slurm path on a real one-node Slurm (tests/slurm/cluster.sh: slurmctld, slurmd, slurmdbd
with MariaDB, munge), as a user runs it: `launch -m ... hydra/launcher=slurm` on CPU nodes.

Skipped, with the reason, where the cluster cannot be installed (no root, no package mirror)."""

import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import doc_commands

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "tests" / "slurm" / "cluster.sh"
LAUNCH = str(Path(sys.executable).parent / "launch")
# The preset on CPU nodes: 2 tasks (ranks) of 1 CPU each, the node's 2 CPUs.
PRESET = ["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0",
          "hydra.launcher.tasks_per_node=2", "hydra.launcher.cpus_per_task=1"]
TINY = ["+recipe=sweep_tiny_cpu", "sweep.repeats=1", "train.steps=8", "cuda_graph.warmup_steps=1"]


@pytest.fixture(scope="module")
def cluster():
    """The environment of a shell on the cluster's login node: SLURM_CONF set."""
    # munged wants every folder above its socket open to all: not pytest's 0700 tmp_path
    state = tempfile.mkdtemp(prefix="launcher-slurm-")
    os.chmod(state, 0o755)
    env = dict(os.environ, LAUNCHER_SLURM_DIR=state, WANDB_SILENT="true")
    up = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, env=env,
                        timeout=900)
    if up.returncode == 3:
        pytest.skip((up.stdout + up.stderr).strip().splitlines()[-1])
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    line = subprocess.run([str(CLUSTER), "env"], capture_output=True, text=True, env=env,
                          check=True).stdout.strip()
    env["SLURM_CONF"] = re.fullmatch(r"export SLURM_CONF=(\S+)", line).group(1)
    yield env
    down = subprocess.run([str(CLUSTER), "down"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert down.returncode == 0, down.stdout[-2000:] + down.stderr[-2000:]


def sweep(env, sweep_dir, *overrides, timeout=900, background=False):
    # the graph warmup acts in graph cells only: a sweep that fixes cuda_graph.impl=none would
    # be refused for it (launcher/config/effect.py)
    tiny = [o for o in TINY if "cuda_graph.impl=none" not in overrides
            or not o.startswith("cuda_graph.warmup_steps=")]
    command = [LAUNCH, "-m", *tiny, *PRESET, *overrides, f"hydra.sweep.dir={sweep_dir}"]
    env = dict(env, HOME=str(sweep_dir.parent / "home"))
    if background:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, cwd=sweep_dir.parent)
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=sweep_dir.parent)


def slurm(env, *command) -> str:
    return subprocess.run(list(command), capture_output=True, text=True, env=env, check=True,
                          timeout=60).stdout


def run_summaries(sweep_dir):
    """cell id -> its run's summary."""
    return {p.parents[2].name: json.loads(p.read_text())
            for p in sweep_dir.glob("*/repeat0/attempt0/summary.json")}


def cell_ids(sweep_dir, key):
    """The value of `key` -> cell id, from the plan the sweep saved before submitting."""
    plan = json.loads((sweep_dir / "plan.json").read_text())
    return {c["values"][key]: c["id"] for c in plan["cells"]}


def docs_slurm_sweep() -> list:
    """docs/clusters.md's Slurm sweep on CPU nodes, as a user copies it."""
    (command,) = [c for c in doc_commands()
                  if c.startswith(".venv/bin/launch -m ") and "gpus_per_node=0" in c]
    return command.split()[1:]


def test_the_readme_prefetch_by_graph_sweep_runs_on_two_cpu_tasks_per_job(cluster, tmp_path):
    sweep_dir = tmp_path / "sweep"
    command = [LAUNCH, *docs_slurm_sweep(), "sweep.name=pxg", f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path,
                          env=dict(cluster, HOME=str(tmp_path / "home")))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summaries = run_summaries(sweep_dir)
    assert len(summaries) == 3  # the fourth cell (prefetch with a graph) is refused up front
    for cell, summary in summaries.items():
        assert summary["status"] == "ok" and summary["world_size"] == 2
        job_id = summary["slurm_job_id"]
        assert job_id.isdigit()
        # Slurm's own record of the job: its name is the sweep, the cell and the run
        name, state = slurm(cluster, "sacct", "-n", "-X", "-P", "-o", "JobName,State",
                            "-j", job_id).strip().split("|")
        assert (name, state) == (f"pxg/{cell}/repeat0", "COMPLETED")
        run_dir = sweep_dir / cell / "repeat0" / "attempt0"
        # each rank's log is its own
        assert (run_dir / "cli.log").exists() and (run_dir / "cli.rank1.log").exists()
    # one throughput: the run's summary says what the table says
    with open(sweep_dir / "results.csv") as f:
        rows = {r["cell"]: r for r in csv.DictReader(f)}
    for cell, summary in summaries.items():
        assert float(rows[cell]["tokens_per_s_per_gpu"]) == pytest.approx(
            summary["metrics"]["tokens_per_s_per_gpu"], rel=1e-9)
        assert float(rows[cell]["tflops_per_gpu"]) == pytest.approx(
            summary["metrics"]["tflops_per_gpu"], rel=1e-9)


def wait_until_running(env, name, proc, limit_s=300) -> str:
    """The id of the job called `name` once it has run a few seconds."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        for line in slurm(env, "squeue", "-h", "-o", "%i|%j|%T|%M").splitlines():
            job_id, job_name, state, elapsed = line.split("|")
            if job_name == name and state == "RUNNING" and elapsed not in ("0:00", "0:01"):
                return job_id
        time.sleep(1)
    raise AssertionError(f"job {name} was not running after {limit_s} s")


def test_cancelled_and_timed_out_jobs_are_named_and_the_sweep_goes_on(cluster, tmp_path):
    sweep_dir = tmp_path / "sweep"
    # one cell ends, one runs into its 1-minute limit, one is cancelled while it runs
    proc = sweep(cluster, sweep_dir, "sweep.name=ends", "train.steps=8,100000,100001",
                 "cuda_graph.impl=none", "fsdp.prefetch_first_param_group=true",
                 "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=15",
                 background=True)
    try:
        deadline = time.monotonic() + 120
        while not (sweep_dir / "plan.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read()
            time.sleep(0.5)
        cells = cell_ids(sweep_dir, "train.steps")
        cancelled = wait_until_running(cluster, f"ends/{cells['100001']}/repeat0", proc)
        slurm(cluster, "scancel", cancelled)
        out, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 1, out[-3000:]  # a run failed; the sweep still ended and reported
    summaries = run_summaries(sweep_dir)
    assert summaries[cells["8"]]["status"] == "ok", out[-3000:]
    killed = summaries[cells["100001"]]
    assert killed["status"] == "cancelled", killed
    assert f"Slurm job {cancelled}" in killed["message"] and "CANCELLED" in killed["message"]
    late = summaries[cells["100000"]]
    assert late["status"] == "timeout", late
    assert "hydra.launcher.timeout_min=1" in late["message"] or "timed-out" in late["message"]
    with open(sweep_dir / "results.csv") as f:
        statuses = {r["cell"]: r["status"] for r in csv.DictReader(f)}
    assert statuses == {cells["8"]: "ok", cells["100000"]: "timeout",
                        cells["100001"]: "cancelled"}


def test_a_run_that_returns_after_slurms_time_limit_signal_is_a_timeout(cluster, tmp_path,
                                                                      monkeypatch):
    """What a rank does when Slurm's SIGTERM at the time limit kills its wandb service first: it
    fails of that and returns before the SIGKILL. The job left a result, yet Slurm ended it.
    The job waits for the SIGTERM itself, whenever submitit's handler of the earlier warning
    signal runs and whatever it raises (once it came 60 s early and failed in its own logging,
    and a job that waited for it first never saw the SIGTERM)."""
    import submitit

    from launcher.sweep import submit

    def outlives_its_limit():
        import signal
        import time as clock

        term = []
        signal.signal(signal.SIGTERM, lambda *_: term.append(1))  # the time limit's signal
        deadline = clock.monotonic() + 280
        while not term and clock.monotonic() < deadline:
            try:
                clock.sleep(0.2)
            except Exception:  # noqa: BLE001  submitit's handler of the warning signal raises
                pass
        return "returned"

    monkeypatch.setenv("SLURM_CONF", cluster["SLURM_CONF"])
    executor = submitit.AutoExecutor(folder=tmp_path / "jobs", cluster="slurm",
                                     slurm_max_num_timeout=0)
    executor.update_parameters(name="outlives", timeout_min=1, slurm_signal_delay_s=15,
                               nodes=1, tasks_per_node=1, cpus_per_task=1)
    job = executor.submit(outlives_its_limit)
    submitted = submit.Submitted(job, "outlives", time.monotonic())
    submit.wait([submitted], True, 300)
    assert job.result() == "returned"
    ended = submit.outcome(submitted, 1, True)
    assert isinstance(ended, submit.JobEnded) and ended.status == "timeout", ended
    assert str(ended).startswith(f"Slurm job {job.job_id} (outlives) ended TIMEOUT")


def test_a_request_no_node_can_take_is_refused_before_submitting(cluster, tmp_path):
    proc = sweep(cluster, tmp_path / "sweep", "hydra.launcher.cpus_per_task=8")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    cpus = os.cpu_count()
    assert proc.stderr.strip().splitlines() == [
        f"error: hydra.launcher.cpus_per_task=8 x hydra.launcher.tasks_per_node=2 needs 16 CPUs "
        f"on a node, but the nodes of Slurm partition debug have at most {cpus} (sinfo); lower "
        "hydra.launcher.cpus_per_task"]
    assert "Traceback" not in proc.stdout
    assert slurm(cluster, "squeue", "-h") == ""


def test_a_job_slurm_would_refuse_is_refused_before_submitting(cluster, tmp_path):
    # a feature no node has: sinfo cannot tell, Slurm's own sbatch --test-only can
    sweep_dir = tmp_path / "sweep"
    proc = sweep(cluster, sweep_dir, "+hydra.launcher.additional_parameters.constraint=nosuch")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: Slurm refuses the job hydra.launcher describes: sbatch "
                           "--test-only says \""), line
    assert "Invalid feature specification" in line and "--constraint=nosuch" in line, line
    assert line.endswith("fix the hydra.launcher value behind that option"), line
    assert "Traceback" not in proc.stdout and not sweep_dir.exists()
    assert slurm(cluster, "squeue", "-h") == ""


def test_a_pending_job_says_why_and_is_given_up_after_the_limit(cluster, tmp_path):
    blocker = slurm(cluster, "sbatch", "--parsable", f"--cpus-per-task={os.cpu_count()}",
                    "--job-name=blocker", "--output=/dev/null", "--wrap", "sleep 600").strip()
    try:
        sweep_dir = tmp_path / "sweep"
        proc = sweep(cluster, sweep_dir, "sweep.name=waits", "cuda_graph.impl=none",
                     "fsdp.prefetch_first_param_group=true", "sweep.pending_limit_min=0.25",
                     timeout=300)
    finally:
        slurm(cluster, "scancel", blocker)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\[sweep\] job \d+ \(waits/\w+/repeat0\) pending for 0 min: \w+; gives up "
                     r"after sweep.pending_limit_min=0.25", proc.stdout), proc.stdout[-3000:]
    (summary,) = run_summaries(sweep_dir).values()
    assert summary["status"] == "cancelled"
    assert re.search(r"pended 0\.\d min \(Slurm's reason: \w+\), past "
                     r"sweep.pending_limit_min=0.25; the sweep cancelled it", summary["message"])
