"""One world through `launch`: what a dry run predicts for, what its pre-flight checks and what a
run starts are the same world, however it is stated; conflicting statements are refused in one
line. (No Slurm is needed: a Slurm launcher's dry run plans without one and says so.)"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
SLURM_SWEEP = ["-m", "+recipe=llama3_8b", "hydra/launcher=slurm", "hydra.launcher.nodes=2",
               "hydra.launcher.gpus_per_node=8", "cluster.gpu=h100_sxm",
               "fsdp.prefetch_first_param_group=true,false", "runtime.dry_run=true"]


def launch(*args, cwd):
    return subprocess.run([str(BIN / "launch"), *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env=dict(os.environ, WANDB_SILENT="true"))


def predicted(stdout: str) -> list:
    return re.findall(r"[\d.]+ s/step \([\d.]+-[\d.]+\), [\d,]+ tok/s/GPU, MFU \d+%", stdout)


def test_a_slurm_sweep_predicts_and_checks_the_world_its_jobs_get(tmp_path):
    plain = launch(*SLURM_SWEEP, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert ("[sweep] each job's world: 16 (2 node(s) of 8: hydra.launcher.tasks_per_node x "
            "hydra.launcher.nodes)") in plain.stdout
    # cluster.nodes=2 states the same world: the same prediction (before: 8 GPUs without it)
    stated = launch(*SLURM_SWEEP, "cluster.nodes=2", cwd=tmp_path)
    assert stated.returncode == 0, stated.stderr[-2000:]
    assert len(predicted(plain.stdout)) == 2 and predicted(plain.stdout) == \
        predicted(stated.stdout)
    # the world the prediction is for is the one the batch is checked against
    batch = launch(*SLURM_SWEEP, "train.global_batch_size=136", cwd=tmp_path)
    assert batch.returncode == 2
    assert batch.stderr.strip().splitlines()[-1] == (
        "error: no cell of the sweep is valid: train.global_batch_size=136 is not divisible by "
        "train.micro_batch_size x data-parallel size = 1 x 16; set train.global_batch_size to a "
        "multiple of 16")


def test_a_slurm_sweep_whose_cluster_names_another_world_is_refused(tmp_path):
    proc = launch(*SLURM_SWEEP, "cluster.nodes=3", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: no cell of the sweep is valid: cluster.nodes=3 and hydra.launcher.nodes=2 name "
        "two worlds; set cluster.nodes=2 or null")


def test_a_slurm_launcher_without_m_is_refused_with_the_fix(tmp_path):
    proc = launch("+recipe=llama3_8b", "hydra/launcher=slurm", "hydra.launcher.nodes=2",
                  "hydra.launcher.gpus_per_node=8", "cluster.gpu=h100_sxm",
                  "runtime.dry_run=true", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        "error: hydra/launcher=slurm submits jobs only with -m; without it this would run here, "
        "not on Slurm: add -m (`launch -m ... hydra/launcher=slurm` submits one job when nothing "
        "is swept), or drop hydra/launcher")


def test_a_recipes_dry_run_in_another_world_says_which_keys_give_its_own(tmp_path):
    alone = launch("+recipe=llama3_8b", "runtime.dry_run=true", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert "world 1, data-parallel 1" in alone.stdout
    assert ("[dry run] recipes/llama3_8b.yaml is written for one 8-GPU node; this dry run is for "
            "world 1 (runtime.nproc_per_node x runtime.nnodes): set runtime.nproc_per_node=8 (or "
            "name its cluster: cluster.gpu=h100_sxm)") in alone.stdout
    # either fix gives the recipe's world, the same sharded state, and no line (the
    # activations differ: a named GPU cluster runs Transformer Engine's fused attention)
    estimates = []
    strategies = ("no_shard", "optim", "optim_grads", "optim_grads_params")
    for fix in ("runtime.nproc_per_node=8", "cluster.gpu=h100_sxm"):
        fixed = launch("+recipe=llama3_8b", "runtime.dry_run=true", fix, cwd=tmp_path)
        assert fixed.returncode == 0, fixed.stderr[-2000:]
        assert "world 8, data-parallel 8" in fixed.stdout and "written for" not in fixed.stdout
        estimates.append([line.split()[:5] for line in fixed.stdout.splitlines()
                          if line.split()[:1] and line.split()[0] in strategies])
    assert len(estimates[0]) == 4 and estimates[0] == estimates[1]


def test_a_run_starts_the_world_its_dry_run_names(tmp_path):
    """cluster.gpus_per_node=2 states the world as runtime.nproc_per_node=2 does: the dry run
    says world 2, and the run starts 2 ranks."""
    args = ["+recipe=tiny_cpu", "cluster.gpus_per_node=2", "train.steps=3", "train.warmup_steps=1",
            "logging.wandb.mode=disabled"]
    dry = launch(*args, "runtime.dry_run=true", cwd=tmp_path)
    assert dry.returncode == 0 and "world 2, data-parallel 2" in dry.stdout, dry.stderr[-2000:]
    run = launch(*args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["world_size"] == 2


def test_a_run_on_nodes_no_rendezvous_joins_is_refused_before_any_rank(tmp_path):
    proc = launch("+recipe=tiny_cpu", "cluster.nodes=2", "logging.wandb.mode=disabled",
                  f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: cluster.nodes=2 makes this a 2-node run")
    assert not (tmp_path / "run" / "summary.json").exists()
