"""The report as a reader meets it, on a hand-made 2 x 2 sweep: every chart's text inside the
figure, the switch pair's speedup and saving with one verdict, and the words beside a predicted
saving the measurement does not hold (launcher.sweep.report, results, switch)."""

import pytest

from launcher import summary as run_summary
from launcher.sweep.plan import Cell, Plan
from launcher.sweep.charts import draw
from launcher.sweep.report import write_all
from launcher.sweep.results import collect
from launcher.sweep.tables import display

KEYS = ["fsdp.prefetch_first_param_group", "cuda_graph.impl"]
STEPS_MS = [100.0, 101.0, 99.0, 100.5, 99.5] * 4


def summary(scale: float, wait_ms: float, device: str):
    """A run of STEPS_MS x scale whose first forward waited `wait_ms` for the first group."""
    return run_summary.RunSummary(
        metrics=run_summary.RunMetrics(peak_rss_bytes=2**30, first_group_prefetches=5,
                                       final_loss=2.0, first_group_wait_s=wait_ms / 1e3,
                                       first_group_allgather_s=1e-3, first_group_bytes=4096,
                                       first_group_issued_in="forward"),
        config={"cuda_graph": {"impl": "none"}, "train": {"precision": "fp32"}},
        world_size=2, tokens_per_step=1000, flops_per_step=4e12, device=device, backend="gloo",
        steady_state_step_times_s=[scale * t / 1e3 for t in STEPS_MS])


def hand_made_sweep(folder, off_scale=(1.30, 1.32, 1.31), device="cpu") -> Plan:
    """prefetch on (the baseline), off, off with a graph, and the refused on-with-graph cell;
    per repeat, the off cell's steps are `off_scale` x the baseline's, in drifting rounds."""
    grid = [("on", "true", "none", True), ("on_graph", "true", "full_iteration", False),
            ("off", "false", "none", True), ("off_graph", "false", "full_iteration", True)]
    cells = [Cell(name, f"prefetch_first_param_group={on}, impl={impl}",
                  {KEYS[0]: on, KEYS[1]: impl}, [], valid, "" if valid else "cannot be captured")
             for name, on, impl, valid in grid]
    plan = Plan("demo", str(folder), KEYS, len(off_scale), 0, "on", "demo", cells)
    for repeat, (scale, drift) in enumerate(zip(off_scale, (1.0, 1.2, 0.9))):
        for cell, cell_scale, wait_ms in (("on", 1.0, 0.0), ("off", scale, 0.9),
                                          ("off_graph", 0.8, 0.9)):
            run = folder / cell / f"repeat{repeat}" / "attempt0"
            run.mkdir(parents=True)
            run_summary.write(str(run), summary(drift * cell_scale, wait_ms, device))
    return plan


def inside(box, bounds, slack: float = 0.5) -> bool:
    return (box.x0 >= bounds.x0 - slack and box.x1 <= bounds.x1 + slack
            and box.y0 >= bounds.y0 - slack and box.y1 <= bounds.y1 + slack)


def test_no_chart_text_is_clipped(tmp_path):
    """Every title, axis label, tick label, legend entry and note of report.png lies inside the
    figure: the speedup chart's two-part x label once ran off its edge."""
    figure = draw(collect(hand_made_sweep(tmp_path)))
    figure.canvas.draw()  # lays the figure out as savefig does
    renderer = figure.canvas.get_renderer()
    bounds = figure.bbox
    drawn = [(f"{ax.get_title()!r}: {name}", part) for ax in figure.axes for name, part in (
        ("title", ax.title), ("x label", ax.xaxis.label), ("y label", ax.yaxis.label),
        ("x tick labels", ax.xaxis), ("y tick labels", ax.yaxis), ("legend", ax.get_legend()),
        *(("note", text) for text in ax.texts))] + [("suptitle", figure._suptitle)]
    clipped = []
    for name, part in drawn:
        box = part and part.get_tightbbox(renderer)  # an axis: only the ticks it draws
        if box is not None and not inside(box, figure.bbox):
            clipped.append(f"{name}: {box.bounds} outside {figure.bbox.bounds}")
    assert not clipped, "\n".join(clipped)
    assert sum(part is not None and part.get_visible() for _, part in drawn) > 40
    speedup_axis = figure.axes[1].xaxis.label.get_text()
    assert speedup_axis.startswith("speedup vs baseline")  # the label that was clipped is checked


def test_a_switch_pairs_speedup_and_saving_give_one_verdict(tmp_path):
    """The baseline has prefetch on; its partner, off, is ~31% slower in every round: its
    speedup and the pair's saving are both significant, from the same pairs."""
    rows = {r["cell"]: r for r in collect(hand_made_sweep(tmp_path)).rows}
    on, off = rows["on"], rows["off"]
    assert display(on, "speedup") == "baseline" and on.get("speedup") is None
    assert off["speedup"] == pytest.approx(1 / 1.31, rel=0.01) and not off["within_noise"]
    assert on["switch_partner"] == off["label"]
    # the saving is the same ratio at the partner's step time: 100 ms x (1 - 1/1.31) ~ 31 ms
    assert on["measured_saving_ms"] == pytest.approx(100.0 * 1.31 * (1 - 1 / 1.31), rel=0.02)
    assert on["measured_saving_ms_ci_low"] > 0 and not on["measured_saving_within_noise"]
    assert display(on, "measured_saving_ms").endswith(f"vs {off['label']}")


def test_a_noisy_pair_is_within_noise_as_a_speedup_and_as_a_saving(tmp_path):
    rows = {r["cell"]: r for r in collect(hand_made_sweep(tmp_path, (0.8, 1.3, 1.05))).rows}
    on, off = rows["on"], rows["off"]
    assert off["within_noise"] and on["measured_saving_within_noise"]
    assert ", within noise" in display(off, "speedup")
    assert ", within noise" in display(on, "measured_saving_ms")


def test_a_predicted_saving_the_measurement_does_not_hold_is_explained(tmp_path):
    """Predicted 0.9 ms (the first-group wait it removes), measured ~31 ms: results.md and
    report.html say what the prediction counts and, on a CPU, what it leaves out."""
    paths = write_all(collect(hand_made_sweep(tmp_path)))
    markdown = (tmp_path / "results.md").read_text()
    assert "Predicted saving: the first-group wait without the prefetch minus" in markdown
    gap = next(line for line in markdown.splitlines()
               if "does not hold the predicted 0.9 ms" in line)
    assert gap.startswith("prefetch_first_param_group=true, impl=none vs "
                          "prefetch_first_param_group=false, impl=none: the measured saving, ")
    assert "the host's work between steps" in gap and "gloo" in gap
    assert "docs/prediction.md" in gap
    html = (tmp_path / "report.html").read_text()
    assert "does not hold the predicted 0.9 ms" in html
    assert len(paths) == 4


def test_a_predicted_saving_inside_the_measured_interval_needs_no_words(tmp_path):
    folder = tmp_path / "gpu"
    write_all(collect(hand_made_sweep(folder, (0.99, 1.02, 1.0), device="cuda")))
    markdown = (folder / "results.md").read_text()
    assert "Predicted saving:" in markdown and "does not hold the predicted" not in markdown
