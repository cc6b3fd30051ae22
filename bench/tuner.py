"""The tuner against the full grid: the same grids, the same N repeats, rounds interleaved in one
invocation (full grid to round k, then the tuner to round k, k = 2..N: a sweep resumed with
sweep.repeats=k continues from what is on disk), so drift on the machine falls on both alike.

    .venv/bin/python bench/tuner.py [--repeats 4]

Grids on the tiny CPU model: train.micro_batch_size=1,2,4 at a fixed global batch (a clear loser
and a clear winner), and fsdp.prefetch_first_param_group=true,false (a near tie). For each, and
over both, it prints the tuner's runs as a share of the full grid's and whether both chose the
same cell (the full grid's choice: its fastest cell, or the baseline when that is within noise,
the rule the tuned recipe uses), ending with one machine-readable line:
`tuner_runs_ratio=X.XX same_choice=true|false`. Target: at most 0.6, with the same choice.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = str(Path(sys.executable).parent / "launch")
BASE = ["+recipe=tiny_cpu", "train.steps=8", "train.warmup_steps=2", "logging.wandb.mode=disabled"]
GRIDS = {"micro_batch_size": ["train.micro_batch_size=1,2,4", "train.global_batch_size=8"],
         "prefetch": ["fsdp.prefetch_first_param_group=true,false"]}


def sweep(folder: Path, grid: list, repeats: int, tune: bool) -> None:
    args = [LAUNCH, "-m", *BASE, *grid, f"sweep.repeats={repeats}",
            f"sweep.tune={str(tune).lower()}", f"hydra.sweep.dir={folder}"]
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(folder.parent / "home"))
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(args)}\n{proc.stderr[-2000:]}")


def runs(folder: Path) -> int:
    from launcher.sweep.folders import runs_glob

    return len(glob.glob(os.path.join(runs_glob(str(folder)), "summary.json")))


def choice(folder: Path) -> str:
    from launcher.sweep.plan import Plan
    from launcher.sweep.results import collect
    from launcher.sweep.tuned import choose

    chosen, _, _ = choose(collect(Plan.load(str(folder))))
    return chosen["label"] if chosen else "(none)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    totals, same = [0, 0], True
    with tempfile.TemporaryDirectory() as tmp:
        for name, grid in GRIDS.items():
            full, tuner = Path(tmp, f"{name}_full"), Path(tmp, f"{name}_tuner")
            for k in range(2, args.repeats + 1):  # from 2: the race's sweep.min_repeats
                sweep(full, grid, k, tune=False)
                sweep(tuner, grid, k, tune=True)
            counts, choices = (runs(full), runs(tuner)), (choice(full), choice(tuner))
            same &= choices[0] == choices[1]
            totals = [totals[0] + counts[0], totals[1] + counts[1]]
            print(f"{name}: full grid {counts[0]} runs, chose {choices[0]}; tuner {counts[1]} "
                  f"runs ({counts[1] / counts[0]:.2f}), chose {choices[1]}", flush=True)
    print(f"tuner_runs_ratio={totals[1] / totals[0]:.2f} same_choice={str(same).lower()}")


if __name__ == "__main__":
    main()
