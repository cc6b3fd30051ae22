"""The launcher's overhead against a bare megatron-core loop (bench/bare_loop.py): the same tiny
GPT, the same Megatron-FSDP, ranks and steps, in pairs run A B, B A, A B, ... in one invocation.

    .venv/bin/python bench/overhead.py [--pairs 10] [--steps 40] [--ranks 1] [--cores 0,1]
                                       [--baseline-tree DIR]

`--baseline-tree DIR`: the baseline is `launch` itself as another checkout of this repository has
it (DIR's launcher/ first on PYTHONPATH, the same command, the same venv) instead of the bare
loop: a change's own cost, the launcher after against the launcher before.

Each pair gives a ratio: launch's median steady-state step time (steps after the first 2) over the
baseline's (`base` in its lines). The order alternates, and the ratio is taken within a pair, so
that a machine that drifts (a shared 2-core CPU does, by 10% and more between minutes, and went
through slow phases of 10 to 30 s on 2026-12-06) moves both sides alike; every
run is pinned to the same cores (--cores; default: all this process may use), so that neither side
gets other cores than the other. Prints each pair, the median of the pair ratios (the figure) with
its 95% interval (a bootstrap over the pairs, as the sweep's statistics resample repeats), the
pooled medians for reference, the memory a step adds to each, and the median pair ratio of time-to-
first-step (from starting the command to the end of step 1; earlier records: the ratio of the
medians) with its interval, ending with one machine-readable line: `steady_state_ratio=X.XXX [LOW,
HIGH] first_step_ratio=Y.YYY [LOW, HIGH]`. Targets: at most 1.02 and 1.15, judged on the interval:
a target is met where the interval's upper end is at most the target, missed where its lower end is
above it, and not decided otherwise (more pairs narrow it).
"""

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WARMUP = 2  # steps left out of the steady state, as train.warmup_steps


def timed(command: list, first_line: str, env: dict, cores: set) -> tuple:
    """(seconds from start to the line that ends step 1, the first to match the regular
    expression `first_line`, and the whole stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env, cwd=ROOT,
                            preexec_fn=functools.partial(os.sched_setaffinity, 0, cores))
    first, lines = None, []
    for line in iter(proc.stdout.readline, ""):  # not `for line in`: it reads ahead in blocks
        lines.append(line)
        if first is None and re.match(first_line, line):
            first = time.perf_counter() - start
    if proc.wait() != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return first, lines


def run_launch(args, folder: str, env: dict, tree: Path = ROOT) -> tuple:
    run_dir = Path(folder, f"launch-{time.monotonic_ns()}")
    first, _ = timed([str(BIN / "launch"), "+recipe=tiny_cpu", f"train.steps={args.steps}",
                      f"train.warmup_steps={WARMUP}", f"runtime.nproc_per_node={args.ranks}",
                      "logging.wandb.mode=disabled", f"hydra.run.dir={run_dir}"],
                     r"step +1/", dict(env, PYTHONPATH=str(tree)), args.cores)
    summary = json.loads((run_dir / "summary.json").read_text())
    return first, summary["steady_state_step_times_s"], \
        summary["metrics"]["rss_growth_bytes_per_step"]


def run_bare(args, env: dict) -> tuple:
    first, lines = timed([str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={args.ranks}",
                          str(ROOT / "bench" / "bare_loop.py"), f"--steps={args.steps}"],
                         "first step done", env, args.cores)
    result = json.loads(lines[-1])
    return first, result["step_times_s"][WARMUP:], result["rss_growth_bytes_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--cores", type=lambda text: {int(c) for c in text.split(",")},
                        default=os.sched_getaffinity(0),
                        help="comma-separated CPU cores every run is pinned to")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="a checkout whose `launch` is the baseline, not the bare loop")
    args = parser.parse_args()
    env = dict(os.environ, WANDB_SILENT="true", PYTHONPATH=str(ROOT))
    firsts, steady = {"launch": [], "base": []}, {"launch": [], "base": []}
    growth = {"launch": [], "base": []}
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        runs = {"launch": lambda: run_launch(args, folder, env),
                "base": lambda: run_bare(args, env)}
        if args.baseline_tree:
            runs["base"] = lambda: run_launch(args, folder, env, args.baseline_tree.resolve())
        for pair in range(args.pairs):
            order = ("launch", "base") if pair % 2 == 0 else ("base", "launch")
            pair_medians = {}
            for name in order:
                result = runs[name]()
                firsts[name].append(result[0])
                steady[name] += result[1]
                growth[name].append(result[2])
                pair_medians[name] = statistics.median(result[1])
                print(f"pair {pair + 1}/{args.pairs} {name:<6} first step at {result[0]:.2f} s, "
                      f"steady median {1e3 * pair_medians[name]:.1f} ms", flush=True)
            ratios.append(pair_medians["launch"] / pair_medians["base"])
            print(f"pair {pair + 1}/{args.pairs} ratio {ratios[-1]:.3f}", flush=True)
    medians = {k: statistics.median(v) for k, v in steady.items()}
    first = {k: statistics.median(v) for k, v in firsts.items()}
    for name in ("launch", "base"):
        print(f"{name:<6} steady-state step {1e3 * medians[name]:.2f} ms (median of "
              f"{len(steady[name])} steps pooled), time to first step {first[name]:.2f} s, memory "
              f"growth {statistics.median(growth[name]) / 1024:.1f} KiB/step (RSS after the last "
              "step minus after the first, per step; median of the runs)")
    print(f"pair ratios {' '.join(f'{r:.3f}' for r in ratios)}; pooled medians' ratio "
          f"{medians['launch'] / medians['base']:.3f}; cores {sorted(args.cores)}")
    first_ratios = [a / b for a, b in zip(firsts["launch"], firsts["base"])]
    steady_text = with_interval(ratios, statistics.median(ratios))
    first_text = with_interval(first_ratios, statistics.median(first_ratios))
    print(f"steady_state_ratio={steady_text} first_step_ratio={first_text}")


def with_interval(ratios: list, figure: float) -> str:
    """`X.XXX [LOW, HIGH]`: the figure and the 95% interval of the median pair ratio, from
    resampling the pairs with replacement (launcher.sweep.stats, the sweep's bootstrap)."""
    from launcher.sweep.stats import median_ci

    _, low, high = median_ci([[r] for r in ratios])
    return f"{figure:.3f} [{low:.3f}, {high:.3f}]"

if __name__ == "__main__":
    main()
