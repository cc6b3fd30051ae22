"""Each cell's training losses against the baseline's (launcher.sweep.numerics), read back from
hand-built summaries on disk: the labels, the switch pair's defect line, and the tuner's gate."""

import csv

import pytest
from omegaconf import OmegaConf

from launcher import summary as run_summary
from launcher.config import SweepConfig
from launcher.sweep import tuned
from launcher.sweep.console import print_results, print_tuned
from launcher.sweep.driver import write_tuned
from launcher.sweep.numerics import CLOSE_REL_DIFF, Numerics, compare_runs
from launcher.sweep.plan import Cell, Plan
from launcher.sweep.results import collect
from launcher.sweep.tables import write_tables
from launcher.sweep.switch import SWITCH

KEY = "train.micro_batch_size"
LOSSES = [10.0, 9.0, 8.0, 7.5, 7.25, 7.0]
STEP_MS = [100.0, 101.0, 99.0, 100.5, 99.5] * 4


def ok_run(losses, speed=1.0):
    """A finished run with these per-step losses (steps 1..n); `speed` scales its throughput."""
    return run_summary.RunSummary(
        metrics=run_summary.RunMetrics(peak_rss_bytes=2**30, final_loss=losses[-1]),
        config={"cuda_graph": {"impl": "none"}, "train": {"precision": "fp32"}},
        world_size=1, tokens_per_step=1000, flops_per_step=4e12, device="cpu", backend="gloo",
        steps_run=list(range(1, len(losses) + 1)), losses=list(losses),
        steady_state_step_times_s=[t / 1e3 / speed for t in STEP_MS])


def failed_run(status="oom"):
    return run_summary.RunFailure(status=status, message=f"{status} happened")


def scaled(factor, at_step=3):
    """LOSSES with every loss from `at_step` on multiplied by `factor`."""
    return [loss * (factor if step >= at_step else 1.0) for step, loss in enumerate(LOSSES, 1)]


def write_run(sweep_dir, cell, repeat, result, attempt=0):
    folder = sweep_dir / cell / f"repeat{repeat}" / f"attempt{attempt}"
    folder.mkdir(parents=True)
    run_summary.write(str(folder), result)


def make_plan(tmp_path, runs, keys=(KEY,), values=None, repeats=1, **kwargs):
    """A plan over `runs` (cell id -> one result per repeat), its first cell the baseline, every
    run written to disk by the summary's one writer."""
    values = values or {cell: {KEY: cell} for cell in runs}
    cells = [Cell(cell, ", ".join(f"{k}={v}" for k, v in values[cell].items()), values[cell],
                  [f"{k}={v}" for k, v in values[cell].items()], True, "") for cell in runs]
    plan = Plan("numerics", str(tmp_path), list(keys), repeats, 0, cells[0].id, "numerics", cells,
                **kwargs)
    for cell, results in runs.items():
        for repeat, result in enumerate(results):
            write_run(tmp_path, cell, repeat, result)
    return plan


def rows_of(plan):
    return {r["cell"]: r for r in collect(plan).rows}


def test_labels_identical_close_different_and_the_baseline(tmp_path, capsys):
    plan = make_plan(tmp_path, {"base": [ok_run(LOSSES)], "same": [ok_run(LOSSES)],
                                "near": [ok_run(scaled(1 + 3.1e-6))],
                                "far": [ok_run(scaled(1.02))]})
    results = collect(plan)
    rows = {r["cell"]: r for r in results.rows}
    assert [rows[c]["numerics"] for c in ("base", "same", "near", "far")] == [
        "baseline", "identical", "close", "different"]
    assert rows["same"]["numerics_max_rel_diff"] == 0.0
    assert rows["near"]["numerics_max_rel_diff"] == pytest.approx(3.1e-6, rel=1e-6)
    assert rows["far"]["numerics_max_rel_diff"] == pytest.approx(0.02)
    write_tables(results, plan.sweep_dir)
    with open(tmp_path / "results.csv") as f:
        table = {r["cell"]: r for r in csv.DictReader(f)}
    assert table["near"]["numerics"] == "close"
    assert float(table["near"]["numerics_max_rel_diff"]) == pytest.approx(3.1e-6, rel=1e-6)
    markdown = (tmp_path / "results.md").read_text()
    assert "| losses vs baseline |" in markdown
    assert "| close (max rel diff 3.1e-06) |" in markdown
    assert "| different (max rel diff 0.02) |" in markdown
    assert "| identical |" in markdown and "| baseline |" in markdown
    assert "defect" not in markdown  # no switch swept
    print_results(results, [])
    console = capsys.readouterr().out.splitlines()
    losses = [line[console[0].index("losses vs baseline"):] for line in console[1:5]]
    assert any(text.startswith("close (max rel diff 3.1e-06)") for text in losses)
    assert any(text.startswith("different (max rel diff 0.02)") for text in losses)
    base_line = next(line for line in console if "(baseline)" in line)
    assert base_line[console[0].index("losses vs baseline"):].strip() == ""  # not compared
    # with itself


def test_the_threshold_between_close_and_different():
    def kind(factor):
        return compare_runs([("ok", ok_run(scaled(factor)))], [("ok", ok_run(LOSSES))]).kind

    assert kind(1 + CLOSE_REL_DIFF / 2) == "close"
    assert kind(1 + 2 * CLOSE_REL_DIFF) == "different"


def test_several_repeats_each_against_the_baseline_s_same_repeat_the_worst_counts(tmp_path):
    """Repeat 0 bit-equal to the baseline's repeat 0, repeat 1 close to its repeat 1: close,
    with repeat 1's difference. The baseline's two repeats differ from each other (1e-2): only
    the same repeat is compared."""
    base = [ok_run(LOSSES), ok_run(scaled(1.01))]
    cell = [ok_run(LOSSES), ok_run(scaled(1.01 * (1 + 5e-6)))]
    rows = rows_of(make_plan(tmp_path, {"base": base, "cell": cell}, repeats=2))
    assert rows["cell"]["numerics"] == "close"
    assert rows["cell"]["numerics_max_rel_diff"] == pytest.approx(5e-6, rel=1e-3)


def test_a_failed_baseline_repeat_is_named_and_the_others_still_count(tmp_path):
    plan = make_plan(tmp_path, {"base": [ok_run(LOSSES), failed_run()],
                                "cell": [ok_run(LOSSES), ok_run(LOSSES)]}, repeats=2)
    results = collect(plan)
    cell = next(r for r in results.rows if r["cell"] == "cell")
    assert cell["numerics"] == "identical"
    assert cell["numerics_note"] == "baseline repeat 1 failed (oom)"
    write_tables(results, plan.sweep_dir)
    assert "| identical (not compared: baseline repeat 1 failed (oom)) |" in \
        (tmp_path / "results.md").read_text()


def test_nothing_to_compare_is_n_a_with_the_reason(tmp_path, capsys):
    """The baseline's only repeat failed: n/a, saying so, on the table and the console; a cell
    whose own run failed says that instead."""
    plan = make_plan(tmp_path, {"base": [failed_run()], "cell": [ok_run(LOSSES)],
                                "broken": [failed_run("error")]})
    results = collect(plan)
    rows = {r["cell"]: r for r in results.rows}
    assert rows["cell"]["numerics"] == "n/a" and rows["cell"]["numerics_max_rel_diff"] is None
    assert rows["broken"]["numerics_note"] == "repeat 0 failed (error)"
    write_tables(results, plan.sweep_dir)
    assert "| n/a (baseline repeat 0 failed (oom)) |" in (tmp_path / "results.md").read_text()
    print_results(results, [])
    console = capsys.readouterr().out.splitlines()
    at = console[0].index("losses vs baseline")
    assert any(line[at:].startswith("n/a (baseline repeat 0 failed (oom))") for line in console)
    broken = next(line for line in console if "=broken" in line)
    assert "n/a" not in broken and "error happened" in broken  # its reason says it all


def test_only_the_steps_both_runs_have_are_compared():
    """A run resumed at step 4 holds steps 4..6; they match the baseline's steps 4..6."""
    resumed = ok_run(LOSSES)
    resumed.steps_run, resumed.losses = [4, 5, 6], LOSSES[3:]
    numerics = compare_runs([("ok", resumed)], [("ok", ok_run(LOSSES))])
    assert numerics == Numerics("identical", 0.0)
    older = ok_run(LOSSES)
    older.losses = []  # a summary.json written before the launcher kept per-step losses
    numerics = compare_runs([("ok", older)], [("ok", ok_run(LOSSES))])
    assert numerics.kind == "n/a" and "no per-step losses" in numerics.note


def switch_plan(tmp_path, losses_on, losses_off):
    """A switch x cuda_graph.impl grid (the graph cells left out): the baseline with the switch
    on, its partner with it off."""
    values = {"on": {SWITCH: "true", "cuda_graph.impl": "none"},
              "off": {SWITCH: "false", "cuda_graph.impl": "none"}}
    return make_plan(tmp_path, {"on": [ok_run(losses_on)], "off": [ok_run(losses_off)]},
                     keys=(SWITCH, "cuda_graph.impl"), values=values)


def test_a_switch_pair_that_trains_differently_is_a_defect(tmp_path, capsys):
    plan = switch_plan(tmp_path, LOSSES, scaled(1 + 2e-5))
    results = collect(plan)
    line = ("defect: the switch pair (cuda_graph.impl=none) trains differently (max rel diff "
            "2e-05): the switch must not change numerics; please report it")
    assert [d.line for d in results.defects] == [line]
    write_tables(results, plan.sweep_dir)
    assert line in (tmp_path / "results.md").read_text()
    print_results(results, [])
    assert f"[sweep] {line}" in capsys.readouterr().out


def test_a_switch_pair_that_trains_identically_is_no_defect(tmp_path, capsys):
    results = collect(switch_plan(tmp_path, LOSSES, LOSSES))
    assert results.defects == []
    assert next(r for r in results.rows if r["cell"] == "off")["numerics"] == "identical"
    print_results(results, [])
    assert "defect" not in capsys.readouterr().out


def tuning_plan(tmp_path, allow=False):
    """A race of three cells, one round: `wrong` is fastest (4x) but trains differently, `right`
    is 2x and trains identically; the baseline is 1x."""
    return make_plan(tmp_path, {"base": [ok_run(LOSSES), ok_run(LOSSES)],
                                "wrong": [ok_run(scaled(1.05), 4), ok_run(scaled(1.05), 4)],
                                "right": [ok_run(LOSSES, 2), ok_run(LOSSES, 2)]},
                     repeats=2, tune=True, min_repeats=2, allow_numerics_change=allow)


def master():
    return OmegaConf.create({"hydra": {"runtime": {"choices": {"recipe": "tiny_cpu"}}}})


def test_the_tuner_refuses_the_fastest_cell_that_trains_differently(tmp_path, capsys):
    plan = tuning_plan(tmp_path)
    results = collect(plan)
    drop = results.race.dropped["wrong"]
    assert drop.round == 1 and drop.for_numerics
    assert drop.reason == ("dropped after round 1: it trains differently from the baseline (max "
                           "rel diff 0.05); sweep.allow_numerics_change=true keeps it in the race")
    chosen, _, why = tuned.choose(results)
    assert chosen["cell"] == "right"
    assert why.startswith("Refused for not training like the baseline "
                          "(sweep.allow_numerics_change=false), though faster: "
                          f"{KEY}=wrong (")
    assert "losses different (max rel diff 0.05)" in why
    text = tuned.recipe_text(results, "tiny_cpu", [])
    assert f"# Chosen: {KEY}=right. Refused for not training like the baseline" in text
    assert (f"The fastest of the others, {KEY}=right, is chosen over the baseline, which dropped "
            "after round 2: its throughput interval") in text
    assert "micro_batch_size: right" in text
    print_tuned(results, write_tuned(results, master()))
    console = capsys.readouterr().out
    assert f"[sweep] tuned: {KEY}=right. Refused for not training like the baseline" in console


def test_allow_numerics_change_lets_the_tuner_pick_it(tmp_path):
    assert SweepConfig().allow_numerics_change is False
    results = collect(tuning_plan(tmp_path, allow=True))
    assert "wrong" not in results.race.dropped
    chosen, _, why = tuned.choose(results)
    assert chosen["cell"] == "wrong" and "Refused" not in why
    assert "losses different (max rel diff 0.05)" in tuned.recipe_text(results, "tiny_cpu", [])


def test_the_tuner_keeps_the_baseline_when_no_faster_cell_trains_like_it(tmp_path, capsys):
    """Every other cell's losses are unknown (old summaries, no per-step losses): the gate
    refuses them too, and the baseline's values are kept."""
    unknown = ok_run(LOSSES, 3)
    unknown.losses = []
    plan = make_plan(tmp_path, {"base": [ok_run(LOSSES)], "fast": [unknown]}, tune=True,
                     min_repeats=1)
    results = collect(plan)
    chosen, _, why = tuned.choose(results)
    assert chosen["cell"] == "base"
    assert "losses n/a (repeat 0's summary.json holds no per-step losses" in why
    assert why.endswith("The baseline is the fastest of the others")


def test_no_recipe_when_nothing_trains_like_the_failed_baseline(tmp_path, capsys):
    plan = make_plan(tmp_path, {"base": [failed_run()], "fast": [ok_run(LOSSES, 2)]},
                     tune=True, min_repeats=1)
    results = collect(plan)
    assert tuned.write(results, "tiny_cpu", []) is None
    print_tuned(results, write_tuned(results, master()))
    console = capsys.readouterr().out
    assert "[sweep] tuned: no recipe written (Refused for not training like the baseline" in console
    assert "losses n/a (baseline repeat 0 failed (oom))" in console
    assert "fix the baseline, or set sweep.allow_numerics_change=true)" in console
