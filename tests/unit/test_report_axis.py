"""Throughput against peak memory, on hand-made values: an axis that does not magnify noise, the
memory noise the front tolerates, and the front itself (launcher.sweep.report, results)."""

import pytest

from launcher.sweep.plan import Cell, Plan
from launcher.sweep.charts import MEMORY_AXIS_SPAN, draw_memory_throughput, memory_axis
from launcher.sweep.results import Results, mark_pareto, memory_noise_mib
from launcher.sweep.tables import memory_note

KEYS = ["fsdp.prefetch_first_param_group", "cuda_graph.impl"]


def test_a_spread_of_a_fifth_of_a_percent_takes_a_sliver_of_the_axis():
    """The README's CPU sweep: 0.7426-0.7442 GiB of max RSS once filled the whole axis."""
    values = [0.7426, 0.7434, 0.7442]
    low, high = memory_axis(values)
    assert low <= min(values) and max(values) <= high
    assert high - low == pytest.approx(MEMORY_AXIS_SPAN * sum(values) / 3)  # mean +-5%
    assert (max(values) - min(values)) / (high - low) < 0.03
    assert (low + high) / 2 == pytest.approx(0.7434)  # the points in the middle


def test_a_real_trade_off_keeps_the_axis_to_the_values():
    low, high = memory_axis([40.0, 52.0, 60.0])
    assert (low, high) == pytest.approx((38.4, 61.6))  # the values and 8% of their range


def test_the_axis_never_goes_below_zero():
    low, high = memory_axis([0.0, 10.0])  # a run that measured nothing beside one of 10 GiB
    assert (low, high) == pytest.approx((0.0, 10.8))


def test_memory_noise_is_the_largest_spread_of_a_cells_runs_or_one_percent():
    # a CPU: the profiled repeat's max RSS is ~28 MiB above the other's
    assert memory_noise_mib({"a": [763.2, 734.8], "b": [761.4, 735.0]}) == pytest.approx(28.4)
    # a GPU's reserved peak, the same to the byte in every run: 1% of the median cell's peak
    assert memory_noise_mib({"a": [4096.0, 4096.0], "b": [4100.0], "c": [8000.0]}) == \
        pytest.approx(41.0)
    assert memory_noise_mib({}) == 0.0


def row(cell, tps, low, high, mib, baseline=False):
    return {"cell": cell, "label": cell, KEYS[0]: cell, KEYS[1]: "none", "baseline": baseline,
            "status": "ok", "tokens_per_s_per_gpu": tps, "tokens_per_s_per_gpu_ci_low": low,
            "tokens_per_s_per_gpu_ci_high": high, "peak_memory_mib": mib}


def tied_memory_rows():
    """The README's sweep: 761.3-763.3 MiB, runs of one cell 28 MiB apart."""
    return [row("fast", 2026.0, 1785.0, 2308.0, 763.3, baseline=True),
            row("overlapping", 1569.0, 1484.0, 2179.0, 761.4),  # interval reaches fast's
            row("slow", 1562.0, 1482.0, 1643.0, 761.3),  # 0.3% less memory, clearly slower
            row("failed", None, None, None, None)]


def test_memory_within_noise_is_a_tie_and_the_front_is_throughput_alone():
    rows = tied_memory_rows()
    mark_pareto(rows, memory_noise=28.4)
    assert [r.get("pareto") for r in rows] == [True, True, False, None]
    # without the tolerance, 0.1 MiB less memory made the clearly slower cell part of the front
    rows = tied_memory_rows()
    mark_pareto(rows, memory_noise=0.0)
    assert rows[2]["pareto"] is True


def test_memory_beyond_noise_is_a_trade_off():
    rows = [row("fast_big", 2000.0, 1950.0, 2050.0, 4096.0),
            row("slow_small", 1000.0, 950.0, 1050.0, 1024.0),
            row("slow_big", 1000.0, 950.0, 1050.0, 4000.0),  # within 41 MiB: fast_big's memory
            row("close_small", 1020.0, 900.0, 1100.0, 1030.0)]  # slow_small within noise both ways
    mark_pareto(rows, memory_noise=41.0)
    assert [r["pareto"] for r in rows] == [True, True, False, True]


def results_of(rows, noise):
    cells = [Cell(r["cell"], r["label"], {KEYS[0]: r[KEYS[0]], KEYS[1]: r[KEYS[1]]}, [], True, "")
             for r in rows]
    results = Results(Plan("axis", "/nonexistent", KEYS, 2, 0, rows[0]["cell"], "axis", cells),
                      rows, memory_noise_mib=noise)
    mark_pareto(rows, noise)
    return results


def test_the_report_says_when_memory_is_the_same_within_noise():
    tied = results_of(tied_memory_rows(), 28.4)
    assert tied.memory_within_noise
    assert memory_note(tied).startswith("Peak memory is the same within noise in every measured "
                                        "cell: 761.3 to 763.3 MiB, 2.0 MiB apart, where a cell's "
                                        "own runs move by 28.4 MiB")
    apart = results_of(tied_memory_rows(), 1.0)
    assert not apart.memory_within_noise and memory_note(apart) == ""


def test_the_chart_draws_no_front_line_through_noise_and_says_why():
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    draw_memory_throughput(ax, results_of(tied_memory_rows(), 28.4))
    assert "the same within noise in every cell: 2.0 MiB apart" in ax.get_xlabel()
    assert ax.get_xlim() == pytest.approx(memory_axis([763.3 / 1024, 761.4 / 1024,
                                                       761.3 / 1024]))
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert 3 <= len(ticks) <= 6  # readable, not crowded
    labels = [t.get_label() for t in ax.get_legend().get_texts()]
    assert not any(label.startswith("front") for label in labels)

    ax = Figure().subplots()
    draw_memory_throughput(ax, results_of(tied_memory_rows(), 1.0))
    assert "noise" not in ax.get_xlabel()
    assert any(t.get_text().startswith("front") for t in ax.get_legend().get_texts())
