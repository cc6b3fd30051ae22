"""The GPU check's own logic, on any machine, installing nothing: every stage runs whatever
failed before it, a stage that needs a failed one is skipped with the reason, the report stage
runs anyway, a timeout ends the stage's whole process group, and the verdict is all-or-nothing."""

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "gpu" / "check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)
Stage = gpu_check.Stage


def py(code):
    return [sys.executable, "-c", code]


def test_every_stage_runs_and_reports_whatever_fails(capsys):
    stages = [Stage("imports", py("print('found')"), 10),
              Stage("gpu_tests", py("raise SystemExit(3)"), 10, ["imports"]),
              Stage("sweep", py("print('swept')"), 10, ["imports"]),
              Stage("needs_tests", py("print('never')"), 10, ["gpu_tests"]),
              Stage("report", py("print('reported')"), 10, ["needs_tests"], always=True)]
    assert gpu_check.run_stages(stages, {}) is False
    status = {s.name: s.status for s in stages}
    assert status == {"imports": "ok", "gpu_tests": "failed (exit 3)", "sweep": "ok",
                      "needs_tests": "skipped (needs gpu_tests)", "report": "ok"}
    printed = capsys.readouterr().out
    assert "[gpu_check] gpu_tests: failed (exit 3)" in printed and "reported" in printed
    assert "never" not in printed


def test_all_passed_is_true_only_when_every_stage_passed():
    assert gpu_check.run_stages([Stage("a", py("pass"), 10), Stage("b", py("pass"), 10, ["a"])],
                                {}) is True


def test_a_timeout_ends_the_stage_and_its_children(tmp_path):
    marker = tmp_path / "child-still-ran"
    child = f"import time; time.sleep(3); open({str(marker)!r}, 'w').write('x')"
    parent = ("import subprocess, sys, time; "
              f"subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(30)")
    stage = Stage("sweep", py(parent), 1)
    start = time.monotonic()
    gpu_check.run_stages([stage], {})
    assert stage.status == "timeout (after 1 s)" and time.monotonic() - start < 10
    time.sleep(4)
    assert not marker.exists()  # the grandchild was in the killed process group


def test_a_missing_command_is_a_failed_stage():
    stage = Stage("venv", ["/nonexistent/python3.12"], 10)
    assert gpu_check.run_stages([stage], {}) is False
    assert stage.status.startswith("failed (No such file or directory")


def found(**keys):
    """An imports stage that finds `keys` (the machine's stack, as PROBE prints it)."""
    return Stage("imports", py(f"import json; print(json.dumps({keys!r}))"), 10)


def test_the_fp8_cell_is_skipped_saying_why_where_transformer_engine_is_absent(capsys):
    fp8 = Stage("fp8", py("print('trained in fp8')"), 10, ["imports"],
                requires=[("gpu", "no GPU here"), ("transformer_engine", "no TE here")])
    assert gpu_check.run_stages([found(gpu="NVIDIA H200", transformer_engine=False), fp8],
                                {}) is True  # an optional tier: its skip fails nothing
    assert fp8.status == "skipped (no TE here)"
    assert "[gpu_check] fp8: skipped (no TE here)" in capsys.readouterr().out
    fp8.status = "pending"
    gpu_check.run_stages([found(gpu=None, transformer_engine=True), fp8], {})
    assert fp8.status == "skipped (no GPU here)"
    gpu_check.run_stages([found(gpu="NVIDIA H200", transformer_engine=True), fp8], {})
    assert fp8.status == "ok" and "trained in fp8" in fp8.output


def test_the_check_runs_one_fp8_cell_where_transformer_engine_is(tmp_path):
    args = gpu_check.argparse.Namespace(rehearse=False, cpu=False, cpu_steps=8,
                                        tests_timeout=150, sweep_timeout=150,
                                        anchors_timeout=135, fusions_timeout=60, fp8_timeout=60)
    stages = gpu_check.check_stages(args, "python3", tmp_path, tmp_path, [])
    fp8 = next(s for s in stages if s.name == "fp8")
    assert fp8.command[1:3] == [*gpu_check.GPU_CELL, "train.fp8.format=hybrid"]
    assert [key for key, _ in fp8.requires] == ["gpu", "transformer_engine"]


def test_the_fp8_line_compares_the_cell_with_the_anchors_bf16_run(tmp_path):
    (tmp_path / "anchors").mkdir()
    (tmp_path / "fp8").mkdir()
    (tmp_path / "anchors" / "anchors.json").write_text(
        '{"runs": {"launch": {"tokens_per_s_per_gpu": 1000.0, "mfu": 0.4}}}')
    (tmp_path / "fp8" / "summary.json").write_text(
        '{"metrics": {"tokens_per_s_per_gpu": 1500.0, "mfu": 0.3}}')
    assert gpu_check.fp8_pair(tmp_path) == (
        "[gpu_check] fp8 (hybrid, delayed): 1500 tokens/s/GPU, MFU 30.0% of the fp8 peak; bf16 "
        "(the anchors' launch run) 1000, MFU 40.0% of the bf16 peak: fp8/bf16 1.500")
