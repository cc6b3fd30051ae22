"""What a single run prints when it ends (launcher.run.console.result_lines, from its summary),
and why a run measured no throughput, naming only what that run leaves out."""

import pytest

from conftest import make_config as make
from launcher.run import console
from launcher.run.record import no_throughput_reason
from launcher.summary import RunMetrics, RunSummary

FIRST_GROUP = dict(first_group_prefetches=20, first_group_issued_in="start_param_sync",
                   first_group_bytes=41472, first_group_allgather_s=0.00287,
                   first_group_wait_s=0.0000213, first_group_samples=18)


def cpu_run(**metrics) -> RunSummary:
    values = dict(tokens_per_s_per_gpu=1670.2, tflops_per_gpu=0.00112, step_time_s_p50=0.1533,
                  step_time_s_p90=0.1838, step_time_s_low=0.1491, step_time_s_high=0.1602,
                  peak_rss_bytes=int(0.71 * 2 ** 30), **FIRST_GROUP)
    return RunSummary(metrics=RunMetrics(**{**values, **metrics}), device="cpu",
                      config={"fsdp": {"prefetch_first_param_group": True}},
                      steady_state_steps=list(range(3, 21)))


def gpu_run(mfu=0.4167) -> RunSummary:
    m = RunMetrics(tokens_per_s_per_gpu=39738.4, tflops_per_gpu=412.3, mfu=mfu,
                   step_time_s_p50=0.4123, step_time_s_p90=0.4150, step_time_s_low=0.4101,
                   step_time_s_high=0.4139,
                   peak_memory_allocated_bytes=int(45.67 * 2 ** 30),
                   peak_memory_reserved_bytes=50 * 2 ** 30, peak_rss_bytes=12 * 2 ** 30,
                   **FIRST_GROUP)
    return RunSummary(metrics=m, device="NVIDIA H100 80GB HBM3", device_memory_bytes=80 * 2 ** 30,
                      config={"fsdp": {"prefetch_first_param_group": True}},
                      steady_state_steps=list(range(6, 46)))


def test_a_cpu_run_ends_with_its_medians_peak_rss_first_group_and_outputs():
    assert console.result_lines(cpu_run(), "outputs/x") == [
        "[launch] ok: 153.3 [149.1, 160.2] ms/step (p90 183.8 ms), 1,670 [1,598, 1,717] "
        "tokens/s/GPU, 0.0011 [0.0011, 0.0012] TFLOP/s/GPU (medians of 18 steady-state steps, "
        "95% intervals); peak RSS 0.71 GiB",
        "[launch] first parameter group (fsdp.prefetch_first_param_group=true): 20 prefetches; "
        "its all-gather of 40.5 KiB, issued in start_param_sync, took 2.87 ms, the first forward "
        "waited 0.0213 ms for it (medians of 18 steps)",
        "[launch] outputs in outputs/x"]


def test_a_gpu_run_ends_with_mfu_and_its_share_of_the_gpu():
    first = console.result_lines(gpu_run(), "outputs/x")[0]
    assert first == ("[launch] ok: 412.3 [410.1, 413.9] ms/step (p90 415.0 ms), 39,738 "
                     "[39,585, 39,952] tokens/s/GPU, 412.3 [410.7, 414.5] TFLOP/s/GPU, MFU 41.7% "
                     "[41.5%, 41.9%] (medians of 40 steady-state steps, 95% intervals); peak "
                     "memory 45.67 GiB allocated (57% of the GPU), 50.00 GiB reserved")


def test_under_6_steady_state_steps_the_medians_have_no_interval():
    run = cpu_run(step_time_s_low=None, step_time_s_high=None)
    run.steady_state_steps = [3, 4, 5, 6, 7]
    assert console.result_lines(run, "o")[0] == (
        "[launch] ok: 153.3 ms/step (p90 183.8 ms), 1,670 tokens/s/GPU, 0.0011 TFLOP/s/GPU "
        "(medians of 5 steady-state steps; under 6 give no interval); peak RSS 0.71 GiB")


def test_a_gpu_without_a_known_peak_says_so_where_its_mfu_would_be():
    first = console.result_lines(gpu_run(mfu=None), "outputs/x")[0]
    assert "MFU null (no dense peak known for NVIDIA H100 80GB HBM3)" in first


def test_null_figures_print_their_reasons():
    run = cpu_run(tokens_per_s_per_gpu=None, tflops_per_gpu=None, step_time_s_p50=None,
                  step_time_s_p90=None, throughput_null_reason="no steady-state step: why",
                  first_group_wait_s=None, first_group_allgather_s=None,
                  first_group_null_reason="no steady-state step", first_group_prefetches=1)
    assert console.result_lines(run, "o")[:2] == [
        "[launch] ok: throughput null: no steady-state step: why; peak RSS 0.71 GiB",
        "[launch] first parameter group (fsdp.prefetch_first_param_group=true): 1 prefetch; "
        "all-gather and wait null (no steady-state step)"]


@pytest.mark.parametrize("seconds,text", [(0.4, "0s"), (12.4, "12s"), (83, "1m23s"),
                                          (3599.6, "1h00m"), (7500, "2h05m")])
def test_durations_read_as_hours_minutes_seconds(seconds, text):
    assert console.duration(seconds) == text


def test_a_run_within_its_warmup_names_only_the_settings_that_make_it():
    """The shrunk gpt recipe, graphs off: no CUDA graph in the reason."""
    cfg = make("+recipe=gpt", "model=tiny", "train.precision=fp32", "train.steps=5")
    assert no_throughput_reason(cfg, 1, 5, (0, -1)) == (
        "no steady-state step: all 5 steps are within the 5 steps of warmup throughput leaves "
        "out (train.warmup_steps=5); set train.steps above 5")


def test_a_graph_cell_within_its_warmup_names_the_graph_warmup_and_capture():
    cfg = make("+recipe=tiny_cpu", "train.steps=4", "cuda_graph=full_iteration",
               "fsdp.prefetch_first_param_group=false")
    assert no_throughput_reason(cfg, 1, 4, (0, -1)) == (
        "no steady-state step: all 4 steps are within the 6 steps of warmup throughput leaves "
        "out (train.warmup_steps=2, cuda_graph.warmup_steps=3 and 1 capture step); set "
        "train.steps above 6")


def test_a_resumed_run_says_it_warms_up_again():
    cfg = make("+recipe=tiny_cpu", "train.steps=7")
    assert no_throughput_reason(cfg, 7, 7, (0, -1)) == (
        "no steady-state step: 1 step since resuming at step 7 is within the 2 steps of warmup "
        "throughput leaves out (train.warmup_steps=2), which a resumed run leaves out again; set "
        "train.steps above 8")


def test_a_run_whose_steps_after_warmup_are_profiled_names_the_window():
    cfg = make("+recipe=tiny_cpu", "train.steps=4", "profile=torch", "profile.steps=[3,4]")
    assert no_throughput_reason(cfg, 1, 4, cfg.profile_window) == (
        "no steady-state step: steps 3..4, after the 2 steps of warmup (train.warmup_steps=2), "
        "are in the profiling window (steps 3..4), which throughput leaves out too; set "
        "train.steps above 4")
