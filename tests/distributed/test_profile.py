"""profile=torch on the gpt recipe shrunk (bf16, 2 ranks over gloo), switch on and off: the trace
a user opens in Perfetto, read with the standard library, and what the run says of it."""

import gzip
import json
import re

import pytest

from conftest import GPT_TINY, read_run, run_launch

pytestmark = pytest.mark.distributed

TWO_RANKS = [*GPT_TINY, "runtime.device=cpu", "runtime.nproc_per_node=2", "train.steps=8",
             "logging.wandb.mode=disabled", "profile=torch"]
WINDOW = [3, 4]  # the default: the first two steps after train.warmup_steps=2
NAMED = {"forward_backward", "optimizer", "data", "first_group.all_gather", "first_group.wait"}


@pytest.fixture(scope="module", params=["true", "false"])
def profiled(request, tmp_path_factory):
    """(switch, process, run dir, summary, steps, rank 0's trace events). With the switch on both
    ranks profile; off, rank 0 alone (the default)."""
    switch = request.param
    ranks = ["profile.ranks=[0,1]"] if switch == "true" else []
    proc, run_dir = run_launch(tmp_path_factory.mktemp(f"profile_{switch}"), *TWO_RANKS,
                               f"fsdp.prefetch_first_param_group={switch}", *ranks)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, steps = read_run(run_dir)
    with gzip.open(run_dir / "profile" / "rank0.json.gz", "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    return switch, proc, run_dir, summary, steps, events


def named(events, name):
    return [e for e in events if e["name"] == name and e.get("cat") == "user_annotation"]


def within(inner, outer) -> bool:
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def test_the_run_says_where_its_trace_is_and_what_opens_it(profiled):
    switch, proc, run_dir, summary, _, _ = profiled
    trace = run_dir / "profile" / "rank0.json.gz"
    assert proc.stdout.strip().splitlines()[-1] == (
        f"[launch] profile: steps 3..4 traced in {trace}"
        + (f", {run_dir / 'profile' / 'rank1.json.gz'}" if switch == "true" else "")
        + "; open a trace at https://ui.perfetto.dev (or chrome://tracing)")
    assert (run_dir / "profile" / "rank1.json.gz").exists() == (switch == "true")
    assert summary["profile"]["steps"] == WINDOW
    assert summary["profile"]["files"][0] == "profile/rank0.json.gz"


def test_a_cpu_trace_leaves_no_error_or_warning_on_the_console(profiled):
    """kineto's `ERROR: ... gpuGetDeviceCount failed with code 35` on a machine without CUDA
    (launcher.run.profile.quiet_kineto_without_cuda), and torch's warning that it clears events
    between profiling cycles (a window is one cycle), on no profiled rank."""
    _, proc, _, _, _, _ = profiled
    assert not re.search(r"^ERROR", proc.stdout + proc.stderr, re.M), proc.stderr[-3000:]
    assert "gpuGetDeviceCount" not in proc.stderr and "Profiler clears events" not in proc.stderr


def test_the_trace_holds_exactly_the_window_and_the_named_ranges(profiled):
    _, _, _, _, _, events = profiled
    steps = [e for e in events if e["name"].startswith("step ") and e["cat"] == "user_annotation"]
    assert sorted(e["name"] for e in steps) == [f"step {s}" for s in WINDOW]
    assert NAMED <= {e["name"] for e in events if e.get("cat") == "user_annotation"}
    for name in ("forward_backward", "optimizer", "data", "first_group.wait"):
        assert all(any(within(r, s) for s in steps) for r in named(events, name)), name
    assert len(named(events, "forward_backward")) == len(named(events, "optimizer")) == 2
    # 8 sequences per step, micro batch 2 on each of 2 ranks: 2 microbatches a step
    assert len(named(events, "data")) == 2 * 2


def test_gloos_all_gather_is_inside_the_first_groups_range(profiled):
    _, _, _, _, _, events = profiled
    ranges = named(events, "first_group.all_gather")
    assert ranges
    for issue in ranges:
        gathers = [e for e in events if e["name"] in ("gloo:all_gather",
                                                      "c10d::allgather_into_tensor_coalesced_")
                   and within(e, issue)]
        assert gathers, issue


def test_the_switch_puts_the_all_gather_in_the_previous_steps_optimizer(profiled):
    """On: issued in start_param_sync, inside step N's optimizer range (for step N+1). Off:
    issued by the forward, inside the step's own forward_backward range."""
    switch, _, _, _, _, events = profiled
    home = named(events, "optimizer" if switch == "true" else "forward_backward")
    ranges = named(events, "first_group.all_gather")
    assert ranges and all(any(within(r, h) for h in home) for r in ranges)
    if switch == "true":  # step 3's optimizer issues step 4's, step 4's issues step 5's
        assert len(ranges) == 2


def test_the_window_is_left_out_of_throughput_and_broken_down(profiled):
    _, _, _, summary, steps, _ = profiled
    assert summary["steady_state_steps"] == [5, 6, 7, 8]
    parts = summary["profile"]["breakdown_ms"]
    assert set(parts) == {"step", "forward_backward", "optimizer", "first_group.wait"}
    assert parts["forward_backward"] + parts["optimizer"] <= parts["step"]
    measured = sorted(1e3 * s["step_time_s"] for s in steps if s["step"] in WINDOW)
    assert measured[0] * 0.8 <= parts["step"] <= measured[-1] * 1.25  # the loop's own clock
