"""`runtime.dry_run=true`: the plan and the estimate without torch; the benchmarks under bench/
run to completion on the tiny model (their figures are printed, never asserted)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
VARIANT = ["model.activation=swiglu", "model.normalization=RMSNorm", "model.num_query_groups=2"]


def launch(*args, cwd=None):
    return subprocess.run([str(BIN / "launch"), *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd, env=dict(os.environ, WANDB_SILENT="true"))


@pytest.mark.parametrize("variant", [[], VARIANT], ids=["gelu-layernorm", "swiglu-rmsnorm-gqa"])
def test_estimated_parameters_are_the_built_model_s(tmp_path, variant):
    dry = launch("+recipe=tiny_cpu", "runtime.dry_run=true", *variant)
    assert dry.returncode == 0, dry.stderr[-2000:]
    estimated = int(re.search(r"\[dry run\] ([\d,]+) parameters", dry.stdout)[1].replace(",", ""))
    assert "[dry run] nothing started" in dry.stdout and not list(tmp_path.iterdir())
    real = launch("+recipe=tiny_cpu", "train.steps=3", "train.warmup_steps=1",
                  "logging.wandb.mode=disabled", f"hydra.run.dir={tmp_path / 'run'}", *variant)
    assert real.returncode == 0, real.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_parameters"] == \
        estimated


def test_gpt_recipe_estimate_per_strategy():
    dry = launch("+recipe=gpt", "runtime.dry_run=true", "runtime.nproc_per_node=8")
    assert dry.returncode == 0, dry.stderr[-2000:]
    # GPT-2 small with a 50,304-row padded vocabulary, tied to the output layer: GPT-2's 124M.
    assert "124,475,904 parameters" in dry.stdout and "32,768 tokens per step" in dry.stdout
    rows = {line.split()[0]: float(line.split()[6]) for line in dry.stdout.splitlines()
            if line.startswith("  ")}
    assert list(rows) == ["no_shard", "optim", "optim_grads", "optim_grads_params"]
    assert rows["no_shard"] > rows["optim"] > rows["optim_grads"] > rows["optim_grads_params"]


def test_a_dry_run_on_a_named_cluster_predicts_the_step(tmp_path):
    dry = launch("+recipe=llama3_70b", "cluster.gpu=h100_sxm", "cluster.nodes=8",
                 "runtime.dry_run=true", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr[-2000:]
    out = dry.stdout
    assert "world 64, data-parallel 64" in out  # the estimate is for the cluster's world too
    head = re.search(r"\[predict\] NVIDIA H100 SXM5 80GB x 64 \(8 node\(s\) of 8\): ([\d.]+) s "
                     r"a step = compute ([\d.]+) s \+ exposed communication ([\d.]+) s", out)
    step, compute, exposed = (float(v) for v in head.groups())
    assert step > compute > 0 and exposed > 0
    assert re.search(r"  layer 0-79 \(x80\) +855,654,400", out)  # one row for 80 alike layers
    # each figure with its band: every kernel class's rate at its low and high end
    assert re.search(r"\[predict\] [\d,]+ \([\d,]+-[\d,]+\) tokens/s/GPU, [\d.,]+ \([\d.,]+-[\d.,]+\) "
                     r"TFLOP/s/GPU, MFU [\d.]+% \([\d.]+-[\d.]+%\)", out)
    assert "[predict] fsdp.prefetch_first_param_group=true saves" in out
    assert out.rstrip().endswith("[dry run] nothing started")


LLAMA_8B_H100 = ["+recipe=llama3_8b", "cluster.gpu=h100_sxm", "runtime.nproc_per_node=8",
                 "runtime.dry_run=true"]


def test_the_8b_recipe_on_h100s_is_estimated_for_the_clusters_fused_attention(tmp_path):
    dry = launch(*LLAMA_8B_H100, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert ("[dry run] memory per GPU (MiB) for the transformer_engine layer spec (fused "
            "attention, no s x s scores)") in dry.stdout
    assert "MFU 64.7% (61.1-68.1%), memory per GPU 56.8 GiB of 80: fits\n" in dry.stdout
    local = launch(*LLAMA_8B_H100, "model.layer_spec=local", cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-2000:]
    assert "for the local layer spec (its attention keeps the s x s scores)" in local.stdout
    assert ("memory per GPU 376.8 GiB of 80: does not fit; the cheapest change that fits: "
            "model.recompute.granularity=selective (56.8 GiB, ") in local.stdout


def test_a_sweeps_plan_marks_the_cells_that_do_not_fit(tmp_path):
    proc = launch("-m", *LLAMA_8B_H100, "model.layer_spec=auto,local",
                  f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = {line.split()[1]: line for line in proc.stdout.splitlines()
             if re.match(r"  [0-9a-f]{10}  ", line)}
    assert "MFU 65%, 57 GiB  " in cells["auto"] and "FIT" not in cells["auto"]
    assert ("MFU 65%, DOES NOT FIT: 377 GiB of 80, fits with "
            "model.recompute.granularity=selective") in cells["local"]


def test_a_run_that_does_not_fit_the_clusters_world_is_refused_in_one_line(tmp_path):
    dry = launch("+recipe=llama3_70b", "cluster.gpu=h100_sxm", "cluster.nodes=3",
                 "runtime.dry_run=true", f"hydra.run.dir={tmp_path / 'run'}")
    assert dry.returncode == 2 and "Traceback" not in dry.stderr
    assert dry.stderr.strip() == (
        "error: train.global_batch_size=256 is not divisible by train.micro_batch_size x "
        "data-parallel size = 1 x 24; set train.global_batch_size to a multiple of 24")


def test_a_sweeps_dry_run_on_a_named_cluster_predicts_each_cell(tmp_path):
    proc = launch("-m", "+recipe=llama3_70b", "cluster.gpu=h100_sxm", "cluster.nodes=8",
                  "fsdp.prefetch_first_param_group=true,false",
                  "cuda_graph.impl=none,full_iteration", "runtime.dry_run=true",
                  f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("cell"))
    assert header.split()[-2:] == ["predicted", "plan"]
    cells = [line for line in lines if re.match(r"  [0-9a-f]{10}  ", line)]
    predicted = [line for line in cells
                 if re.search(r"[\d.]+ s/step \([\d.]+-[\d.]+\), [\d,]+ tok/s/GPU, MFU", line)]
    assert len(cells) == 4 and len(predicted) == 3  # the refused cell has none
    # the three valid cells predict the same step: named as indistinguishable, not ranked
    order = next(line for line in lines if line.startswith("[sweep] predicted fastest: "))
    assert order.endswith("slower beyond the band: none") and order.count("impl=") == 3
    assert not (tmp_path / "sweep").exists()


def test_sweep_dry_run_prints_the_plan_and_starts_nothing(tmp_path):
    proc = launch("-m", "+recipe=sweep_tiny_cpu", "runtime.dry_run=true",
                  f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "4 cells x 2 repeat(s)" in proc.stdout and "1 refused" in proc.stdout
    assert "[sweep] dry run: nothing started" in proc.stdout
    assert not (tmp_path / "sweep").exists()


def test_startup_benchmark_runs_and_ends_with_its_line():
    proc = subprocess.run([sys.executable, "bench/startup.py", "--repeats", "1"],
                          capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"cfg_job_s=\d+\.\d\d help_s=\d+\.\d\d sweep_preflight_s=\d+\.\d\d "
                        r"sweep_100_preflight_s=\d+\.\d\d", lines[-1])
    assert sum("heavy imports: []" in line for line in lines) == 4


def test_overhead_benchmark_runs_and_ends_with_its_line():
    proc = subprocess.run([sys.executable, "bench/overhead.py", "--pairs", "2", "--steps", "4",
                           "--cores", "0"], capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    ratio = r"(\d+\.\d{3}) \[(\d+\.\d{3}), (\d+\.\d{3})\]"
    found = re.fullmatch(rf"steady_state_ratio={ratio} first_step_ratio={ratio}", last)
    assert found, last
    figures = [float(v) for v in found.groups()]
    for figure, low, high in (figures[:3], figures[3:]):  # the interval holds its figure
        assert low <= figure <= high
    assert "cores [0]" in proc.stdout
