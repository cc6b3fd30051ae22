"""`launch -m` as a user runs it: a 2 x 2 tiny CPU sweep with one refused cell, its report in a
real browser, and the same command again (resumable, nothing overwritten)."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import doc_commands, read_hparams

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
DOCS_SWEEP = ".venv/bin/launch -m +recipe=sweep_tiny_cpu"
REFUSED = ("true", "full_iteration")


def launch_sweep(sweep_dir):
    """docs/sweeps.md's CPU sweep command again, into the same sweep folder."""
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(sweep_dir.parent / "home"))
    return subprocess.run([str(BIN / "launch"), *DOCS_SWEEP.split()[1:],
                           f"hydra.sweep.dir={sweep_dir}"],
                          capture_output=True, text=True, timeout=900, env=env,
                          cwd=sweep_dir.parent)


def read_csv(sweep_dir):
    with open(sweep_dir / "results.csv") as f:
        rows = list(csv.DictReader(f))
    return {(r["fsdp.prefetch_first_param_group"], r["cuda_graph.impl"]): r for r in rows}


def summaries(sweep_dir):
    """Every run's summary.json: path -> (modification time, content)."""
    return {str(p): (p.stat().st_mtime_ns, p.read_text()) for p in sweep_dir.glob("*/*/*/summary.json")}


@pytest.fixture(scope="module")
def sweep(doc_command, user_home):
    """docs/sweeps.md's CPU sweep (test_readme.py's run of it is this one): 4 cells, one refused,
    2 repeats of 12 steps, wandb offline and TensorBoard, as the sweep_tiny_cpu recipe says."""
    assert DOCS_SWEEP in doc_commands()
    proc = doc_command(DOCS_SWEEP)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = re.search(r"\[sweep\] report: .*?([^\s,]+)/report\.html", proc.stdout).group(1)
    return proc, user_home / report  # the sweep's folder, as printed (relative to the user's)


def test_tensorboard_runs_sit_in_their_cell_folders_named_by_cell_and_repeat(sweep):
    _, sweep_dir = sweep
    rows = read_csv(sweep_dir)
    expected = {(r["cell"], f"{r['label']} #{repeat}") for r in rows.values()
                if r["status"] == "ok" for repeat in (0, 1)}
    found = {(p.parents[3].name, p.name) for p in sweep_dir.glob("*/repeat*/attempt0/tb/*")}
    assert found == expected and len(found) == 6
    labels = {r["cell"]: key for key, r in rows.items()}
    for cell, name in found:  # each run in TensorBoard's HParams dashboard, with its cell's values
        repeat = name.split("#")[1]
        hparams, metrics = read_hparams(sweep_dir / cell / f"repeat{repeat}" / "attempt0" / "tb" /
                                        name)
        switch, impl = labels[cell]
        assert hparams == {"fsdp.prefetch_first_param_group": float(switch == "true"),
                           "cuda_graph.impl": impl}
        assert metrics["summary/tokens_per_s_per_gpu"] > 0


@pytest.mark.quick
def test_preflight_lists_every_cell_and_the_refused_one_with_its_reason(sweep):
    proc, _ = sweep
    plan = proc.stdout[:proc.stdout.index("refused\n") + 7]  # up to the plan's last line
    assert "4 cells x 2 repeat(s)" in plan
    assert plan.count("run 2 of 2 repeat(s)") == 3
    assert "invalid, will not run: fsdp.prefetch_first_param_group=true cannot be captured" in plan
    assert "1 refused" in plan
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.quick
def test_results_hold_every_cell(sweep):
    _, sweep_dir = sweep
    rows = read_csv(sweep_dir)
    assert set(rows) == {("true", "none"), ("false", "none"), ("false", "full_iteration"), REFUSED}
    refused = rows[REFUSED]
    assert refused["status"] == "invalid" and "set fsdp.prefetch_first_param_group=false" in \
        refused["reason"]
    assert not (sweep_dir / refused["cell"]).exists()  # never ran
    for key in set(rows) - {REFUSED}:
        row = rows[key]
        assert row["status"] == "ok" and float(row["tokens_per_s_per_gpu"]) > 0
        assert row["runs_ok"] == "2/2"
        assert row["cuda_graph_captured"] == "False"  # a CPU cannot capture
    for key in set(rows) - {REFUSED, ("true", "none")}:  # 2 pairs of runs against the baseline
        row = rows[key]
        assert float(row["speedup_ci_low"]) <= float(row["speedup"]) <= float(
            row["speedup_ci_high"]) and row["speedup_pairs"] == "2"
    assert rows[("true", "none")]["baseline"] == "True"
    assert rows[("true", "none")]["speedup"] == ""  # the baseline is not compared with itself
    # the switch pair is the baseline and its partner: the partner's speedup and the pair's
    # saving are one comparison, so they give one verdict
    on, off = rows[("true", "none")], rows[("false", "none")]
    assert on["switch_partner"] == off["label"]
    assert on["measured_saving_within_noise"] == off["within_noise"]
    assert (float(on["measured_saving_ms"]) > 0) == (float(off["speedup"]) < 1)
    assert rows[("true", "none")]["first_group_prefetches"] == "12"
    assert rows[("false", "none")]["first_group_prefetches"] == "0"
    markdown = (sweep_dir / "results.md").read_text()
    assert "ok (CUDA graph not captured: ran eagerly)" in markdown
    assert markdown.count("\n| prefetch_first_param_group=") == 4
    assert "| prefetch_first_param_group=true, impl=none (baseline) | ok | " in markdown
    baseline_row = next(line for line in markdown.splitlines() if "(baseline) |" in line)
    assert baseline_row.split(" | ")[3] == "baseline"  # its speedup column
    header = next(line for line in markdown.splitlines() if line.startswith("| cell |"))
    assert len(header.split(" | ")) <= 10, header
    # the switch moves an all-gather, not what a step computes: the pair's losses are bit-equal
    assert rows[("true", "none")]["numerics"] == "baseline"
    assert rows[("false", "none")]["numerics"] == "identical"
    assert float(rows[("false", "none")]["numerics_max_rel_diff"]) == 0.0
    # a CPU runs the graph cell eagerly through FullCudaGraphWrapper: the same steps, too
    assert rows[("false", "full_iteration")]["numerics"] == "identical"
    assert "defect" not in markdown


@pytest.mark.quick
def test_the_report_is_written_with_every_cell(sweep):
    """report.html (charts inline, the table) and report.png: the browser test, with Chromium,
    opens it; this one needs none, so the quick tier holds the report too."""
    _, sweep_dir = sweep
    html = (sweep_dir / "report.html").read_text()
    assert "<svg" in html and "prefetch_first_param_group=false, impl=full_iteration" in html
    assert (sweep_dir / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_are_grouped_and_tagged_for_wandb(sweep):
    _, sweep_dir = sweep
    row = read_csv(sweep_dir)[("false", "full_iteration")]
    run = sweep_dir / row["cell"] / "repeat0" / "attempt0"
    wandb_cfg = json.loads((run / "summary.json").read_text())["config"]["logging"]["wandb"]
    assert wandb_cfg["group"] == sweep_dir.name  # sweep.name's default: the sweep's folder
    assert wandb_cfg["tags"] == ["fsdp.prefetch_first_param_group=false",
                                 "cuda_graph.impl=full_iteration"]
    assert list(run.glob("wandb/offline-run-*/run-*.wandb"))
    # the results table, logged once at the end, in the sweep's own wandb run
    tables = list(sweep_dir.glob("wandb/offline-run-*/files/media/table/sweep/results_*.table.json"))
    assert len(tables) == 1
    table = json.loads(tables[0].read_text())
    assert len(table["data"]) == 4 and "status" in table["columns"]


def test_report_renders_in_a_real_browser(sweep, tmp_path):
    _, sweep_dir = sweep
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium not found: `make test-tools` installs Debian's chromium package")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}"]
    page = (sweep_dir / "report.html").as_uri()
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, "--window-size=1400,2400", f"--screenshot={shot}", page],
                   capture_output=True, timeout=120, check=True)
    dom = subprocess.run([*flags, "--dump-dom", page], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    from matplotlib import image

    pixels = image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1400)
    assert (pixels.std(axis=(0, 1)) > 0.05).all()  # not a blank page
    assert len(np.unique((pixels * 255).astype(int).reshape(-1, 3), axis=0)) > 50  # charts
    for row in read_csv(sweep_dir).values():
        assert f'data-cell="{row["cell"]}"' in dom  # a table row per cell
        assert row["label"] in dom
    assert dom.count("<svg") >= 1 and "tokens/s/GPU (median, 95% CI)" in dom  # axis labels
    assert "Step-time distribution per cell" in dom and "Peak memory per cell" in dom
    assert "Throughput against peak memory" in dom and "A profiled step's parts" in dom
    for row in read_csv(sweep_dir).values():  # each measured cell's trace, linked
        if row["status"] == "ok":
            assert f'<a href="{row["profile_trace"]}">' in dom


def test_each_cell_is_profiled_once_and_its_step_broken_down(sweep):
    """profile=torch (the recipe's) in a sweep: one trace per valid cell, its first repeat's;
    the other repeat runs unprofiled and keeps every steady-state step."""
    _, sweep_dir = sweep
    rows = read_csv(sweep_dir)
    for key, row in rows.items():
        traces = sorted(sweep_dir.glob(f"{row['cell']}/*/*/profile/rank0.json.gz"))
        if key == REFUSED:
            assert not traces
            continue
        assert [t.relative_to(sweep_dir).as_posix() for t in traces] == [row["profile_trace"]]
        assert row["profile_trace"] == f"{row['cell']}/repeat0/attempt0/profile/rank0.json.gz"
        steps = {r: json.loads((sweep_dir / row["cell"] / f"repeat{r}" / "attempt0" /
                                "summary.json").read_text())["steady_state_steps"] for r in (0, 1)}
        assert len(steps[1]) == len(steps[0]) + 2  # the window's 2 steps left out of repeat 0
        parts = [float(row[f"profile_{k}_ms"]) for k in ("forward_backward", "optimizer")]
        assert 0 < sum(parts) <= float(row["profile_step_ms"])


def test_same_command_again_runs_nothing_and_overwrites_no_run(sweep):
    _, sweep_dir = sweep
    before = summaries(sweep_dir)
    proc = launch_sweep(sweep_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 runs to do, 6 already ok" in proc.stdout
    assert "Launching" not in proc.stdout + proc.stderr
    assert summaries(sweep_dir) == before


def test_interrupted_run_is_reported_then_rerun_alone(sweep):
    """A run killed before its summary: launch-report says so; the same command reruns only it,
    into a new attempt directory."""
    _, sweep_dir = sweep
    cell = read_csv(sweep_dir)[("false", "none")]["cell"]
    (sweep_dir / cell / "repeat0" / "attempt0" / "summary.json").unlink()
    report = subprocess.run([str(BIN / "launch-report"), str(sweep_dir)], capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    assert read_csv(sweep_dir)[("false", "none")]["status"] == "interrupted"
    before = summaries(sweep_dir)
    proc = launch_sweep(sweep_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 runs to do, 5 already ok" in proc.stdout
    after = summaries(sweep_dir)
    assert {p: v for p, v in after.items() if p in before} == before
    assert [Path(p).parent.name for p in set(after) - set(before)] == ["attempt1"]
    assert read_csv(sweep_dir)[("false", "none")]["status"] == "ok"


def test_a_cell_refused_at_run_time_does_not_stop_the_others(tmp_path):
    """runtime.device=cuda passes pre-flight (it needs torch to check) and is refused by its job
    on a machine without CUDA; the sweep goes on and reports it with the reason."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the cuda cell would run")
    sweep_dir = tmp_path / "out"
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(tmp_path / "home"))
    proc = subprocess.run([str(BIN / "launch"), "-m", "+recipe=tiny_cpu", "train.steps=4",
                           "runtime.device=cuda,cpu", "logging.wandb.mode=disabled",
                           "logging.tensorboard.enabled=true", f"hydra.sweep.dir={sweep_dir}"],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # its run's console line says why, as the results do
    assert re.search(r"^\[sweep\] \d/\d+ .*repeat 0: invalid: runtime\.device=cuda but no CUDA "
                     r"device is visible; set runtime\.device=cpu or auto(  \[.* elapsed.*\])?$",
                     proc.stdout, re.M)
    with open(sweep_dir / "results.csv") as f:
        rows = {r["runtime.device"]: r for r in csv.DictReader(f)}
    assert rows["cuda"]["status"] == "invalid"
    assert rows["cuda"]["reason"] == ("runtime.device=cuda but no CUDA device is visible; "
                                      "set runtime.device=cpu or auto")
    assert rows["cpu"]["status"] == "ok" and rows["cpu"]["baseline"] == "True"
    # the swept key joins the HParams dashboard's columns
    [tb] = sweep_dir.glob(f"{rows['cpu']['cell']}/repeat0/attempt0/tb/*")
    assert read_hparams(tb)[0] == {"fsdp.prefetch_first_param_group": 1.0,
                                   "cuda_graph.impl": "none", "runtime.device": "cpu"}


def test_shrunk_gpt_recipe_sweeps_in_bf16_with_its_graph_cell_through_the_wrapper(tmp_path):
    """A sweep cell on the path users take: the gpt recipe (bf16), eager against full-iteration."""
    from conftest import GPT_TINY

    sweep_dir = tmp_path / "bf16"
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(tmp_path / "home"))
    proc = subprocess.run(
        [str(BIN / "launch"), "-m", *GPT_TINY, "fsdp.prefetch_first_param_group=false",
         "cuda_graph.impl=none,full_iteration", "cuda_graph.warmup_steps=1", "sweep.repeats=1",
         "logging.wandb.mode=disabled", f"hydra.sweep.dir={sweep_dir}"],
        capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with open(sweep_dir / "results.csv") as f:
        rows = {r["cuda_graph.impl"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"none", "full_iteration"}
    assert all(r["status"] == "ok" for r in rows.values())
    graph_runs = list(sweep_dir.glob(f"{rows['full_iteration']['cell']}/*/*/summary.json"))
    summary = json.loads(graph_runs[0].read_text())
    assert summary["cuda_graph_wrapper"] == "FullCudaGraphWrapper"
    assert summary["config"]["train"]["precision"] == "bf16"
    assert "ok (CUDA graph not captured: ran eagerly)" in (sweep_dir / "results.md").read_text()


@pytest.mark.quick
def test_a_sweep_prints_one_line_per_run_and_where_to_look_once(sweep):
    """docs/sweeps.md's sweep as a user sees it (wandb not silenced from outside): the plan, one
    line per run (its cell, its repeat, its result), the results, then where to look at every
    run, once. Each run's own output (Hydra's launch line with its overrides, its start line,
    its dashboards') is in its folder's console.log."""
    proc, sweep_dir = sweep
    lines = proc.stdout.splitlines()
    runs = [line for line in lines if re.match(r"\[sweep\] \d/6 ", line)]
    assert len(runs) == 6, "\n".join(lines)
    done = set()
    for number, line in enumerate(runs, start=1):
        found = re.fullmatch(rf"\[sweep\] {number}/6 (prefetch_first_param_group=(true|false), "
                             r"impl=(none|full_iteration)), repeat ([01]): ok, [\d,]+ "
                             r"tokens/s/GPU \(\d+ s\)  \[(\d+s|\d+m\d\ds) elapsed"
                             + (r", about (\d+s|\d+m\d\ds) left\]" if number < 6 else r"\]"),
                             line)
        assert found, line
        done.add((found.group(1), found.group(4)))
    assert len(done) == 6  # each cell's each repeat, once
    assert re.fullmatch(r"\[sweep\] 6 job\(s\) ran in (\d+s|\d+m\d\ds)",
                        lines[lines.index(runs[-1]) + 1])
    header = lines[lines.index(runs[-1]) + 2]  # the closing table's
    assert header.split()[:3] == ["cell", "status", "tokens/s/GPU"]
    assert "losses vs baseline" in header
    # no Hydra launch lines, no override dumps, no run's own lines, no library noise
    for noise in ("[HYDRA]", "Launching", "profile.steps=null", "logging.tensorboard.hparams",
                  "[launch]", "look at it with", "ERROR", "Warning"):
        assert noise not in proc.stdout + proc.stderr, noise
    assert not [line for line in lines if line.startswith(("step ", "wandb:"))]
    # where to look, once each, after the report's paths
    tail = lines[next(i for i, line in enumerate(lines) if line.startswith("[sweep] report: ")):]
    for what in ("`wandb sync ", "`tensorboard --logdir ", "https://ui.perfetto.dev",
                 "console.log"):
        assert sum(what in line for line in lines) == 1, what
        assert any(what in line for line in tail), what
    assert "7 offline runs" in next(line for line in tail if "`wandb sync " in line)
    assert len(lines) <= 27, f"{len(lines)} lines:\n" + "\n".join(lines)
    switch_off = next(line for line in lines
                      if line.startswith("  prefetch_first_param_group=false, impl=none "))
    assert re.match(r"\d+\.\d{3} \[", switch_off[header.index("speedup vs baseline"):])
    assert switch_off[header.index("losses vs baseline"):].startswith("identical")
    assert not any("defect" in line for line in lines)
    for log in sweep_dir.glob("*/repeat*/attempt0/console.log"):
        text = log.read_text()
        assert "[HYDRA] \t#" in text and "[launch] ok: " in text, log
        assert "ERROR" not in text and "Profiler clears events" not in text, log
    assert len(list(sweep_dir.glob("*/repeat*/attempt0/console.log"))) == 6
    assert "GPTModel IS DEPRECATED" not in proc.stdout + proc.stderr


def test_the_time_model_predicts_every_run_of_the_sweep(sweep):
    """The GPU check's prediction stage (bench/prediction.py --runs) on this CPU sweep: a row per
    finished run, predicted and measured step times side by side."""
    _, sweep_dir = sweep
    proc = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "bench" /
                                               "prediction.py"), "--runs", str(sweep_dir),
                           "--hardware", "cpu_2core"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
            if line.startswith("| ") and "repeat" in line]
    finished = [p for p in sweep_dir.glob("*/*/*/summary.json")
                if json.loads(p.read_text())["status"] == "ok"]
    assert len(rows) == len(finished) >= 6  # 3 valid cells x 2 repeats, and any rerun
    for run, predicted, measured, ratio, *_ in rows:
        assert float(predicted) > 0 and float(measured) > 0
        # the ratio is printed to two decimals: half its last digit is the rounding's part
        assert float(ratio) == pytest.approx(float(predicted) / float(measured), rel=0.02,
                                             abs=0.005)
