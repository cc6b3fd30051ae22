"""What a sweep prints per job and at its end (launcher.sweep.console), on hand-made runs."""

import subprocess
import sys

from launcher import summary as run_summary
from launcher.sweep.console import (Progress, dashboard_lines, duration, output_to,
                                    progress_note, run_result, run_title)


def test_a_run_line_names_its_cell_its_repeat_and_its_result():
    ok = run_summary.RunSummary(config={},
                                metrics=run_summary.RunMetrics(tokens_per_s_per_gpu=2178.4))
    title = run_title(3, 6, "prefetch_first_param_group=false, impl=none", 1, 0)
    assert title + run_result(ok, 12.3, "/s/c/repeat1/attempt0/console.log") == (
        "[sweep] 3/6 prefetch_first_param_group=false, impl=none, repeat 1: ok, "
        "2,178 tokens/s/GPU (12 s)")
    assert run_title(1, 2, "impl=none", 0, 1).endswith("repeat 0 (attempt 2): ")
    assert run_result(ok, None, None) == "ok, 2,178 tokens/s/GPU"  # a Slurm round: no own time


def test_a_run_line_ends_with_the_time_so_far_and_about_how_much_is_left():
    # 3 jobs of 6 done in 48 s: 16 s a job, 3 left
    assert progress_note(3, 6, 48.0) == "  [48s elapsed, about 48s left]"
    assert progress_note(1, 6, 125.0) == "  [2m05s elapsed, about 10m25s left]"
    assert progress_note(6, 6, 3725.0) == "  [1h02m elapsed]"  # the last: nothing left
    assert [duration(s) for s in (0.4, 59.6, 60, 3599, 3600)] == [
        "0s", "1m00s", "1m00s", "59m59s", "1h00m"]


def test_progress_numbers_the_jobs_across_rounds_and_closes_with_the_total():
    clock = iter([100.0, 130.0, 160.0, 190.0, 195.0])
    progress = Progress(total=4, clock=lambda: next(clock))  # started at 100 s
    assert progress.title(0, "impl=none", 0, 0) == "[sweep] 1/4 impl=none, repeat 0: "
    assert progress.finish_one() == "  [30s elapsed, about 1m30s left]"
    assert progress.title(1, "impl=none", 1, 0).startswith("[sweep] 3/4 ")  # 2nd of a round
    assert progress.finish_one() == "  [1m00s elapsed, about 1m00s left]"
    assert progress.finish_one() == "  [1m30s elapsed, about 30s left]"
    # a tuning race that ended a job early
    assert progress.closing_line() == "[sweep] 3 of 4 planned job(s) ran in 1m35s"


def test_a_failed_run_says_why_and_where_its_log_is():
    oom = run_summary.RunFailure(status="oom", message="torch.OutOfMemoryError: CUDA out of memory")
    assert run_result(oom, 40.0, "/s/c/repeat0/attempt0/console.log") == (
        "failed (oom, 40 s): torch.OutOfMemoryError: CUDA out of memory; "
        "log: /s/c/repeat0/attempt0/console.log")
    refused = run_summary.RunFailure(status="invalid", message="runtime.device=cuda but ...")
    assert run_result(refused, 2.0, "log") == "invalid: runtime.device=cuda but ..."
    assert run_result(None, 1.0, "log").startswith("no summary.json")


JOB = """
import os, subprocess, sys
from launcher.sweep.console import output_to
print("before", flush=False)
with output_to(sys.argv[1]):
    print("from python", flush=False)
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a rank')"])
    os.write(2, b"ERROR: from a library")
print("after")
"""


def test_a_jobs_output_goes_to_its_log_with_its_ranks_and_libraries(tmp_path):
    """The sweep's process as it runs a job: its prints, its children's and what C++ writes to
    the descriptors all land in the job's log; the console has only what comes before and after."""
    log = tmp_path / "run" / "console.log"
    proc = subprocess.run([sys.executable, "-c", JOB, str(log)], capture_output=True, text=True,
                          check=True)
    assert log.read_text() == "from python\nfrom a rankERROR: from a library"
    assert (proc.stdout, proc.stderr) == ("before\nafter\n", "")


def test_where_to_look_is_said_once_for_every_run(tmp_path):
    for cell, repeat in (("c1", 0), ("c1", 1), ("c2", 0)):
        run = tmp_path / cell / f"repeat{repeat}" / "attempt0"
        (run / "wandb" / f"offline-run-2026_{cell}{repeat}").mkdir(parents=True)
        (run / "tb" / f"{cell} #{repeat}").mkdir(parents=True)
        (run / "console.log").write_text("")
    (tmp_path / "wandb" / "offline-run-results").mkdir(parents=True)
    lines = dashboard_lines(str(tmp_path), None, "g", None, traced=True)
    folder = str(tmp_path)
    assert lines[0] == (
        f"[sweep] wandb: 4 offline runs of group g (the results table's run included); send "
        f"them with `wandb sync {folder}/*/repeat*/attempt*/wandb/offline-run-* "
        f"{folder}/wandb/offline-run-*`; look at one with `wandb leet {folder}/c1/repeat0/"
        "attempt0/wandb`")
    assert lines[1].endswith(f"`tensorboard --logdir {folder}`")
    assert "https://ui.perfetto.dev" in lines[2]
    assert lines[3] == f"[sweep] each run's own output: {folder}/CELL/repeatN/attemptM/console.log"
    online = dashboard_lines(str(tmp_path / "none"), "/tb dir", "g",
                             "https://wandb.ai/e/p/groups/g", traced=False)
    assert online == ["[sweep] wandb: every run of group g, and the results table, at "
                      "https://wandb.ai/e/p/groups/g",
                      "[sweep] tensorboard: every run, side by side (its HParams tab: each "
                      "cell's values against its results); look at them with "
                      "`tensorboard --logdir '/tb dir'`"]
