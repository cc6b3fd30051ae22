"""2 ranks over gloo with optim_grads_params, started every way a user can start them: `launch`
itself, two `launch` processes joining one c10d rendezvous as two nodes, torchrun, and submitit
(the Slurm code path, run locally). Each must train the same model as the 1-rank run."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import read_run, run_launch

pytestmark = pytest.mark.distributed

COMMON = ["+recipe=tiny_cpu", "train.steps=8", "logging.wandb.mode=disabled"]
BIN = Path(sys.executable).parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(tmp_path):
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(tmp_path / "home"))
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SUBMITIT_EXECUTOR"):
        env.pop(var, None)
    return env


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    proc, run_dir = run_launch(tmp_path_factory.mktemp("one"), *COMMON)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_run(run_dir)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    proc, run_dir = run_launch(tmp_path_factory.mktemp("two"), *COMMON,
                               "runtime.nproc_per_node=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_run(run_dir)


def assert_same_training(reference, other):
    (_, ref_steps), (summary, steps) = reference, other
    assert summary["status"] == "ok" and summary["world_size"] == 2
    assert [s["step"] for s in steps] == [s["step"] for s in ref_steps]
    for a, b in zip(ref_steps, steps):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3)


@pytest.mark.quick
def test_two_ranks_shard_and_match_one_rank(one_rank, two_ranks):
    s1, s2 = one_rank[0], two_ranks[0]
    assert_same_training(one_rank, two_ranks)
    # Each rank holds half the weights: rank 0's shard is half of the 1-rank (whole) buffer.
    assert s2["rank0_weight_shard_numel"] * 2 == pytest.approx(s1["rank0_weight_shard_numel"],
                                                               rel=0.01)
    assert s2["hosts"] == [socket.gethostname()]
    assert s2["devices_by_host"] == {socket.gethostname(): ["cpu", "cpu"]}
    # one intra-op thread a rank, as torchrun gives several ranks of a node, unless set
    assert [e["OMP_NUM_THREADS"] for e in s2["env"]] == [os.environ.get("OMP_NUM_THREADS",
                                                                        "1")] * 2
    assert s1["env"][0]["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS")


def test_two_nodes_through_a_rendezvous_match_one_node(two_ranks, tmp_path):
    """Two `launch` processes on loopback, each a node with one rank, as on two machines."""
    endpoint = f"127.0.0.1:{free_port()}"
    procs, dirs = [], []
    for node in range(2):
        run_dir = tmp_path / f"node{node}"
        dirs.append(run_dir)
        procs.append(subprocess.Popen(
            [str(BIN / "launch"), *COMMON, "runtime.nnodes=2", "runtime.nproc_per_node=1",
             f"runtime.rdzv_endpoint={endpoint}", f"hydra.run.dir={run_dir}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(tmp_path)))
    outputs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, out[-2000:] + err[-3000:]
    written = [d for d in dirs if (d / "summary.json").exists()]
    assert len(written) == 1  # the node of global rank 0 alone
    other = next(d for d in dirs if d not in written)
    assert not (other / "metrics.jsonl").exists() and not (other / "wandb").exists()
    assert_same_training(two_ranks, read_run(written[0]))
    assert sum("the node of rank 0 writes the summary" in out for out, _ in outputs) == 1


def test_torchrun_starting_launch_matches(two_ranks, tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [str(BIN / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}",
         str(BIN / "launch"), *COMMON, f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=600, env=env_for(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert_same_training(two_ranks, read_run(run_dir))
    assert (run_dir / ".hydra" / "config.yaml").exists()  # rank 0's snapshot; no other writes


def test_submitit_local_two_tasks_is_the_slurm_code_path(two_ranks, tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = subprocess.run(
        [str(BIN / "launch"), "-m", *COMMON, "hydra/launcher=submitit_local",
         "hydra.launcher.tasks_per_node=2", f"hydra.sweep.dir={sweep_dir}"],
        capture_output=True, text=True, timeout=600, env=env_for(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (run_dir,) = [p.parent for p in sweep_dir.glob("*/repeat0/attempt0/summary.json")]
    summary, steps = read_run(run_dir)
    assert_same_training(two_ranks, (summary, steps))
    assert "(no swept key) (baseline)  ok" in proc.stdout
