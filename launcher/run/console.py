"""What a person reads on the console while a single run trains, and when it ends.

The step line is Megatron-LM's log line, shortened: `step  3/20 |   150.3 ms | ...`, one part per
per-step metric that declares a `console` formatter (launcher.run.outputs.Metric; the formatters
are here, the declarations in launcher.run.record and the step hooks), in the declarations'
order. Each part has a fixed width, so the columns of successive lines line up; a null value
prints no part (MFU where the device's peak is not known, the share of the device's memory on a
CPU), so every line of a run has the same parts.

The run's last lines (`result_lines`) say its summary (launcher.summary.RunSummary): the
steady-state figures, the peak memory, the first parameter group's all-gather and wait, and where
the outputs are. Standard library only: text in, text out.
"""

from typing import Callable, List, Optional

from launcher.summary import RunSummary

SEPARATOR = " | "
GIB = 2 ** 30


def step_column(step: int, steps: int) -> str:
    """`step  3/20`: the step right-aligned to the width of the run's last."""
    return f"step {step:>{len(str(steps))}}/{steps}"


def step_time(seconds: float) -> str:
    return f"{seconds * 1e3:7.1f} ms"


def tokens_per_s(value: float) -> str:
    return f"{value:7,.0f} tokens/s/GPU"


def tflops(value: float) -> str:
    """Four decimals below 1 (a CPU's or a toy model's), one above."""
    return f"{value:7.{1 if value >= 1 else 4}f} TFLOP/s/GPU"


def mfu(fraction: float) -> str:
    return f"MFU {fraction:5.1%}"


def lr(value: float) -> str:
    return f"lr {value:.3E}"


def loss(value: float) -> str:
    return f"loss {value:7.4f}"


def grad_norm(value: float) -> str:
    return f"grad norm {value:6.3f}"


def skipped(count: int) -> str:
    return f"skipped {count:3d}"


def nan(count: int) -> str:
    return f"nan {count:3d}"


def memory(num_bytes: int) -> str:
    return f"mem {num_bytes / GIB:5.2f} GiB"


def memory_share(fraction: float) -> str:
    return f"{fraction:4.0%} of GPU"


def eta(seconds: float) -> str:
    return f"ETA {duration(seconds):>6}"


def validation_loss(value: float) -> str:
    return f"validation loss {value:.4f}"


def duration(seconds: float) -> str:
    """12s, 1m23s, 2h05m."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def milliseconds(seconds: float) -> str:
    """Three significant digits: 2.87 ms, 0.0213 ms, 412 ms."""
    return f"{seconds * 1e3:.3g} ms"


def size(num_bytes: int) -> str:
    """41.5 KiB, 12.0 MiB, 1.20 GiB."""
    for unit, scale in (("GiB", GIB), ("MiB", 2 ** 20)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{num_bytes / 1024:.1f} KiB"


def result_lines(summary: RunSummary, run_dir: str) -> List[str]:
    """The run's last lines: its steady-state figures and peak memory, the first parameter
    group's all-gather and wait, and where its outputs are."""
    return [f"[launch] ok: {throughput_text(summary)}; {peak_memory_text(summary)}",
            f"[launch] {first_group_text(summary)}",
            f"[launch] outputs in {run_dir}"]


def throughput_text(summary: RunSummary) -> str:
    """The medians over the steady-state steps, each with its 95% interval (from 6 steps on),
    and the step time's 90th percentile; or why there are none."""
    m = summary.metrics
    if m.tokens_per_s_per_gpu is None:
        return f"throughput null: {m.throughput_null_reason}"
    times = ((m.step_time_s_low, m.step_time_s_high) if m.step_time_s_low is not None
             else None)

    def ranged(value: float, number: Callable[[float], str]) -> str:
        """`value [low, high]`: a rate is a constant over the step time, so its interval is the
        step time's, inverted."""
        if times is None:
            return number(value)
        low, high = (value * m.step_time_s_p50 / t for t in reversed(times))
        return f"{number(value)} [{number(low)}, {number(high)}]"

    time = (f"{ms(m.step_time_s_p50)} [{ms(times[0])}, {ms(times[1])}]" if times
            else ms(m.step_time_s_p50))
    parts = [f"{time} ms/step (p90 {ms(m.step_time_s_p90)} ms)",
             f"{ranged(m.tokens_per_s_per_gpu, lambda v: f'{v:,.0f}')} tokens/s/GPU",
             f"{ranged(m.tflops_per_gpu, lambda v: f'{v:.{1 if v >= 1 else 4}f}')} TFLOP/s/GPU"]
    if summary.device != "cpu":  # a CPU has no peak: no MFU, as on the step lines
        parts.append(f"MFU {ranged(m.mfu, lambda v: f'{v:.1%}')}" if m.mfu is not None else
                     f"MFU null (no dense peak known for {summary.device})")
    steps = len(summary.steady_state_steps)
    how = ", 95% intervals" if times else "; under 6 give no interval" if steps < 6 else ""
    return f"{', '.join(parts)} (medians of {steps} steady-state step{'s' * (steps != 1)}{how})"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def peak_memory_text(summary: RunSummary) -> str:
    """A GPU: the allocator's peaks after the first step, allocated (and its share of the
    device) and reserved; a CPU: the process's peak RSS."""
    m = summary.metrics
    if m.peak_memory_allocated_bytes is None:
        return f"peak RSS {m.peak_rss_bytes / GIB:.2f} GiB"
    share = (f" ({m.peak_memory_allocated_bytes / summary.device_memory_bytes:.0%} of the GPU)"
             if summary.device_memory_bytes else "")
    return (f"peak memory {m.peak_memory_allocated_bytes / GIB:.2f} GiB allocated{share}, "
            f"{m.peak_memory_reserved_bytes / GIB:.2f} GiB reserved")


def first_group_text(summary: RunSummary) -> str:
    """The switch's setting, how often the optimizer step prefetched the first parameter group,
    and, over the steady-state steps, its all-gather and the first forward's wait for it."""
    m = summary.metrics
    switch = summary.config.get("fsdp", {}).get("prefetch_first_param_group")
    head = (f"first parameter group (fsdp.prefetch_first_param_group={str(switch).lower()}): "
            f"{m.first_group_prefetches} prefetch{'es' * (m.first_group_prefetches != 1)}")
    if m.first_group_wait_s is None:
        return f"{head}; all-gather and wait null ({m.first_group_null_reason})"
    return (f"{head}; its all-gather{gathered(m.first_group_bytes)}, issued in "
            f"{m.first_group_issued_in}, took {milliseconds(m.first_group_allgather_s)}, the "
            f"first forward waited {milliseconds(m.first_group_wait_s)} for it (medians of "
            f"{m.first_group_samples} steps)")


def gathered(num_bytes: Optional[int]) -> str:
    return f" of {size(num_bytes)}" if num_bytes else ""

