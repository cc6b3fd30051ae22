"""summary.json as a typed value: what the launch process writes reads back the same, a failure
reads back as one, and docs/outputs.md lists every field the dataclasses have."""

import dataclasses
import json
from pathlib import Path

from launcher import summary
from launcher.summary import RunFailure, RunMetrics, RunSummary

ROOT = Path(__file__).resolve().parents[2]


def a_summary() -> RunSummary:
    return RunSummary(metrics=RunMetrics(tokens_per_s_per_gpu=2000.0, final_loss=4.5,
                                         first_group_prefetches=3),
                      config={"train": {"precision": "fp32"}}, backend="gloo", world_size=2,
                      steady_state_step_times_s=[0.1, 0.2], tokens_per_step=400)


def test_a_summary_reads_back_as_it_was_written_with_its_schema_version(tmp_path):
    written = a_summary()
    path = summary.write(str(tmp_path), written)
    assert json.loads(Path(path).read_text())["schema_version"] == summary.SCHEMA_VERSION
    assert summary.read(str(tmp_path)) == written
    assert written.throughput_samples() == [2000.0, 1000.0]  # 400 tokens / step time / 2 ranks


def test_a_failure_reads_back_as_one_and_a_missing_file_as_none(tmp_path):
    summary.write(str(tmp_path), RunFailure(status="nan", message="step 4: the loss is nan"))
    read = summary.read(str(tmp_path))
    assert isinstance(read, RunFailure) and read.status == "nan"
    assert summary.read(str(tmp_path / "nowhere")) is None


def test_the_outputs_page_names_every_field_of_summary_json():
    page = (ROOT / "docs" / "outputs.md").read_text()
    for kind in (RunSummary, RunMetrics, RunFailure):
        missing = [f.name for f in dataclasses.fields(kind) if f"`{f.name}`" not in page]
        assert not missing, f"docs/outputs.md does not name {kind.__name__}'s {missing}"
