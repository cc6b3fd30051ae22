"""GPU tier: skipped without CUDA. On a GPU machine: `.venv/bin/python -m pytest tests/gpu -m gpu`.

The path users take: the gpt recipe shrunk, in bf16, its full-iteration cell captured by
megatron-core's FullCudaGraphWrapper, and a resume."""

import json
import shutil

import pytest
import torch

from conftest import GPT_TINY, read_run, run_launch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CUDA = [*GPT_TINY, "runtime.device=cuda", "logging.wandb.mode=disabled"]


# Profiling rides along (no run of its own): nsys's window in an eager cell (cudaProfilerStart
# and Stop are no-ops without Nsight Systems attached), torch's with the allocator's history in
# the captured one.
PROFILES = {"none": ["profile=nsys"], "full_iteration": ["profile=torch", "profile.memory=true"]}


@pytest.mark.parametrize("prefetch,graph", [("true", "none"), ("false", "none"),
                                            ("false", "full_iteration")])
def test_gpu_cell(launch, prefetch, graph):
    profile = PROFILES[graph] if prefetch == "false" else []
    proc, run_dir = launch(*CUDA, f"fsdp.prefetch_first_param_group={prefetch}",
                           f"cuda_graph={graph}", *profile)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, _ = read_run(run_dir)
    assert summary["backend"] == "nccl"
    assert summary["metrics"]["cuda_graph_captured"] is (graph != "none")
    assert summary["metrics"]["first_group_prefetches"] == (10 if prefetch == "true" else 0)
    assert summary["metrics"]["peak_memory_reserved_bytes"] >= \
        summary["metrics"]["peak_memory_allocated_bytes"] > 0
    if profile:
        check_profile(summary, run_dir, proc.stdout, graph)


def check_profile(summary, run_dir, stdout, graph):
    """Steps 7..8, after 2 warmup steps, 3 graph warmup steps and the capture in the graph cell;
    after the 2 warmup steps in the eager one."""
    window = [7, 8] if graph == "full_iteration" else [3, 4]
    assert summary["profile"]["steps"] == window
    print(f"[gpu] profile {summary['profile']}")
    if graph == "none":
        assert "between cudaProfilerStart/Stop" in stdout.strip().splitlines()[-1]
        return
    import gzip

    with gzip.open(run_dir / "profile" / "rank0.json.gz", "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in events}
    assert "graph.replay" in names and "forward_backward" not in names  # the replays
    # the graph was captured before the profiler's first use: CUPTI must still see its kernels
    # (pytorch/pytorch#75504; kineto#1165)
    assert sum(e.get("cat") == "kernel" for e in events) > 0
    assert (run_dir / "profile" / "memory_rank0.pickle").stat().st_size > 0
    assert summary["profile"]["breakdown_ms"]["forward_backward"] > 0


def test_captured_graph_matches_the_eager_cell(tmp_path):
    losses = {}
    for graph in ("none", "full_iteration"):
        # the graph warmup acts in the graph cell only (set for the eager one, it is refused)
        warmup = ["cuda_graph.warmup_steps=2"] if graph != "none" else []
        proc, run_dir = run_launch(tmp_path / graph, *CUDA, "fsdp.prefetch_first_param_group=false",
                                   f"cuda_graph={graph}", *warmup, "data.fixed_batch=true")
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary, steps = read_run(run_dir)
        assert summary["metrics"]["cuda_graph_captured"] is (graph != "none")
        losses[graph] = [s["loss"] for s in steps]
    assert len(losses["full_iteration"]) == 10
    assert losses["full_iteration"] == pytest.approx(losses["none"], rel=1e-3)


def test_bf16_resume_is_exact(tmp_path):
    common = [*CUDA, "train.checkpoint.interval=4", "train.checkpoint.resume=auto"]
    proc, reference = run_launch(tmp_path / "reference", *common)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, expected = read_run(reference)
    resumed_dir = tmp_path / "resumed" / "run"
    shutil.copytree(reference, resumed_dir)
    for later in ("iter_0000008", "iter_0000010"):  # back to the checkpoint of step 4
        shutil.rmtree(resumed_dir / "checkpoints" / later)
    (resumed_dir / "summary.json").unlink()
    proc, _ = run_launch(tmp_path / "resumed", *common)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((resumed_dir / "summary.json").read_text())
    assert summary["resumed_from"].endswith("iter_0000004")
    _, steps = read_run(resumed_dir)
    assert [s["loss"] for s in steps] == [s["loss"] for s in expected]


@pytest.mark.parametrize("prefetch,where", [("true", "start_param_sync"), ("false", "forward")])
def test_gpu_first_group_fields(launch, prefetch, where):
    proc, run_dir = launch(*CUDA, f"fsdp.prefetch_first_param_group={prefetch}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = read_run(run_dir)[0]["metrics"]
    assert m["first_group_issued_in"] == where
    assert m["first_group_bytes"] == 20736  # the tiny GPT's embedding bucket (tied), bf16
    assert m["first_group_allgather_s"] > 0 and m["first_group_wait_s"] >= 0
    if prefetch == "false":
        assert m["first_group_wait_s"] <= m["first_group_allgather_s"] + 1e-4


def test_gpu_captured_graph_says_why_the_first_group_is_not_timed(launch):
    proc, run_dir = launch(*CUDA, "fsdp.prefetch_first_param_group=false",
                           "cuda_graph=full_iteration")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = read_run(run_dir)[0]["metrics"]
    assert m["cuda_graph_captured"] is True and m["first_group_wait_s"] is None
    assert "captured CUDA graph" in m["first_group_null_reason"]


def test_gpu_measuring_adds_no_synchronisation(tmp_path):
    """Step time with the first-group events on and off, 20 steps each: printed, not asserted as
    a time (a benchmark's job); the run must finish with the fields on."""
    medians = {}
    for measure in ("true", "false"):
        proc, run_dir = run_launch(tmp_path / measure, *CUDA, "train.steps=22",
                                   "fsdp.prefetch_first_param_group=true",
                                   f"logging.measure_first_group={measure}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        medians[measure] = read_run(run_dir)[0]["metrics"]["step_time_s_p50"]
    print(f"first-group measuring on/off step time p50: {medians['true'] * 1e3:.3f} ms / "
          f"{medians['false'] * 1e3:.3f} ms = {medians['true'] / medians['false']:.3f}")
