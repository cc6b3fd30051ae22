"""A run moves between the launcher and Megatron-LM through a checkpoint, both ways, and trains on
as if it had never moved.

Each case is one launcher run of 6 steps that saves at steps 3 and 6 (its losses are the
uninterrupted run's), then:
- Megatron-LM's own `pretrain` (bench/megatron_lm_loop.py under torchrun, with the flags the
  launcher prints for `train.checkpoint.resume=DIR/iter_0000003`: `--load DIR --ckpt-step 3`)
  resumes the launcher's checkpoint and trains steps 4-6;
- Megatron-LM trains 6 steps saving at step 3 (`--save`, printed for `train.checkpoint.dir`), and
  the launcher resumes its iter_0000003 and trains steps 4-6.
Both resumed runs' losses and gradient norms equal the uninterrupted launcher run's, step by step,
within the loss-parity tolerance (1e-6 relative; in fact equal). The GPT-2 twin on 1 rank in fp32,
the Llama twin on 2 ranks in bf16 (its recipe's).
"""

import pytest

from conftest import read_run, run_launch
from test_megatron_lm_losses import (  # noqa: F401 (fixtures)
    REL, corpus, env, inductor_cache, megatron_lm_flags, relative, run_megatron_lm,
)

pytestmark = pytest.mark.distributed

STEPS, SAVED = 6, 3

CASES = [
    pytest.param(1, ["+recipe=tiny_cpu_text"], id="gpt2-1rank-fp32"),
    pytest.param(2, ["+recipe=llama3_8b_tiny_cpu", "data=indexed"], id="llama-2ranks-bf16"),
]


def apart(ours: list, theirs: dict, first: int, title: str) -> list:
    """Steps first.. where the two sides' loss or gradient norm differ by more than REL; the
    table of both is printed (shown with pytest -s)."""
    out = [f"{title}\n| step | loss, unmoved | loss, moved | rel. diff | grad norm rel. diff |",
           "|---|---|---|---|---|"]
    far = []
    for i, step in enumerate(ours):
        diffs = {key: relative(step[key], theirs[key][i]) for key in ("loss", "grad_norm")}
        out.append(f"| {first + i} | {step['loss']:.7f} | {theirs['loss'][i]:.7f} | "
                   f"{diffs['loss']:.1e} | {diffs['grad_norm']:.1e} |")
        far += [f"step {first + i} {key}: {step[key]!r} vs {theirs[key][i]!r}"
                for key, diff in diffs.items() if diff > REL]
    print("\n".join(out))
    return far


@pytest.mark.parametrize("nproc, overrides", CASES)
def test_a_run_moves_to_megatron_lm_and_back(corpus, env, tmp_path, nproc, overrides):
    overrides = [*overrides, f"data.path={corpus}", f"train.steps={STEPS}",
                 "logging.wandb.mode=disabled", "fsdp.prefetch_first_param_group=true"]
    ours = tmp_path / "launcher_ckpts"
    proc, run_dir = run_launch(tmp_path / "whole", *overrides, f"train.checkpoint.dir={ours}",
                               f"train.checkpoint.interval={SAVED}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    _, records = read_run(run_dir)
    whole = [r for r in records if "loss" in r]
    assert [s["step"] for s in whole] == list(range(1, STEPS + 1))
    assert (ours / "latest_checkpointed_iteration.txt").read_text() == str(STEPS)

    # Megatron-LM resumes the launcher's step 3
    flags = megatron_lm_flags(tmp_path / "to", [*overrides, "train.checkpoint.resume="
                                                f"{ours}/iter_{SAVED:07d}"], env)
    assert f"--load {ours} --ckpt-step {SAVED}" in " ".join(flags)
    megatron, stdout = run_megatron_lm(nproc, flags, True, env)
    assert f"successfully loaded checkpoint from {ours}" in stdout
    assert len(megatron["loss"]) == STEPS - SAVED
    moved = apart(whole[SAVED:], megatron, SAVED + 1,
                  f"{nproc} rank(s): Megatron-LM resumed the launcher's step {SAVED}")
    assert not moved, "Megatron-LM resuming the launcher's checkpoint: " + "; ".join(moved)

    # the launcher resumes Megatron-LM's step 3
    theirs = tmp_path / "megatron_lm_ckpts"
    flags = megatron_lm_flags(tmp_path / "from", [*overrides, f"train.checkpoint.dir={theirs}",
                                                  f"train.checkpoint.interval={SAVED}"], env)
    assert f"--save {theirs} --save-interval {SAVED}" in " ".join(flags)
    megatron, _ = run_megatron_lm(nproc, flags, True, env)
    assert (theirs / f"iter_{SAVED:07d}" / ".metadata").is_file()
    assert not (theirs / f"iter_{SAVED:07d}" / "launcher.json").exists()  # Megatron-LM's own
    proc, run_dir = run_launch(tmp_path / "back", *overrides,
                               f"train.checkpoint.resume={theirs}/iter_{SAVED:07d}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"resumed from {theirs}/iter_{SAVED:07d}: continuing at step {SAVED + 1}" in proc.stdout
    _, records = read_run(run_dir)
    back = [r for r in records if "loss" in r]
    assert [s["step"] for s in back] == list(range(SAVED + 1, STEPS + 1))
    moved = apart(whole[SAVED:], {k: [s[k] for s in back] for k in ("loss", "grad_norm")},
                  SAVED + 1, f"{nproc} rank(s): the launcher resumed Megatron-LM's step {SAVED}")
    assert not moved, "the launcher resuming Megatron-LM's checkpoint: " + "; ".join(moved)

    # another model, or another world: refused in one line before any rank starts
    for change, said in (("model.num_layers=3", "with --num-layers "),
                         (f"runtime.nproc_per_node={3 - nproc}", f"on {nproc} rank")):
        proc, run_dir = run_launch(tmp_path / "other", *overrides, change,
                                   f"train.checkpoint.resume={theirs}/iter_{SAVED:07d}")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
        assert lines[0].startswith(f"error: train.checkpoint.resume: {theirs}/iter_{SAVED:07d} "
                                   f"was saved by Megatron-LM {said}"), lines
        assert not (run_dir / "summary.json").exists()
