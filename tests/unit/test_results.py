"""A sweep's results read back from disk: statuses, failure classes, speedups, the tables."""

import csv
import math

import pytest

from launcher import summary as run_summary
from launcher.run.failures import classify_failure, excerpt
from launcher.sweep.results import collect, significant
from launcher.sweep.tables import display, write_tables
from launcher.sweep.plan import Cell, Plan

KEYS = ["fsdp.prefetch_first_param_group"]


def summary(step_ms, status="ok", reserved_mib=4):
    """A run's result, hand-built as the typed value its rank returns (launcher.summary)."""
    if status != "ok":
        return run_summary.RunFailure(status=status, message=f"{status} happened",
                                      log_excerpt="last lines")
    return run_summary.RunSummary(
        metrics=run_summary.RunMetrics(peak_memory_allocated_bytes=3 * 2**20,
                                       peak_memory_reserved_bytes=reserved_mib * 2**20,
                                       peak_rss_bytes=2**30, first_group_prefetches=5,
                                       final_loss=2.0),
        config={"cuda_graph": {"impl": "none"}, "train": {"precision": "fp32"}},
        world_size=2, tokens_per_step=1000, flops_per_step=4e12, device="cpu", backend="gloo",
        steady_state_step_times_s=[t / 1e3 for t in step_ms])


def write_run(sweep_dir, cell, repeat, attempt, result):
    """The run's folder, and its summary.json written by the one writer (none: a run that left
    no summary)."""
    folder = sweep_dir / cell / f"repeat{repeat}" / f"attempt{attempt}"
    folder.mkdir(parents=True)
    if result is not None:
        run_summary.write(str(folder), result)


@pytest.fixture
def sweep(tmp_path):
    cells = [Cell(name, f"prefetch={value}", {KEYS[0]: value}, [], valid, reason)
             for name, value, valid, reason in [
                 ("base", "true", True, ""), ("fast", "false", True, ""),
                 ("oomcell", "a", True, ""), ("halfway", "b", True, ""),
                 ("refused", "c", False, "fsdp.x=1 cannot ...; set fsdp.x=0")]]
    plan = Plan("demo", str(tmp_path), KEYS, 2, 0, "base", "demo", cells)
    steps = [100.0, 101.0, 99.0, 100.5, 99.5] * 4
    for repeat, fast in enumerate((2.0, 1.98)):  # twice as fast, give or take a pair's noise
        write_run(tmp_path, "base", repeat, 0, summary(steps))
        write_run(tmp_path, "fast", repeat, 0, summary([t / fast for t in steps]))
    write_run(tmp_path, "oomcell", 0, 0, summary(steps))
    write_run(tmp_path, "oomcell", 1, 0, summary(None, status="oom"))
    write_run(tmp_path, "halfway", 0, 0, summary(None, status="error"))  # failed, then retried:
    write_run(tmp_path, "halfway", 0, 1, summary(steps))
    write_run(tmp_path, "halfway", 1, 0, None)  # started, killed before its summary
    return plan


def test_rows_say_what_happened_to_every_cell(sweep):
    rows = {r["cell"]: r for r in collect(sweep).rows}
    assert {c: r["status"] for c, r in rows.items()} == {
        "base": "ok", "fast": "ok", "oomcell": "oom", "halfway": "interrupted", "refused": "invalid"}
    assert rows["oomcell"]["reason"] == "oom happened"
    assert rows["oomcell"]["log_excerpt"] == "last lines"
    assert rows["oomcell"]["runs_ok"] == "1/2" and rows["halfway"]["runs_ok"] == "1/2"
    assert rows["refused"]["reason"].endswith("set fsdp.x=0")
    assert "attempt1" in rows["halfway"]["run_dirs"]  # the ok retry is the one that counts


def test_throughput_and_speedup_against_the_baseline(sweep):
    rows = {r["cell"]: r for r in collect(sweep).rows}
    base, fast = rows["base"], rows["fast"]
    # 1000 tokens per step over 2 ranks at a median of 100 ms: 5000 tokens/s/GPU.
    assert base["tokens_per_s_per_gpu"] == pytest.approx(5000)
    assert base["step_time_ms_p50"] == pytest.approx(100)
    assert base["tflops_per_gpu"] == pytest.approx(4e12 / 0.1 / 2 / 1e12)
    assert base["mfu"] is None and base["peak_allocated_mib"] == 3
    assert base["peak_reserved_mib"] == 4 and base["peak_rss_mib"] == 1024
    assert base.get("speedup") is None  # the baseline is not compared with itself
    assert display(base, "speedup") == "baseline"
    # paired by repeat: ratios 2.0 and 1.98, their geometric mean, Student's t with 1 degree of
    # freedom over the two log ratios (half-width 12.706 x 0.00711 / sqrt 2 = 0.0639)
    assert fast["speedup"] == pytest.approx((2.0 * 1.98) ** 0.5)
    assert fast["speedup_ci_low"] == pytest.approx(fast["speedup"] * math.exp(-0.0639), rel=1e-3)
    assert fast["speedup_ci_high"] == pytest.approx(fast["speedup"] * math.exp(0.0639), rel=1e-3)
    assert fast["speedup_pairs"] == 2 and not fast["within_noise"]


def test_tables_hold_every_cell_with_its_swept_value(sweep):
    results = collect(sweep)
    write_tables(results, sweep.sweep_dir)
    with open(f"{sweep.sweep_dir}/results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["cell"] for r in rows] == ["base", "fast", "oomcell", "halfway", "refused"]
    assert [r[KEYS[0]] for r in rows] == ["true", "false", "a", "b", "c"]
    markdown = open(f"{sweep.sweep_dir}/results.md").read()
    assert "prefetch=true (baseline)" in markdown and "| invalid |" in markdown
    assert "| 1.990 [1.867, 2.121] |" in markdown  # the fast cell's speedup
    header = next(line for line in markdown.splitlines() if line.startswith("| cell |"))
    assert header.count("|") - 1 <= 10  # the columns a person reads; results.csv has the rest
    with open(f"{sweep.sweep_dir}/results.csv") as f:
        assert {"speedup_ci_low", "peak_rss_mib", "first_group_wait_ms", "pareto"} <= set(
            csv.DictReader(f).fieldnames)


@pytest.mark.parametrize("exitcode,text,status", [
    (-9, "", "rank_died"),
    (1, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "oom"),
    (1, "RuntimeError: operation not permitted when stream is capturing", "cuda_graph_capture_error"),
    (1, "FloatingPointError: loss is non-finite at step 3", "nan"),
    (1, "torch.distributed.DistBackendError: Watchdog caught collective operation timeout", "timeout"),
    (1, "ValueError: something else", "error"),
    (1, 'Traceback (most recent call last):\n  File "x.py", line 1, in timeout_after\n'
        '    wait_timeout()\nTypeError: alltoall_base(): incompatible function arguments.\n'
        '    2. (output_split_sizes: list, timeout: datetime.timedelta | None = None)', "error"),
    (1, 'Traceback (most recent call last):\n  File "gloo.py", line 9, in recv\n'
        'RuntimeError: [gloo] Timed out waiting 600000ms for recv operation', "timeout"),
])
def test_failures_are_classified(exitcode, text, status):
    assert classify_failure(exitcode, text) == status


def test_excerpt_keeps_the_last_lines():
    text = "\n".join(f"line {i}" for i in range(20))
    assert excerpt(text, max_lines=3) == "line 17\nline 18\nline 19"


def test_one_run_per_cell_is_step_noise_only_and_never_significant(tmp_path, capsys):
    """The issue's case: one repeat per cell, the load changed between runs; the bootstrap sees
    only step noise, so a 2x speedup with a narrow interval is shown but not marked significant,
    in results.md, on the console and in the report."""
    from launcher.sweep.console import print_results

    cells = [Cell(name, f"prefetch={value}", {KEYS[0]: value}, [], True, "")
             for name, value in [("base", "true"), ("fast", "false")]]
    plan = Plan("one", str(tmp_path), KEYS, 1, 0, "base", "one", cells)
    steps = [100.0, 101.0, 99.0, 100.5, 99.5] * 4
    write_run(tmp_path, "base", 0, 0, summary(steps))
    write_run(tmp_path, "fast", 0, 0, summary([t / 2 for t in steps]))
    results = collect(plan)
    fast = next(r for r in results.rows if r["cell"] == "fast")
    assert fast["speedup"] == pytest.approx(2.0, rel=0.01) and not fast["within_noise"]
    assert fast["step_noise_only"] and not significant(fast)
    write_tables(results, plan.sweep_dir)
    markdown = open(f"{plan.sweep_dir}/results.md").read()
    assert "step noise only (1 run), not significant" in markdown
    assert "Set sweep.repeats=2 or more" in markdown
    print_results(results, [])
    console = capsys.readouterr().out.splitlines()
    assert console[0].split() == ["cell", "status", "tokens/s/GPU", "speedup", "vs", "baseline",
                                  "[95%", "CI]", "losses", "vs", "baseline", "note"]
    fast_line = next(line for line in console if line.startswith("  prefetch=false"))
    assert " 2.000 [" in fast_line and "step noise only (1 run), not significant" in fast_line
    # the speedup column starts where its header does
    assert fast_line.index(" 2.000 [") + 1 == console[0].index("speedup vs baseline")


def test_two_runs_per_cell_can_be_significant(sweep):
    """Two ok runs on both sides: significant; a cell with one ok run of two (oomcell) is not."""
    rows = {r["cell"]: r for r in collect(sweep).rows}
    assert not rows["fast"]["step_noise_only"] and significant(rows["fast"])
    assert rows["oomcell"]["step_noise_only"] and not significant(rows["oomcell"])
    assert "step noise" not in display(rows["fast"], "speedup")


STEPS = [100.0, 101.0, 99.0, 100.5, 99.5] * 4


def test_the_throughput_memory_front(tmp_path):
    """A cell on the front: no other is at least as fast with at most its memory. `big` is
    fastest (on it), `small` uses least (on it), `worse` is slower than `small` with more memory."""
    cells = [Cell(name, name, {KEYS[0]: name}, [], True, "") for name in ("small", "big", "worse")]
    plan = Plan("front", str(tmp_path), KEYS, 2, 0, "small", "front", cells)
    for repeat in range(2):
        write_run(tmp_path, "small", repeat, 0, summary(STEPS, reserved_mib=1024))
        write_run(tmp_path, "big", repeat, 0, summary([t / 2 for t in STEPS], reserved_mib=4096))
        write_run(tmp_path, "worse", repeat, 0, summary([t * 2 for t in STEPS],
                                                        reserved_mib=2048))
    rows = {r["cell"]: r for r in collect(plan).rows}
    assert {c: r["pareto"] for c, r in rows.items()} == {"small": True, "big": True,
                                                        "worse": False}
    assert rows["big"]["peak_memory_mib"] == 4096  # reserved on a GPU


def test_the_tuner_drops_cells_above_the_memory_limit_and_says_so(tmp_path):
    """sweep.memory_limit_gib=2: the fastest cell reserved 4 GiB, so it leaves the race after
    its first run; the tuned recipe keeps the cell that fits and states the limit."""
    from launcher.sweep import tuned

    cells = [Cell(name, name, {KEYS[0]: name}, [f"{KEYS[0]}={name}", "profile=torch"], True, "")
             for name in ("fits", "big")]
    plan = Plan("cap", str(tmp_path), KEYS, 2, 0, "fits", "cap", cells, tune=True,
                min_repeats=2, memory_limit_gib=2)
    for repeat in range(2):
        write_run(tmp_path, "fits", repeat, 0, summary(STEPS, reserved_mib=1024))
    write_run(tmp_path, "big", 0, 0, summary([t / 2 for t in STEPS], reserved_mib=4096))
    results = collect(plan)
    assert results.race.dropped["big"].reason == (
        "dropped after round 1: its peak memory 4 GiB is above sweep.memory_limit_gib=2")
    assert results.race.ended == "one cell left after round 1"
    rows = {r["cell"]: r for r in results.rows}
    assert rows["big"]["runs_ok"] == "1/1" and rows["big"]["pareto"]  # measured, shown
    text = tuned.recipe_text(results, "tiny_cpu", [])
    assert "# Chosen: fits." in text and "big: 1/1 runs ok" in text
    assert "# Memory limit: sweep.memory_limit_gib=2 (peak reserved on a GPU, max RSS on a " \
           "CPU); cells above it left the race." in text
    assert "prefetch_first_param_group: fits" in text
    assert "profile" not in text.split("defaults:")[1]  # how it was watched, not what it measured


def test_the_tuned_recipe_leaves_out_what_has_no_effect_in_the_chosen_cell(tmp_path):
    """A sweep of cuda_graph.impl=none,full_iteration with cuda_graph.warmup_steps=1 fixed: the
    none cell wins, and its recipe, run alone, would be refused for the warmup it never uses."""
    from launcher.sweep import tuned

    keys = ["cuda_graph.impl"]
    cells = [Cell(impl, f"impl={impl}", {keys[0]: impl},
                  [f"cuda_graph.impl={impl}", "cuda_graph.warmup_steps=1", "train.lr=0.002"],
                  True, "") for impl in ("none", "full_iteration")]
    plan = Plan("graphs", str(tmp_path), keys, 2, 0, "full_iteration", "graphs", cells,
                tune=True, allow_numerics_change=True)  # these hand-made runs hold no losses
    for repeat in range(2):
        fast, slow = summary([t / 2 for t in STEPS]), summary(STEPS)
        fast.config = {"cuda_graph": {"impl": "none", "warmup_steps": 1},
                       "train": {"precision": "fp32"}}
        slow.config = {"cuda_graph": {"impl": "full_iteration", "warmup_steps": 1},
                       "fsdp": {"prefetch_first_param_group": False},
                       "train": {"precision": "fp32"}}
        write_run(tmp_path, "none", repeat, 0, fast)
        write_run(tmp_path, "full_iteration", repeat, 0, slow)
    text = tuned.recipe_text(collect(plan), "tiny_cpu", [])
    assert "# Chosen: impl=none." in text
    assert ("# Left out: cuda_graph.warmup_steps=1, which has no effect with "
            "cuda_graph.impl=none") in text
    recipe = text.split("defaults:")[1]
    assert "warmup_steps" not in recipe and "impl: none" in recipe and "lr: 0.002" in recipe


def test_a_baseline_the_race_dropped_is_not_kept(tmp_path):
    """The race drops the baseline after round 2 (its interval wholly below the fast cell's),
    though the two pairs' ratios (2.0, 1.2) are too far apart for a t interval over two pairs to
    exclude 1.0: the recipe takes the fast cell, as the race decided, and says why."""
    from launcher.sweep import tuned

    cells = [Cell(name, name, {KEYS[0]: name}, [f"{KEYS[0]}={name}"], True, "")
             for name in ("base", "fast")]
    plan = Plan("race", str(tmp_path), KEYS, 3, 0, "base", "race", cells, tune=True,
                min_repeats=2, allow_numerics_change=True)  # hand-made runs hold no losses
    for repeat, speedup in enumerate((2.0, 1.2)):
        write_run(tmp_path, "base", repeat, 0, summary(STEPS))
        write_run(tmp_path, "fast", repeat, 0, summary([t / speedup for t in STEPS]))
    results = collect(plan)
    assert results.race.dropped["base"].reason.startswith("dropped after round 2")
    rows = {r["cell"]: r for r in results.rows}
    assert rows["fast"]["within_noise"]  # the paired test alone would keep the baseline
    chosen, _, why = tuned.choose(results)
    assert chosen["cell"] == "fast"
    assert why.startswith("The fastest cell, fast, is chosen over the baseline, which dropped "
                          "after round 2: its throughput interval [4,975, 5,025] tokens/s/GPU "
                          "lies wholly below the best cell's")
    assert why.endswith("(speedup 1.549 [0.060, 39.766], within noise)")
    assert "# Chosen: fast." in tuned.recipe_text(results, "tiny_cpu", [])
