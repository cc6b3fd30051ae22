"""The dry run's time model against measured runs: the CPU twins of the recipes (the gpt recipe
on the tiny GPT, llama3_8b_tiny_cpu, moe_small_tiny_cpu, all bf16 as their recipes say) on 1, 2
and 4 ranks, the switch on and off, predicted for this machine as measured in the same
invocation, and then run.

    .venv/bin/python bench/prediction.py [--repeats 2] [--steps 20] [--layers 1 2 4]
                                         [--hardware measure|NAME]
    python bench/prediction.py --runs SWEEP_DIR --hardware auto      (the GPU check's runs)

Runs every cell `--repeats` times, interleaved: each round runs every model and rank count once,
its two switch settings back to back, on first in odd rounds and off first in even ones. Prints
per cell the predicted / measured ratio of the steady-state step time (median of the steps after
warmup, pooled over the repeats) and of the first group's wait (first_group_wait_s, the first
forward's wait for the first group), then per model and rank count the switch's saving (off
minus on): predicted, measured in pairs (each round's back-to-back runs) with its 95% interval
(launcher.sweep.stats.paired_difference_ci: the machine's drift between rounds drops out), and
whether the signs agree where the interval excludes zero. On 1 rank Megatron-FSDP gathers
nothing and the model predicts a saving of exactly 0: those pairs are the measurement's control
(the same code twice), whose interval should hold zero. Targets: step time within 0.75-1.33;
the sign right wherever the measured interval excludes zero; the last line adds the mean absolute
percentage error of the step time over every cell. Four ranks
share the machine's two cores: the model slows each rank's host and compute by ranks / cores.

`--hardware measure` (the default): the hardware figures come from bench/calibrate.py's
measurement, run first in this invocation for the same rank counts (the calibration models with
`--layers` layers), kept in memory and printed; the baseline is measured in the same run, as
every benchmark's is, so a machine that has slowed since hardware/cpu_2core.yaml was written
does not skew the ratios. `--hardware NAME`: the figures of hardware/NAME.yaml.

`--runs DIR`: no run of its own; for every finished run under DIR (a sweep's folder) the same
ratios, from its summary.json (its resolved config, world, median step time and first-group
wait). `--hardware auto`: the file of this machine's GPU (h100_sxm, h200_sxm), else cpu_2core.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LAUNCH = str(Path(sys.executable).parent / "launch")
TWINS = {
    "gpt2": ["+recipe=gpt", "model=tiny", "train.global_batch_size=8", "train.micro_batch_size=2",
             "train.lr_warmup_steps=2", "runtime.device=cpu"],
    "llama": ["+recipe=llama3_8b_tiny_cpu"],
    "moe": ["+recipe=moe_small_tiny_cpu"],
}


def overrides(model: str, ranks: int, prefetch: bool, steps: int) -> list:
    experts = ["parallel.expert_model_parallel_size=1"] if model == "moe" and ranks == 1 else []
    return [*TWINS[model], *experts, f"runtime.nproc_per_node={ranks}", f"train.steps={steps}",
            "train.warmup_steps=4", f"fsdp.prefetch_first_param_group={str(prefetch).lower()}"]


def predicted(args: list, hardware) -> tuple:
    from launcher.cli import compose
    from launcher.estimate.predict import predict
    from launcher.estimate.topology import Cluster

    cfg = compose(args)
    p = predict(cfg, Cluster(hardware, cfg.runtime.nproc_per_node, 1))
    return p.timeline.step_s, p.timeline.first_wait_s


def measure(args: list, folder: str) -> tuple:
    """(steady step times, first-group waits) of one run."""
    run_dir = os.path.join(folder, f"run{len(os.listdir(folder))}")
    env = dict(os.environ, WANDB_SILENT="true")
    subprocess.run([LAUNCH, *args, f"hydra.run.dir={run_dir}"], check=True, capture_output=True,
                   timeout=900, env=env)
    steps = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    steady = [s for s in steps if s["step"] > 4]
    return ([s["step_time_s"] for s in steady],
            [s["first_group_wait_s"] for s in steady if s.get("first_group_wait_s") is not None])


def auto_hardware() -> str:
    import torch

    if not torch.cuda.is_available():
        return "cpu_2core"
    name = torch.cuda.get_device_name()
    for kind, file in (("H200", "h200_sxm"), ("H100", "h100_sxm"), ("GB300", "gb300"),
                       ("GB200", "gb200"), ("B200", "b200")):
        if kind in name:
            return file
    raise SystemExit(f"error: no hardware file for {name}; pass --hardware NAME")


def predict_runs(folder: str, hardware: str) -> None:
    """predicted / measured for every ok run under `folder`, from its summary.json."""
    from omegaconf import OmegaConf

    from launcher.cli import register_configs
    from launcher.config import Config, load_hardware, to_config
    from launcher.estimate.predict import predict
    from launcher.estimate.topology import Cluster

    register_configs()
    hw = load_hardware(auto_hardware() if hardware == "auto" else hardware)
    print(f"predicted for {hw.name}\n")
    print("| run | step ms predicted | measured | ratio | first-group wait ms predicted | "
          "measured |")
    print("|---|---|---|---|---|---|")
    for path in sorted(Path(folder).rglob("summary.json")):
        summary = json.loads(path.read_text())
        metrics = summary.get("metrics") or {}
        if summary.get("status") != "ok" or not metrics.get("step_time_s_p50"):
            continue
        cfg = to_config(OmegaConf.merge(OmegaConf.structured(Config), summary["config"]))
        world = summary["world_size"]
        p = predict(cfg, Cluster(hw, world, 1))
        measured, wait = metrics["step_time_s_p50"], metrics.get("first_group_wait_s")
        waited = f"{wait * 1e3:.2f}" if wait is not None else "null"
        print(f"| {path.parent.relative_to(folder)} | {p.timeline.step_s * 1e3:.1f} | "
              f"{measured * 1e3:.1f} | {p.timeline.step_s / measured:.2f} | "
              f"{p.timeline.first_wait_s * 1e3:.2f} | {waited} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", metavar="DIR", help="predict the finished runs under DIR")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--hardware", default="measure",
                        help="measure (calibrate now, the default) or a hardware file's name")
    parser.add_argument("--layers", nargs="+", type=int, default=[1, 2, 4],
                        help="layer counts of the calibration models' runs (--hardware measure)")
    parser.add_argument("--models", nargs="*", default=list(TWINS))
    parser.add_argument("--ranks", nargs="*", type=int, default=[1, 2, 4])
    args = parser.parse_args()
    if args.runs:
        return predict_runs(args.runs, args.hardware)
    hardware = machine(args)
    cells = [(m, r, p) for m in args.models for r in args.ranks for p in (True, False)]
    runs = {cell: [] for cell in cells}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.repeats):
            for cell in cells if round_ % 2 == 0 else paired_backwards(cells):
                runs[cell].append(measure(overrides(*cell, args.steps), folder))
                print(f"# round {round_ + 1}: {cell} done", file=sys.stderr, flush=True)
    report(cells, runs, args, hardware)


def paired_backwards(cells: list) -> list:
    """The cells with each (on, off) pair in the other order."""
    return [cell for i in range(0, len(cells), 2) for cell in (cells[i + 1], cells[i])]


def machine(args):
    """The Hardware to predict for: measured now (bench/calibrate.py, in memory) or a file's."""
    from launcher.config import Hardware, load_hardware

    if args.hardware != "measure":
        return load_hardware(args.hardware)
    from calibrate import measure_machine  # bench/calibrate.py, beside this script

    figures = measure_machine(sorted(args.ranks), args.layers)
    print(f"calibrated now: bf16 {figures['tflops']['bf16']} TFLOP/s a core; " + "; ".join(
        f"{n} rank(s): layer host {f['layer_host_us'] / 1e3:.1f} ms, MoE layer "
        f"{f['moe_layer_host_us'] / 1e3:.1f} ms, step host {f['step_host_us'] / 1e3:.1f} ms, "
        f"gloo {f['latency_us'] / 1e3:.2f} ms / {f['intra_node_gbps']} GB/s"
        for n, f in sorted(figures["by_ranks"].items())) + "\n", flush=True)
    return Hardware(**figures, sources={})


def report(cells: list, runs: dict, args, hardware) -> None:
    from launcher.sweep.stats import paired_difference_ci

    ms = 1e3
    print("| model | ranks | switch | step ms predicted | measured | ratio | first-group wait ms "
          "predicted | measured |")
    print("|---|---|---|---|---|---|---|---|")
    predictions, ratios = {}, []
    for cell in cells:
        step, wait = predicted(overrides(*cell, args.steps), hardware)
        predictions[cell] = step
        measured = statistics.median(t for steps, _ in runs[cell] for t in steps)
        waits = [w for _, ws in runs[cell] for w in ws]
        waited = statistics.median(waits) * ms if waits else float("nan")
        ratios.append(step / measured)
        print(f"| {cell[0]} | {cell[1]} | {'on' if cell[2] else 'off'} | {step * ms:.1f} | "
              f"{measured * ms:.1f} | {step / measured:.2f} | {wait * ms:.2f} | {waited:.2f} |")
    print("\n| model | ranks | saving ms predicted | measured [95% interval] | sign |")
    print("|---|---|---|---|---|")
    wrong = controls_off = 0
    for model in args.models:
        for ranks in args.ranks:
            on, off = (model, ranks, True), (model, ranks, False)
            saving = predictions[off] - predictions[on]
            diff, low, high = paired_difference_ci([s for s, _ in runs[off]],
                                                   [s for s, _ in runs[on]])
            decided = low > 0 or high < 0
            right = (saving > 0) == (diff > 0)
            if saving == 0:  # 1 rank: the same code twice, the measurement's control
                controls_off += decided
                sign = "control: EXCLUDES 0" if decided else "control: holds 0"
            else:
                wrong += decided and not right
                sign = ("right" if right else "WRONG") if decided else "interval holds 0"
            print(f"| {model} | {ranks} | {saving * ms:+.2f} | {diff * ms:+.2f} "
                  f"[{low * ms:+.2f}, {high * ms:+.2f}] | {sign} |")
    inside = sum(0.75 <= r <= 1.33 for r in ratios)
    error = statistics.mean(abs(r - 1) for r in ratios)
    print(f"\nstep_time_within_0.75_1.33={inside}/{len(ratios)} "
          f"ratios={min(ratios):.2f}..{max(ratios):.2f} "
          f"mean_absolute_percentage_error={error:.1%} wrong_signs={wrong} "
          f"controls_excluding_0={controls_off}")


if __name__ == "__main__":
    main()
