"""The sweep report's charts (report.png, and the SVG inside report.html): tokens/s/GPU per cell
with 95% intervals (grouped by the second swept key when there are two, as prefetch x CUDA-graph
grids are), speedup against the baseline, step-time distributions, peak memory, the first
parameter group's all-gather per cell, per pair of cells differing only in the switch its
predicted against its measured saving (launcher.sweep.switch), throughput against peak memory
with the front marked (or, where the cells' peak memory is the same within its noise, a note that
says so), and in a profiling sweep (profile=torch) each cell's profiled step broken into its
parts. Text stays text in the SVG, so the page is searchable. matplotlib loads in draw only.
"""

import logging

from launcher.sweep.names import short_names
from launcher.sweep.results import Results, significant

OK_COLOR, BASE_COLOR, FAIL_COLOR = "#4C72B0", "#DD8452", "#C44E52"


def draw(results: Results):
    import matplotlib

    # A sweep's process logs through Hydra's console handler at INFO: matplotlib's first import
    # under a new HOME would add `[HYDRA] generated new fontManager` (its font cache) to it.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # keep labels as <text>
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(4, 2, figsize=(15, 20), constrained_layout=True)
    env = results.environment
    where = f"{env.get('device', '?')} x{env.get('world_size', '?')}" if env else "no run yet"
    figure.suptitle(f"Sweep {results.plan.name}: {where}, "
                    f"megatron-core {env.get('megatron_core_version', '?')}", fontsize=14)
    draw_throughput(axes[0][0], results)
    draw_speedup(axes[0][1], results)
    draw_step_times(axes[1][0], results)
    draw_memory(axes[1][1], results)
    draw_first_group(axes[2][0], results)
    draw_savings(axes[2][1], results)
    draw_memory_throughput(axes[3][0], results)
    draw_breakdown(axes[3][1], results)
    return figure


def tick(row: dict) -> str:
    return row["label"].replace(", ", "\n") + ("\n(baseline)" if row["baseline"] else "")


def draw_throughput(ax, results: Results) -> None:
    """Grouped bars when two keys are swept (bars: the first key, groups: the second), else one
    horizontal bar per cell. Cells without a measurement show their status in their slot."""
    keys = results.plan.keys
    if len(keys) != 2:
        return draw_throughput_bars(ax, results)
    names = short_names(keys)
    inner = list(dict.fromkeys(row[keys[0]] for row in results.rows))
    groups = list(dict.fromkeys(row[keys[1]] for row in results.rows))
    width = 0.8 / len(inner)
    colors = matplotlib_colors(len(inner))
    for g, group in enumerate(groups):
        for i, value in enumerate(inner):
            row = next((r for r in results.rows if r[keys[0]] == value and r[keys[1]] == group),
                       None)
            if row is None:
                continue
            x = g + (i - (len(inner) - 1) / 2) * width
            bar_or_status(ax, x, row, width * 0.9, colors[i])
    ax.set_xticks(range(len(groups)), [f"{names[keys[1]]}={g}" for g in groups])
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_xlabel(f"{keys[1]} (groups) x {keys[0]} (bars)")
    ax.set_ylabel("tokens/s/GPU (median, 95% CI)")
    ax.set_title("Throughput per cell (baseline hatched)")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(facecolor=c, edgecolor="black", label=f"{names[keys[0]]}={v}")
                       for c, v in zip(colors, inner)], loc="upper right", fontsize=9)
    ax.grid(axis="y", alpha=0.3)


def matplotlib_colors(n: int) -> list:
    from matplotlib import colormaps

    return [colormaps["tab10"](i % 10) for i in range(n)]


def bar_or_status(ax, x: float, row: dict, width: float, color) -> None:
    value = row.get("tokens_per_s_per_gpu")
    if value is None:
        ax.text(x, 0, f" {row['status']}", rotation=90, ha="center", va="bottom",
                color=FAIL_COLOR, fontsize=10)
        return
    err = [[value - row["tokens_per_s_per_gpu_ci_low"]],
           [row["tokens_per_s_per_gpu_ci_high"] - value]]
    ax.bar(x, value, width, yerr=err, capsize=5, color=color, edgecolor="black",
           hatch="//" if row["baseline"] else None)
    if row["baseline"]:
        ax.annotate("baseline", (x, row["tokens_per_s_per_gpu_ci_high"]), ha="center",
                    va="bottom", xytext=(0, 3), textcoords="offset points", fontsize=9)


def draw_throughput_bars(ax, results: Results) -> None:
    rows = results.rows
    for y, row in enumerate(rows):
        value = row.get("tokens_per_s_per_gpu")
        if value is None:
            ax.text(0, y, f" {row['status']}", va="center", color=FAIL_COLOR)
            continue
        err = [[value - row["tokens_per_s_per_gpu_ci_low"]],
               [row["tokens_per_s_per_gpu_ci_high"] - value]]
        ax.barh(y, value, xerr=err, capsize=5, edgecolor="black",
                color=BASE_COLOR if row["baseline"] else OK_COLOR,
                hatch="//" if row["baseline"] else None)
    ax.set_yticks(range(len(rows)), [tick(r) for r in rows], fontsize=8)
    ax.set_xlabel("tokens/s/GPU (median, 95% CI)")
    ax.set_title("Throughput per cell (baseline hatched)")
    ax.invert_yaxis()  # top to bottom in table order
    ax.grid(axis="x", alpha=0.3)


def measured(results: Results) -> list:
    return [row for row in results.rows if row.get("tokens_per_s_per_gpu") is not None]


def draw_speedup(ax, results: Results) -> None:
    rows = [r for r in measured(results) if r.get("speedup") is not None]
    ax.axvline(1.0, color=BASE_COLOR, linestyle="--", label="baseline (1.0)")
    for y, row in enumerate(rows):
        err = [[row["speedup"] - row["speedup_ci_low"]], [row["speedup_ci_high"] - row["speedup"]]]
        ax.errorbar(row["speedup"], y, xerr=err, fmt="o", capsize=6, color=OK_COLOR,
                    markerfacecolor=OK_COLOR if significant(row) else "white")
    ax.set_xscale("log")  # a ratio: 0.5 and 2 lie as far from 1; a wide interval stays readable
    ax.set_yticks(range(len(rows)), [tick(r) for r in rows], fontsize=8)
    ax.set_ylim(-0.5, max(len(rows), 1) - 0.5)
    ax.set_xlabel("speedup vs baseline (tokens/s/GPU ratio, log scale, 95% CI)\n"
                  "paired by repeat; hollow: not significant (within noise, or one pair)")
    ax.set_title("Speedup against the baseline")
    ax.invert_yaxis()  # top to bottom in table order
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    if not rows:
        ax.text(0.5, 0.5, "the baseline has no ok run", transform=ax.transAxes, ha="center")


def draw_step_times(ax, results: Results) -> None:
    rows = measured(results)
    data = [results.step_times_ms[r["cell"]] for r in rows]
    if data:
        ax.boxplot(data, tick_labels=[tick(r) for r in rows], orientation="horizontal")
        ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel("step time (ms), steady-state steps of every repeat")
    ax.set_title("Step-time distribution per cell")
    ax.invert_yaxis()  # top to bottom in table order
    ax.grid(axis="x", alpha=0.3)


def draw_memory(ax, results: Results) -> None:
    """CUDA allocator peaks, allocated beside reserved (reserved holds a CUDA graph's pool), both
    after the first step; a CPU run has neither and shows its process max RSS."""
    rows = measured(results)
    cuda = any(r.get("peak_reserved_mib") is not None for r in rows)
    bars = ([("peak_allocated_mib", "allocated", OK_COLOR), ("peak_reserved_mib", "reserved",
                                                            "#9ecae1")]
            if cuda else [("peak_rss_mib", "process max RSS (CPU)", OK_COLOR)])
    height = 0.8 / len(bars)
    for i, (key, name, color) in enumerate(bars):
        ax.barh([y + (i - (len(bars) - 1) / 2) * height for y in range(len(rows))],
                [r.get(key) or 0 for r in rows], height=height, edgecolor="black",
                color=color, label=name)
    ax.set_yticks(range(len(rows)), [tick(r) for r in rows], fontsize=8)
    ax.set_xlabel("peak memory (MiB), after the first step" if cuda else "peak memory (MiB)")
    ax.set_title("Peak memory per cell")
    ax.legend(fontsize=8, loc="lower right")
    ax.invert_yaxis()  # top to bottom in table order
    ax.grid(axis="x", alpha=0.3)


MEMORY_AXIS_SPAN = 0.10
"""The memory axis of throughput against peak memory spans at least this share of the cells'
mean peak (their mean +-5%), so that a difference of 0.2% takes 2% of its width, not all of it,
while a real trade-off (tens of percent) still spreads over the axis."""


def memory_axis(values: list) -> tuple:
    """The memory axis' limits: the values with a margin; where they spread less than
    MEMORY_AXIS_SPAN of their mean, that span about their middle. Never below zero."""
    low, high = min(values), max(values)
    margin = 0.08 * (high - low)
    low, high = low - margin, high + margin
    span = MEMORY_AXIS_SPAN * abs(sum(values) / len(values))
    if high - low < span:
        middle = (low + high) / 2
        low, high = middle - span / 2, middle + span / 2
    return max(low, 0.0), high


def draw_memory_throughput(ax, results: Results) -> None:
    """Throughput against peak memory, a point per cell with its 95% interval; the front (no cell
    clearly faster with no more memory, or with clearly less memory and not clearly slower:
    results.mark_pareto) filled and joined; sweep.memory_limit_gib as a line. Where the cells'
    peak memory is the same within its noise, the chart says so and draws no front line."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    rows = sorted(measured(results), key=lambda r: r["peak_memory_mib"])
    keys = results.plan.keys
    cuda = any(r.get("peak_reserved_mib") is not None for r in rows)
    same = results.memory_within_noise
    by_speed = sorted(rows, key=lambda r: r["tokens_per_s_per_gpu"])
    for row in rows:
        value = row["tokens_per_s_per_gpu"]
        err = [[value - row["tokens_per_s_per_gpu_ci_low"]],
               [row["tokens_per_s_per_gpu_ci_high"] - value]]
        ax.errorbar(row["peak_memory_mib"] / 1024, value, yerr=err, fmt="o", capsize=5,
                    color=BASE_COLOR if row["baseline"] else OK_COLOR,
                    markerfacecolor=OK_COLOR if row["pareto"] else "white")
        # alternate sides by speed: cells at about the same memory do not write over each other
        left = by_speed.index(row) % 2 == 1
        ax.annotate(", ".join(row[k] for k in keys) + (" (baseline)" if row["baseline"] else ""),
                    (row["peak_memory_mib"] / 1024, value), xytext=(-6 if left else 6, 4),
                    ha="right" if left else "left", textcoords="offset points", fontsize=8)
    front = [r for r in rows if r["pareto"]]
    if front and not same:
        ax.step([r["peak_memory_mib"] / 1024 for r in front],
                [r["tokens_per_s_per_gpu"] for r in front], where="post", color=OK_COLOR,
                alpha=0.5, label="front: no cell clearly faster with no more memory")
    if front:
        ax.plot([], [], "o", color=OK_COLOR, label="filled: on the front (results' pareto)")
    limit = results.plan.memory_limit_gib
    if limit is not None:
        ax.axvline(limit, color=FAIL_COLOR, linestyle="--",
                   label=f"sweep.memory_limit_gib={limit:g}")
    if rows:
        ax.set_xlim(*memory_axis([r["peak_memory_mib"] / 1024 for r in rows]
                                 + ([limit] if limit is not None else [])))
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    ax.xaxis.set_major_formatter(ScalarFormatter(useOffset=False))  # 0.74, not 1e-3 + 7.4e-1
    note = ""
    if same:  # under the axis, where no point or interval can hide it
        peaks = [r["peak_memory_mib"] for r in rows]
        note = (f"\nthe same within noise in every cell: {max(peaks) - min(peaks):.1f} MiB apart, "
                f"a cell's own runs {results.memory_noise_mib:.1f} MiB;\nno memory trade-off: "
                "the front is the cells no other is clearly faster than")
    ax.set_xlabel("peak memory (GiB): " + ("reserved by the CUDA allocator" if cuda
                                           else "process max RSS (CPU)") + ", rank 0" + note)
    ax.set_ylabel("tokens/s/GPU (median, 95% CI)")
    names = short_names(keys)
    ax.set_title("Throughput against peak memory (points: "
                 + ", ".join(names[k] for k in keys) + ")")
    ax.grid(alpha=0.3)
    legend_or_note(ax, bool(rows), "no cell was measured")


BREAKDOWN = (("forward_backward", "forward/backward (less the wait)", OK_COLOR),
             ("first_group_wait", "first-group wait (exposed)", FAIL_COLOR),
             ("optimizer", "optimizer", "#9ecae1"), ("other", "rest of the step", "#dddddd"))


def draw_breakdown(ax, results: Results) -> None:
    """Per profiled cell, its profiled steps' parts (medians, ms) stacked: forward/backward
    without the first-group wait, the wait, the optimizer, and the rest of the step."""
    rows = [r for r in results.rows if r.get("profile_step_ms") is not None]
    for y, row in enumerate(rows):
        wait = row.get("profile_first_group_wait_ms") or 0.0
        fb = row.get("profile_forward_backward_ms") or 0.0
        opt = row.get("profile_optimizer_ms") or 0.0
        parts = {"forward_backward": max(fb - wait, 0.0), "first_group_wait": wait,
                 "optimizer": opt, "other": max(row["profile_step_ms"] - fb - opt, 0.0)}
        left = 0.0
        for key, name, color in BREAKDOWN:
            ax.barh(y, parts[key], left=left, color=color, edgecolor="black",
                    label=name if y == 0 else None)
            left += parts[key]
    ax.set_yticks(range(len(rows)), [tick(r) for r in rows], fontsize=8)
    ax.set_xlabel("ms per profiled step (median over the profiling window)")
    ax.set_title("A profiled step's parts (profile=torch)")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    legend_or_note(ax, bool(rows), "no cell was profiled (sweep with profile=torch)")


def draw_first_group(ax, results: Results) -> None:
    """Per cell: the first group's all-gather (issue to completion) and the part of it the first
    forward waited for."""
    rows = [r for r in measured(results) if r.get("first_group_allgather_ms") is not None]
    height = 0.4
    for i, (key, name, color) in enumerate((("first_group_allgather_ms", "all-gather", "#9ecae1"),
                                            ("first_group_wait_ms", "forward waited", OK_COLOR))):
        ax.barh([y + (i - 0.5) * height for y in range(len(rows))], [r[key] for r in rows],
                height=height, edgecolor="black", color=color, label=name)
    ax.set_yticks(range(len(rows)), [f"{tick(r)}\n(issued in {r['first_group_issued_in']})"
                                     for r in rows], fontsize=8)
    ax.set_xlabel("ms per step (median over steady-state steps and repeats)")
    ax.set_title("First parameter group's all-gather, and the forward's wait for it")
    ax.legend(fontsize=8, loc="lower right")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    if not rows:
        ax.text(0.5, 0.5, "no cell measured the first group", transform=ax.transAxes,
                ha="center")


def draw_savings(ax, results: Results) -> None:
    """Per pair differing only in the switch: the saving the first-group wait predicts beside
    the step-time saving measured (95% CI)."""
    rows = [r for r in results.rows if r.get("measured_saving_ms") is not None]
    for y, row in enumerate(rows):
        err = [[row["measured_saving_ms"] - row["measured_saving_ms_ci_low"]],
               [row["measured_saving_ms_ci_high"] - row["measured_saving_ms"]]]
        clear = not (row["measured_saving_within_noise"]
                     or row["measured_saving_step_noise_only"])
        ax.errorbar(row["measured_saving_ms"], y, xerr=err, fmt="o", capsize=6, color=OK_COLOR,
                    markerfacecolor=OK_COLOR if clear else "white",
                    label="measured (step time; hollow: not significant)" if y == 0 else None)
        if row.get("predicted_saving_ms") is not None:
            ax.plot(row["predicted_saving_ms"], y, "D", color=BASE_COLOR,
                    label="predicted (first-group wait)" if y == 0 else None)
    ax.axvline(0.0, color="gray", linestyle="--")
    ax.set_yticks(range(len(rows)), [f"{r['label']}\nvs {r['switch_partner']}" for r in rows],
                  fontsize=8)
    ax.set_ylim(-0.5, max(len(rows), 1) - 0.5)
    ax.set_xlabel("saving of prefetching the first group (ms per step; > 0: prefetch faster)\n"
                  "measured: paired by repeat, 95% CI, at the partner's step time")
    ax.set_title("Why the switch wins or loses: predicted vs measured")
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    legend_or_note(ax, bool(rows),
                   "no measured pair differs only in\nfsdp.prefetch_first_param_group")


def legend_or_note(ax, drawn: bool, note: str) -> None:
    """A panel's legend; where it drew nothing, why."""
    if drawn:
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center")
