"""SIGKILL a run mid-training, run the same command again: it resumes from its newest complete
checkpoint and its loss curve is the uninterrupted run's, bit for bit (on 1 and 2 ranks)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import GPT_TINY

pytestmark = pytest.mark.distributed

LAUNCH = str(Path(sys.executable).parent / "launch")


RECIPES = {"tiny_cpu": ["+recipe=tiny_cpu", "train.steps=10"], "gpt_tiny_bf16": GPT_TINY,
           "moe_ep2": ["+recipe=moe_small_tiny_cpu", "train.steps=10"],
           "llama_fp32": ["+recipe=llama3_8b_tiny_cpu", "train.precision=fp32", "train.steps=10"]}


def command(run_dir, ranks, *extra, recipe="tiny_cpu"):
    return [LAUNCH, *RECIPES[recipe], "logging.wandb.mode=disabled",
            f"runtime.nproc_per_node={ranks}", f"hydra.run.dir={run_dir}", *extra]


def losses(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records}, [r["step"] for r in records]


# fp32 on 1 rank and the gpt recipe's bf16 on 2: each of the two dtypes' checkpoints, and the
# sharded (2-rank) save and load (a third, fp32 on 2 ranks, added 29 s and nothing these miss);
# the MoE twin, each of its 2 ranks holding 2 of the 4 experts (their keys renamed to global
# expert indices, as Megatron-LM's preprocess_fsdp_dtensor_state_dict does)
@pytest.mark.parametrize("recipe,ranks", [("tiny_cpu", 1),
                                          pytest.param("gpt_tiny_bf16", 2, marks=pytest.mark.quick),
                                          ("moe_ep2", 2), ("llama_fp32", 1)])
def test_killed_run_resumes_with_the_same_loss_curve(tmp_path, recipe, ranks):
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    reference = tmp_path / "reference"
    first = subprocess.run(command(reference, ranks, recipe=recipe), capture_output=True,
                           text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-3000:]

    run_dir = tmp_path / "killed"
    same_command = command(run_dir, ranks, "train.checkpoint.interval=3",
                           "train.checkpoint.resume=auto", recipe=recipe)
    proc = subprocess.Popen(same_command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 5):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank, mid-training
    proc.wait()
    assert not (run_dir / "summary.json").exists()
    assert (run_dir / "checkpoints" / "iter_0000003" / "launcher.json").exists()

    again = subprocess.run(same_command, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["resumed_from"].endswith(
        ("iter_0000003", "iter_0000006"))
    resumed, order = losses(run_dir)
    expected, _ = losses(reference)
    assert order == list(range(1, 11))  # the redone steps are not duplicated
    assert resumed == expected  # bit for bit
    complete = sorted((run_dir / "checkpoints").glob("iter_*"))
    assert complete[-1].name == "iter_0000010"
    assert all((c / "launcher.json").exists() and (c / ".metadata").exists() for c in complete)
    # Megatron-LM's tracker names the newest, as its --load reads it
    assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "10"


def as_an_earlier_launcher_saved_it(ckpt: Path, global_batch: int) -> Path:
    """`ckpt` (iter_NNNNNNN) rewritten as launchers before Megatron-LM's layout wrote it:
    `step_NNNNNNN`, no args or FLOP count, its scheduler counting steps rather than samples (a
    1-rank checkpoint, rewritten offline with torch's DCP format utilities)."""
    import shutil

    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp

    whole = ckpt.parent / "whole.pt"
    dcp_to_torch_save(str(ckpt), str(whole))
    state = torch.load(whole, weights_only=False)
    del state["args"], state["num_floating_point_operations_so_far"]
    for key in ("lr_warmup_steps", "num_steps", "lr_decay_steps", "wd_incr_steps"):
        state["opt_param_scheduler"][key] //= global_batch
    torch.save(state, whole)
    legacy = ckpt.parent / ckpt.name.replace("iter_", "step_")
    torch_save_to_dcp(str(whole), str(legacy))
    shutil.copy(ckpt / "launcher.json", legacy / "launcher.json")
    shutil.rmtree(ckpt)
    (ckpt.parent / "latest_checkpointed_iteration.txt").unlink()
    whole.unlink()
    return legacy


def test_an_earlier_launchers_checkpoint_still_resumes(tmp_path):
    """A step_NNNNNNN checkpoint of an earlier launcher (its scheduler in steps) resumes with
    train.checkpoint.resume=auto, and the run goes on as the uninterrupted one, bit for bit."""
    import shutil

    env = dict(os.environ, HOME=str(tmp_path / "home"))
    cosine = ["train.lr_schedule=cosine", "train.lr_warmup_steps=2"]  # the counts matter
    reference = tmp_path / "reference"
    proc = subprocess.run(command(reference, 1, *cosine), capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "run"
    proc = subprocess.run(command(run_dir, 1, *cosine, "train.checkpoint.interval=4"),
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "summary.json").read_text())["config"]
    for later in (run_dir / "checkpoints").glob("iter_*"):
        if later.name != "iter_0000004":
            shutil.rmtree(later)
    legacy = as_an_earlier_launcher_saved_it(run_dir / "checkpoints" / "iter_0000004",
                                             config["train"]["global_batch_size"])
    for done in ("metrics.jsonl", "summary.json"):
        (run_dir / done).unlink()
    proc = subprocess.run(command(run_dir, 1, *cosine, "train.checkpoint.resume=auto"),
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {legacy}: continuing at step 5" in proc.stdout
    resumed, order = losses(run_dir)
    expected, _ = losses(reference)
    assert order == list(range(5, 11))
    assert resumed == {step: expected[step] for step in range(5, 11)}
