"""`launch -m +recipe=sweep_first_group_cpu`: the switch against the bucket size (2 x 2, bf16, 2
ranks); the report explains each pair of cells that differ only in the switch."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

LAUNCH = str(Path(sys.executable).parent / "launch")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("first_group") / "out"
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(folder.parent / "home"))
    proc = subprocess.run([LAUNCH, "-m", "+recipe=sweep_first_group_cpu", "sweep.repeats=1",
                           "train.steps=6", "logging.wandb.mode=disabled",
                           f"hydra.sweep.dir={folder}"],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return folder


def rows(sweep_dir):
    with open(sweep_dir / "results.csv") as f:
        return {(r["fsdp.prefetch_first_param_group"], r["fsdp.bucket_size"]): r
                for r in csv.DictReader(f)}


def test_each_prefetching_cell_is_explained_against_its_partner(sweep_dir):
    table = rows(sweep_dir)
    assert set(table) == {("true", "null"), ("false", "null"), ("true", "8192"),
                          ("false", "8192")}
    for size in ("null", "8192"):
        on, off = table[("true", size)], table[("false", size)]
        assert on["status"] == off["status"] == "ok"
        assert on["first_group_issued_in"] == "start_param_sync"
        assert off["first_group_issued_in"] == "forward"
        assert on["switch_partner"] == off["label"] and off["switch_partner"] == on["label"]
        predicted = float(on["predicted_saving_ms"])
        assert predicted == pytest.approx(float(off["first_group_wait_ms"])
                                          - float(on["first_group_wait_ms"]))
        low, saving, high = (float(on[k]) for k in ("measured_saving_ms_ci_low",
                                                     "measured_saving_ms",
                                                     "measured_saving_ms_ci_high"))
        assert low <= saving <= high
        assert 0 < float(off["first_group_wait_share"]) < 1
        assert off["predicted_saving_ms"] == "" and off["measured_saving_ms"] == ""
    assert table[("true", "null")]["first_group_bytes"] == "37120"
    assert table[("true", "8192")]["first_group_bytes"] == "16384"


def test_the_report_shows_the_explanation(sweep_dir):
    markdown = (sweep_dir / "results.md").read_text()
    assert "predicted saving (ms/step)" in markdown and "measured saving (ms/step)" in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| prefetch")]
    assert sum(" vs prefetch_first_param_group=false" in line for line in rows) == 2
    assert "Predicted saving: the first-group wait without the prefetch" in markdown
    page = (sweep_dir / "report.html").read_text()
    assert "Why the switch wins or loses: predicted vs measured" in page
    assert "First parameter group&#x27;s all-gather" in page or \
        "First parameter group's all-gather" in page
