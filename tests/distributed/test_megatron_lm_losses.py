"""Loss parity with Megatron-LM: a launcher run and Megatron-LM's own `megatron.training.pretrain`
(bench/megatron_lm_loop.py, the shape of pretrain_gpt.py) train the same 30 steps on the same
text, and every step's loss and gradient norm agree within 1e-6 relative.

Each case is one `launch` run, as a user types it (a recipe, data=indexed on the shipped corpus),
and one torchrun of the bench script with the flags the same run prints with
`runtime.print_megatron_lm=true`, plus the script's switch flag. The launcher's side is its
metrics.jsonl (`loss`, `grad_norm` per step); Megatron-LM's is what its train_step returned.
docs/megatron_lm_parity.md ("Loss parity") has the cases' measured differences."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, read_run, run_launch

pytestmark = pytest.mark.distributed

BIN = Path(sys.executable).parent
STEPS = 30
REL = 1e-6

CASES = [
    # GPT-2 twin, 1 rank, fp32, dropout on (hidden and attention), the switch on
    pytest.param(1, ["+recipe=tiny_cpu_text", "model.hidden_dropout=0.1",
                     "model.attention_dropout=0.1", "fsdp.prefetch_first_param_group=true"],
                 id="gpt2-1rank-fp32-dropout-switch_on"),
    # Llama twin, 2 ranks, bf16 (its recipe's), the switch off
    pytest.param(2, ["+recipe=llama3_8b_tiny_cpu", "data=indexed",
                     "fsdp.prefetch_first_param_group=false"],
                 id="llama-2ranks-bf16-switch_off"),
    # MoE twin, experts split over 2 ranks, bf16, the switch on
    pytest.param(2, ["+recipe=moe_small_tiny_cpu", "data=indexed",
                     "parallel.expert_model_parallel_size=2",
                     "fsdp.prefetch_first_param_group=true"],
                 id="moe-ep2-bf16-switch_on"),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The shipped corpus (the Python standard library's docstrings), byte-tokenized."""
    prefix = tmp_path_factory.mktemp("data") / "stdlib"
    proc = subprocess.run([str(BIN / "launch-prepare"), "--stdlib-corpus", "--output",
                           str(prefix), "--tokenizer", "byte"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return prefix


@pytest.fixture(scope="module")
def inductor_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("inductor")


@pytest.fixture
def env(inductor_cache, monkeypatch):
    """The environment of both sides (run_launch passes the test's on). megatron.training's JIT
    warm-up torch.compiles two functions that a CPU run never calls (its fusions are off), and
    inductor first probes which SIMD instruction sets this CPU builds, each probe a fresh Python
    importing torch: about 25 s a process on 2 cores. TORCHINDUCTOR_VEC_ISA_OK=0 skips the probes
    (the warm-up's kernels compile without SIMD) and one inductor cache serves every process:
    2-9 s a warm-up. The warm-up still runs, and no training step runs a compiled kernel (the
    MoE router's torch.compiled _apply_expert_bias captures no operation without expert bias)."""
    monkeypatch.setenv("TORCHINDUCTOR_VEC_ISA_OK", "0")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_cache))
    return dict(os.environ, WANDB_SILENT="true")


def megatron_lm_flags(tmp_path, overrides, env) -> list:
    """The Megatron-LM flags the launcher prints for `overrides` (its notes dropped)."""
    proc = subprocess.run([str(BIN / "launch"), *overrides, "runtime.print_megatron_lm=true",
                           f"hydra.run.dir={tmp_path / 'print'}"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = "\n".join(line for line in proc.stdout.splitlines() if not line.startswith("#"))
    command = shlex.split(text.replace("\\\n", " "))  # the shell's line continuations
    return command[command.index("pretrain_gpt.py") + 1:]


def run_megatron_lm(nproc, flags, switch, env) -> dict:
    """bench/megatron_lm_loop.py under torchrun: its final JSON line, and its stdout."""
    proc = subprocess.run(
        [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={nproc}",
         str(ROOT / "bench" / "megatron_lm_loop.py"), *flags,
         "--prefetch-first-param-group", "true" if switch else "false"],
        capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


@pytest.mark.parametrize("nproc, overrides", CASES)
def test_launcher_trains_loss_for_loss_like_megatron_lm(corpus, env, tmp_path, nproc, overrides):
    overrides = [*overrides, f"data.path={corpus}", f"train.steps={STEPS}",
                 "logging.wandb.mode=disabled"]
    switch = "fsdp.prefetch_first_param_group=true" in overrides

    flags = megatron_lm_flags(tmp_path, overrides, env)
    assert "--data-path" in flags and f"--train-iters {STEPS}" in " ".join(flags)
    proc, run_dir = run_launch(tmp_path, *overrides)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary, records = read_run(run_dir)
    steps = [r for r in records if "loss" in r]
    assert summary["world_size"] == nproc and [s["step"] for s in steps] == list(
        range(1, STEPS + 1))
    assert summary["config"]["fsdp"]["prefetch_first_param_group"] is switch

    megatron, stdout = run_megatron_lm(nproc, flags, switch, env)
    assert f"fsdp_all_gather_in_start_param_sync={switch} (--prefetch-first-param-group)" \
        in stdout
    assert megatron["world_size"] == nproc and len(megatron["loss"]) == STEPS

    rows = [(s["step"], key, s[key], megatron[key][i], relative(s[key], megatron[key][i]))
            for i, s in enumerate(steps) for key in ("loss", "grad_norm")]
    worst = {key: max(r[4] for r in rows if r[1] == key) for key in ("loss", "grad_norm")}
    apart = [f"step {step} {key}: launcher {ours!r}, Megatron-LM {theirs!r} ({rel:.1e})"
             for step, key, ours, theirs, rel in rows if rel > REL]
    print(f"largest relative differences over {STEPS} steps: loss {worst['loss']:.1e}, "
          f"grad norm {worst['grad_norm']:.1e}")  # shown with pytest -s
    assert not apart, f"largest relative differences {worst}; " + "; ".join(apart[:8])
