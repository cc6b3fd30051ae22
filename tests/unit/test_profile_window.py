"""The profiling window's arithmetic, on typed configs composed by Hydra: its default steps, and
what a run says when it made none of them (a run resumed after its window)."""

import pytest

from conftest import make_config
from launcher.run.profile import describe, result


@pytest.mark.parametrize("overrides,window", [
    (["+recipe=tiny_cpu", "profile=torch"], (3, 4)),  # after train.warmup_steps=2
    (["+recipe=gpt", "profile=torch", "fsdp.prefetch_first_param_group=false",
      "cuda_graph=full_iteration"], (10, 11)),  # 5 warmup, 3 graph warmup steps, the capture
    (["+recipe=tiny_cpu", "profile=torch", "profile.steps=[10,12]"], (10, 12)),
])
def test_the_window(overrides, window):
    assert make_config(*overrides).profile_window == window


def test_a_run_resumed_after_its_window_says_it_profiled_nothing(tmp_path):
    cfg = make_config("+recipe=tiny_cpu", "profile=torch")
    profile = result(cfg, str(tmp_path), steps_run=list(range(11, 21)), window=None, waits_s={})
    assert profile.kind == "torch" and profile.steps == [] and profile.files == []
    assert describe(profile, str(tmp_path)) == (
        "[launch] profile: nothing profiled, the window lies before the steps this run made (it "
        "resumed after it)")


def test_every_profiled_ranks_trace_is_listed(tmp_path):
    cfg = make_config("+recipe=tiny_cpu", "profile=torch", "profile.ranks=[0,1]",
                      "runtime.nproc_per_node=2")
    profile = result(cfg, str(tmp_path), steps_run=list(range(1, 21)), window=None, waits_s={})
    assert profile.steps == [3, 4] and profile.breakdown_ms is None  # rank 0 kept no window
    assert profile.files == ["profile/rank0.json.gz", "profile/rank1.json.gz"]
