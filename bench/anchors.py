"""The launcher's throughput against two anchors on one cell, measured in one invocation: the same
GPT (sizes, precision, batch, Megatron-FSDP settings, mock data) trained by `launch`, by
bench/bare_loop.py (megatron-core with no launcher) and by Megatron-LM's own training loop
(bench/megatron_lm_loop.py: `megatron.training.pretrain`).

    python bench/anchors.py [--out DIR] LAUNCH_OVERRIDES...
    e.g. python bench/anchors.py +recipe=gpt_1p3b_1gpu_bf16           (one GPU)
         python bench/anchors.py +recipe=tiny_cpu train.steps=12       (a CPU)

The cell is what `launch LAUNCH_OVERRIDES` trains; the anchors get its model, batch, precision,
switch and step count from the run's summary, and drop the same first train.warmup_steps steps.
Each run's throughput follows the launcher's one definition (the median over steady-state steps
of the per-step rate; FLOPs per step by Megatron-LM's formula). Prints a table: step time,
tokens/s/GPU, TFLOP/s/GPU and MFU of each, and the ratio of the launcher's median steady-state
step to each anchor's (above 1: the launcher is slower); Megatron-LM's own logged TFLOP/s/GPU
beside it (it prints one decimal: 0 for a tiny CPU model). Writes OUT/anchors.json and each run's
log. Exit 0 when all three ran, 1 otherwise. On a CPU, Megatron-LM's loop runs on gloo under the
CPU layer (bench/megatron_lm_loop.py says how).
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from launcher.estimate import flops  # noqa: E402  (pure Python)
from launcher.run import step_stats  # noqa: E402  (pure Python)


def launch_command() -> str:
    """`launch` next to this interpreter (a venv), else on PATH (the GPU check's --target)."""
    beside = Path(sys.executable).parent / "launch"
    return str(beside) if beside.exists() else (shutil.which("launch") or "launch")


def run(command: List[str], log: Path, timeout: float) -> subprocess.CompletedProcess:
    """The command with its output kept in `log`."""
    env = dict(os.environ, WANDB_SILENT="true", PYTHONPATH=os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p))
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=timeout)
    except subprocess.TimeoutExpired as err:
        proc = subprocess.CompletedProcess(command, 124, err.stdout or "", err.stderr or "")
        proc.stdout = proc.stdout if isinstance(proc.stdout, str) else proc.stdout.decode()
        proc.stderr = (proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode()) + \
            f"\ntimed out after {timeout:.0f} s"
    log.write_text(f"$ {' '.join(command)}\n{proc.stdout}\n{proc.stderr}")
    return proc


def torchrun(script: str, args: List[str]) -> List[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
            str(ROOT / "bench" / script), *args]


def bare_loop_args(model: dict, train: dict, fsdp: dict, padded_vocab: int) -> List[str]:
    args = ["--steps", str(train["steps"]), "--seq", str(model["seq_length"]),
            "--micro-batch", str(train["micro_batch_size"]),
            "--global-batch", str(train["global_batch_size"]), "--layers", str(model["num_layers"]),
            "--hidden", str(model["hidden_size"]), "--heads", str(model["num_attention_heads"]),
            "--ffn", str(model["ffn_hidden_size"] or 4 * model["hidden_size"]),
            "--vocab", str(model["vocab_size"] or model["mock_vocab_size"]),
            "--padded-vocab", str(padded_vocab),
            "--prefetch", str(fsdp["prefetch_first_param_group"]).lower()]
    return args + (["--bf16"] if train["precision"] == "bf16" else [])


def megatron_lm_args(overrides: List[str], fsdp: dict, log: Path, timeout: float
                     ) -> Optional[List[str]]:
    """Megatron-LM's flags for the same cell, both sides at their defaults: what `launch
    OVERRIDES runtime.print_megatron_lm=true` prints (launcher/preflight/megatron_lm.py; the config
    parity test holds the two configs equal but for docs/megatron_lm_parity.md's table): the
    fusions on where this installation has them, off where it has not, on both sides. Then the
    switch (megatron_lm_loop.py's flag) and a log line per iteration with its TFLOP/s."""
    proc = run([launch_command(), *overrides, "runtime.print_megatron_lm=true"], log, timeout)
    if proc.returncode != 0:
        return None
    command = "\n".join(l for l in proc.stdout.splitlines() if not l.startswith("#"))
    words = shlex.split(command.replace("\\\n", " "))
    flags = words[words.index("pretrain_gpt.py") + 1:]
    switch = str(fsdp["prefetch_first_param_group"]).lower()
    return flags + ["--prefetch-first-param-group", switch, "--log-interval", "1",
                    "--log-throughput"]


def rates(times: List[float], summary: dict) -> dict:
    """Step time and throughput of steady-state step times, by the launcher's definitions."""
    world = summary["world_size"]
    per_s = step_stats.median_per_step(
        lambda t: flops.tflops_per_gpu(summary["flops_per_step"], t, world), times) * 1e12
    return {"step_time_s_p50": statistics.median(times),
            "tokens_per_s_per_gpu": step_stats.median_per_step(
                lambda t: flops.tokens_per_s_per_gpu(summary["tokens_per_step"], t, world),
                times),
            "tflops_per_gpu": per_s / 1e12, "mfu": flops.mfu(per_s, summary["peak_flops"]),
            "steps": len(times)}


def last_json(text: str) -> Optional[dict]:
    lines = [l for l in text.strip().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def measure(overrides: List[str], out: Path, timeout: float) -> dict:
    """Runs the three and returns what anchors.json holds."""
    result = {"overrides": overrides, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "launch"
        proc = run([launch_command(), *overrides, "logging.wandb.mode=disabled",
                    f"hydra.run.dir={run_dir}"], out / "anchor_launch.log", timeout)
        if proc.returncode != 0 or not (run_dir / "summary.json").exists():
            result["runs"]["launch"] = {"status": f"failed (exit {proc.returncode})"}
            return result
        summary = json.loads((run_dir / "summary.json").read_text())
    cfg = summary["config"]
    model, train, fsdp = cfg["model"], cfg["train"], cfg["fsdp"]
    warmup = train["warmup_steps"]
    result.update(device=summary["device"], world_size=summary["world_size"],
                  flops_per_step=summary["flops_per_step"], peak_flops=summary["peak_flops"])
    result["runs"]["launch"] = {"status": "ok", **rates(summary["steady_state_step_times_s"],
                                                        summary)}
    padded = _padded(model["vocab_size"], cfg["parallel"]["tensor_model_parallel_size"])
    mlm_flags = megatron_lm_args(overrides, fsdp, out / "anchor_megatron_lm_flags.log", timeout)
    anchors = {"bare_loop": torchrun("bare_loop.py", bare_loop_args(model, train, fsdp, padded)),
               "megatron_lm": mlm_flags and torchrun("megatron_lm_loop.py", mlm_flags)}
    for name, command in anchors.items():
        if command is None:
            result["runs"][name] = {"status": "failed (launch runtime.print_megatron_lm=true)"}
            continue
        proc = run(command, out / f"anchor_{name}.log", timeout)
        found = last_json(proc.stdout) if proc.returncode == 0 else None
        if found is None:
            result["runs"][name] = {"status": f"failed (exit {proc.returncode})"}
        else:
            times = found.get("step_times_s") or found["iteration_times_s"]
            entry = {"status": "ok", **rates(times[warmup:], summary)}
            if found.get("tflops_per_gpu"):  # what Megatron-LM itself logged
                entry["own_tflops_per_gpu_p50"] = statistics.median(
                    found["tflops_per_gpu"][warmup:])
            entry["launcher_step_ratio"] = (result["runs"]["launch"]["step_time_s_p50"]
                                            / entry["step_time_s_p50"])
            result["runs"][name] = entry
    return result


def _padded(vocab: int, tensor_parallel_size: int) -> int:
    """The model's vocabulary as the launcher pads it (ModelConfig.padded_vocab_size)."""
    multiple = 128 * tensor_parallel_size
    return -(-vocab // multiple) * multiple


def table(result: dict) -> str:
    def cell(run: dict, key: str, fmt: str, scale: float = 1.0) -> str:
        return "-" if run.get(key) is None else format(scale * run[key], fmt)

    lines = [f"anchors on {result.get('device')}: {' '.join(result['overrides'])}",
             "| run | status | step p50 ms | tokens/s/GPU | TFLOP/s/GPU | MFU | launcher step / "
             "this | its own TFLOP/s/GPU |", "|---|---|---|---|---|---|---|---|"]
    for name, run in result["runs"].items():
        lines.append(" | ".join([
            f"| {name}", run["status"], cell(run, "step_time_s_p50", ".1f", 1e3),
            cell(run, "tokens_per_s_per_gpu", ".0f"), cell(run, "tflops_per_gpu", ".3g"),
            cell(run, "mfu", ".3f"), cell(run, "launcher_step_ratio", ".3f"),
            cell(run, "own_tflops_per_gpu_p50", ".3g")]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--timeout", type=float, default=300, help="seconds, each of the 3 runs")
    args, overrides = parser.parse_known_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = measure(overrides, out, args.timeout)
    (out / "anchors.json").write_text(json.dumps(result, indent=2))
    print(table(result))
    ok = [r["status"] == "ok" for r in result["runs"].values()]
    return 0 if len(ok) == 3 and all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
