"""Which checkpoint a run resumes from, in Megatron-LM's layout (iter_NNNNNNN folders and
latest_checkpointed_iteration.txt) and an earlier launcher's (step_NNNNNNN), checked in the
launch process before any rank starts. The folders are laid out by hand as the two sides write
them; tests/distributed/test_megatron_lm_checkpoints.py resumes real ones."""

import json

import pytest

from launcher.config import CheckpointConfig, ConfigError
from launcher.preflight.resume import find_resume, saved_step

pytestmark = pytest.mark.unit

MODEL = {"hidden_size": 64, "num_layers": 2}


def checkpoint(folder, name, world_size=1, launcher=True, model=MODEL):
    path = folder / name
    path.mkdir(parents=True)
    (path / ".metadata").write_bytes(b"")
    if launcher:
        (path / "launcher.json").write_text(json.dumps(
            {"step": int(name[5:]), "format": "fsdp_dtensor", "model": model,
             "world_size": world_size}))
    return path


def resume(folder, resume="auto", world_size=1):
    return find_resume(CheckpointConfig(dir=str(folder), resume=resume), MODEL, world_size, "")


def test_auto_takes_the_one_the_tracker_names_else_the_highest(tmp_path):
    checkpoint(tmp_path, "step_0000004")  # an earlier launcher's
    checkpoint(tmp_path, "iter_0000006")
    checkpoint(tmp_path, "iter_0000008")
    assert resume(tmp_path).endswith("iter_0000008")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6")
    assert resume(tmp_path).endswith("iter_0000006")
    # the tracker's checkpoint removed since (a user going back): the highest left
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10")
    assert resume(tmp_path).endswith("iter_0000008")


def test_an_earlier_launchers_checkpoint_resumes(tmp_path):
    path = checkpoint(tmp_path, "step_0000004")
    assert resume(tmp_path) == str(path) and saved_step(str(path)) == 4


def test_a_megatron_lm_folder_resumes_by_its_tracker(tmp_path):
    """Megatron-LM's --save folder: no launcher.json (its args are checked where torch reads
    them); the step is the folder's."""
    theirs = tmp_path / "megatron_lm"
    checkpoint(theirs, "iter_0000003", launcher=False)
    (theirs / "latest_checkpointed_iteration.txt").write_text("3")
    path = resume(tmp_path / "ours", resume=str(theirs))
    assert path == str(theirs / "iter_0000003") and saved_step(path) == 3


@pytest.mark.parametrize("layout,expected", [
    (lambda f: (f / "latest_checkpointed_iteration.txt").write_text("release"),
     "holds 'release', not an iteration"),
    (lambda f: checkpoint(f, "iter_0000004", world_size=2), "was saved by 2 ranks and this run "
                                                            "has 1 rank; resume it with 2 ranks"),
    (lambda f: checkpoint(f, "iter_0000004", model=dict(MODEL, num_layers=4)),
     "holds a different model (model.num_layers=4, this run: model.num_layers=2)"),
    (lambda f: (checkpoint(f, "iter_0000004") / ".metadata").unlink(),
     "is incomplete or not a checkpoint (no .metadata)"),
])
def test_refused_in_one_line_naming_the_key(tmp_path, layout, expected):
    layout(tmp_path)
    with pytest.raises(ConfigError) as err:
        resume(tmp_path)
    message = str(err.value)
    assert message.startswith("train.checkpoint.dir: ") and expected in message
    assert "\n" not in message
