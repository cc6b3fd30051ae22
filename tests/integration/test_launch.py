"""`launch` as a subprocess on the tiny CPU recipe: what a user sees and what lands on disk."""

import math
import os
import re
import subprocess

import pytest

from conftest import GPT_TINY, LAUNCH, read_run, run_launch

pytestmark = pytest.mark.integration

FIXED = ["+recipe=tiny_cpu", "train.steps=20", "data.fixed_batch=true"]

# A CPU run's step line: no MFU, no share of a GPU's memory; 0 steps skipped, 0 non-finite.
STEP_LINE = re.compile(
    r"step +(\d+)/\d+ \| +[\d.]+ ms \| +[\d,]+ tokens/s/GPU \| +[\d.]+ TFLOP/s/GPU \| "
    r"lr \d\.\d{3}E[-+]\d\d \| loss +[\d.]+ \| grad norm +[\d.]+ \| skipped +0 \| nan +0 \| "
    r"mem +[\d.]+ GiB \| ETA +(\d+h\d\dm|\d+m\d\ds|\d+s)")


def step_lines(stdout: str) -> list:
    return [line for line in stdout.splitlines() if line.startswith("step ")]


def last_lines(stdout: str) -> list:
    """The run's result lines: from `[launch] ok:` on."""
    lines = stdout.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("[launch] ok:")):]


@pytest.mark.parametrize("prefetch,expected", [pytest.param(True, 20, marks=pytest.mark.quick),
                                               (False, 0)])
def test_tiny_run_trains_and_counts_first_group_prefetches(launch, prefetch, expected):
    proc, run_dir = launch(*FIXED, f"fsdp.prefetch_first_param_group={str(prefetch).lower()}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, steps = read_run(run_dir)
    assert summary["status"] == "ok" and summary["backend"] == "gloo"
    assert summary["world_size"] == 1 and summary["wrapper"] == "FullyShardedDataParallel"
    assert summary["megatron_core_version"] == "0.19.2"
    assert summary["steady_state_steps"] == list(range(3, 21))
    assert summary["config"]["fsdp"]["prefetch_first_param_group"] is prefetch
    m = summary["metrics"]
    assert m["first_group_prefetches"] == expected
    assert m["mfu"] is None and m["cuda_graph_captured"] is False
    assert m["tokens_per_s_per_gpu"] > 0 and m["peak_rss_bytes"] > 0
    assert m["peak_memory_allocated_bytes"] is None and m["peak_memory_reserved_bytes"] is None
    assert [s["step"] for s in steps] == list(range(1, 21))
    assert all(math.isfinite(s["loss"]) for s in steps)
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.5
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    lines = step_lines(proc.stdout)
    assert [int(STEP_LINE.fullmatch(line).group(1)) for line in lines] == list(range(1, 21))
    assert len({tuple(m.start() for m in re.finditer(r" \| ", line)) for line in lines}) == 1, \
        "the step lines' columns do not line up"
    ok, first_group, outputs = last_lines(proc.stdout)[:3]
    # each median with its 95% interval, the rates' the step time's inverted
    time, low, high = map(float, re.fullmatch(
        r"\[launch\] ok: ([\d.]+) \[([\d.]+), ([\d.]+)\] ms/step \(p90 [\d.]+ ms\), [\d,]+ "
        r"\[[\d,]+, [\d,]+\] tokens/s/GPU, [\d.]+ \[[\d.]+, [\d.]+\] TFLOP/s/GPU \(medians of 18 "
        r"steady-state steps, 95% intervals\); peak RSS [\d.]+ GiB", ok).groups())
    assert low <= time <= high, ok
    switch = f"(fsdp.prefetch_first_param_group={str(prefetch).lower()}): {expected} prefetches"
    place = "start_param_sync" if prefetch else "forward"
    assert switch in first_group and f"issued in {place}" in first_group, first_group
    assert re.search(r"waited [\d.e-]+ ms for it \(medians of 18 steps\)", first_group)
    assert outputs == f"[launch] outputs in {run_dir}"


def test_cuda_graph_cell_runs_eagerly_on_cpu_and_says_so(launch):
    proc, run_dir = launch("+recipe=tiny_cpu", "train.steps=6", "cuda_graph=full_iteration",
                           "cuda_graph.warmup_steps=1", "fsdp.prefetch_first_param_group=false",
                           "logging.wandb.mode=disabled")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, _ = read_run(run_dir)
    assert summary["metrics"]["cuda_graph_captured"] is False
    assert summary["cuda_graph_wrapper"] == "FullCudaGraphWrapper"
    assert summary["steady_state_steps"] == [5, 6]  # 2 warmup + 1 graph warmup + 1 capture
    assert "not captured" in proc.stdout
    assert not (run_dir / "wandb").exists()


def test_shrunk_gpt_recipe_in_bf16_graph_cell_matches_eager_cell(tmp_path):
    """The path users sweep: the gpt recipe in bf16, its full-iteration cell through megatron's
    FullCudaGraphWrapper (training and validation), against the eager cell at the same seed."""
    runs = {}
    for impl in ("none", "full_iteration"):
        # the graph warmup acts in the graph cell only (set for the eager one, it is refused)
        warmup = ["cuda_graph.warmup_steps=1"] if impl != "none" else []
        proc, run_dir = run_launch(tmp_path / impl, *GPT_TINY, f"cuda_graph.impl={impl}",
                                   *warmup, "train.eval_interval=5",
                                   "train.eval_iters=1", "fsdp.prefetch_first_param_group=false",
                                   "logging.wandb.mode=disabled")
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[impl] = read_run(run_dir)
    (eager, eager_steps), (graph, graph_steps) = runs["none"], runs["full_iteration"]
    for summary in (eager, graph):
        assert summary["status"] == "ok" and summary["config"]["train"]["precision"] == "bf16"
        assert summary["metrics"]["cuda_graph_captured"] is False
    assert eager["cuda_graph_wrapper"] is None
    assert graph["cuda_graph_wrapper"] == "FullCudaGraphWrapper"
    assert [s["loss"] for s in graph_steps if "loss" in s] == \
        [s["loss"] for s in eager_steps if "loss" in s]
    assert [s["valid_loss"] for s in graph_steps if "valid_loss" in s] == \
        [s["valid_loss"] for s in eager_steps if "valid_loss" in s]
    assert [{k: v for k, v in e.items() if k != "OMP_NUM_THREADS"} for e in graph["env"]] == \
        [{"CUDA_DEVICE_MAX_CONNECTIONS": "32", "NCCL_GRAPH_REGISTER": "0",
          "TORCH_NCCL_AVOID_RECORD_STREAMS": "0",
          "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,"
                                     "graph_capture_record_stream_reuse:True"}]
    assert eager["env"][0]["NCCL_GRAPH_REGISTER"] is None  # an eager run gets none of it


def test_a_five_step_run_of_the_gpt_recipe_runs_with_null_throughput(launch):
    """Shorter than its LR warmup (10) and its throughput warmup (5): it trains, warming up all
    the way, and says once why it measured no throughput."""
    proc, run_dir = launch("+recipe=gpt", "model=tiny", "train.steps=5",
                           "logging.wandb.mode=disabled")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, steps = read_run(run_dir)
    m = summary["metrics"]
    assert summary["status"] == "ok" and summary["config"]["train"]["precision"] == "bf16"
    assert summary["steps_run"] == [1, 2, 3, 4, 5] and summary["steady_state_steps"] == []
    assert m["tokens_per_s_per_gpu"] is None and m["tflops_per_gpu"] is None
    reason = ("no steady-state step: all 5 steps are within the 5 steps of warmup throughput "
              "leaves out (train.warmup_steps=5); set train.steps above 5")  # graphs are off
    assert m["throughput_null_reason"] == reason
    assert last_lines(proc.stdout)[0].startswith(f"[launch] ok: throughput null: {reason}; peak")
    assert proc.stdout.count(reason) == 1
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    lr, warmup = summary["config"]["train"]["lr"], summary["config"]["train"]["lr_warmup_steps"]
    # the recipe's warmup, as a 50-step run has it: step k at lr * (k - 1) / 10
    assert [s["lr"] for s in steps] == pytest.approx([lr * k / warmup for k in range(5)])


def test_the_console_prints_every_logging_interval_th_step_as_metrics_jsonl_records_it(launch):
    proc, run_dir = launch("+recipe=tiny_cpu", "train.steps=6", "logging.interval=3",
                           "logging.wandb.mode=disabled")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, steps = read_run(run_dir)
    printed = [int(STEP_LINE.fullmatch(line).group(1)) for line in step_lines(proc.stdout)]
    assert printed == [s["step"] for s in steps] == [3, 6]


def test_cuda_device_max_connections_1_is_refused_before_any_rank(tmp_path):
    run_dir = tmp_path / "run"
    env = dict(os.environ, CUDA_DEVICE_MAX_CONNECTIONS="1", HOME=str(tmp_path))
    proc = subprocess.run([LAUNCH, "+recipe=tiny_cpu", f"hydra.run.dir={run_dir}"], text=True,
                          capture_output=True, env=env, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: CUDA_DEVICE_MAX_CONNECTIONS=1 serialises Megatron-FSDP's communication with its "
        "compute (Megatron-LM refuses it with Megatron-FSDP); unset it or set it above 1, e.g. 32"]
    assert not (run_dir / "summary.json").exists()


def test_invalid_cell_exits_2_with_one_line_and_no_outputs(launch):
    proc, run_dir = launch("+recipe=tiny_cpu", "cuda_graph=full_iteration")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "set fsdp.prefetch_first_param_group=false" in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (run_dir / "summary.json").exists()
