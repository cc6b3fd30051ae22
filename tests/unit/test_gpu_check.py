"""The GPU check's own logic, on any machine, installing nothing: every stage runs whatever
failed before it, a stage that needs a failed one is skipped with the reason, the report stage
runs anyway, a timeout ends the stage's whole process group, and the verdict is all-or-nothing."""

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
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
