"""torch's gloo status race (launcher/run/gloo.py, docs/crashes.md): the minimal reproducer kills
a process with torch's default gloo groups within seconds, and survives with the launcher's."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_worker_per_gloo_group_survives_the_race_that_kills_torchs_default():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gloo_race.py"), "--trials", "1",
                           "--iterations", "40000", "--timeout", "120"],
                          capture_output=True, text=True, timeout=300)
    torch_line, launcher_line = proc.stdout.splitlines()
    assert launcher_line.startswith("launcher.run.gloo (1 worker per group): 0 of 1 trials died")
    assert proc.returncode == 0, proc.stdout
    # the reproducer still reproduces; if a torch release fixed the race, this says so, and
    # launcher/run/gloo.py can go
    assert "1 of 1 trials died" in torch_line, torch_line
