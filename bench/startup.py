"""Start-up cost of `launch`: the resolved config, `--help`, and the dry-run pre-flight of a
12-cell and a 100-cell sweep.

    .venv/bin/python bench/startup.py [--repeats 5]

Times `launch --cfg job +recipe=gpt`, `launch --help` and `launch -m ... runtime.dry_run=true`
over a 2 x 2 x 3 grid and a 2 x 2 x 5 x 5 grid (compose and validate every cell, print the plan,
start nothing), each as a fresh process, the median of --repeats runs. Targets on the 2-core
machine: `--cfg job` 0.5 s, the 12-cell pre-flight 1.5 s (the 100-cell one is printed: a grid over
values composes the config once, so it should stay near the 12-cell figure); none of them may
import torch or megatron (checked in one more run of each). Ends with one machine-readable line:
`cfg_job_s=X.XX help_s=X.XX sweep_preflight_s=Y.YY sweep_100_preflight_s=Z.ZZ`.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
GRID = ["fsdp.prefetch_first_param_group=true,false", "cuda_graph.impl=none,full_iteration",
        "train.micro_batch_size=1,2,4"]
GRID_100 = ["fsdp.prefetch_first_param_group=true,false", "cuda_graph.impl=none,full_iteration",
            "train.lr=1e-4,2e-4,3e-4,4e-4,5e-4", "train.seed=1,2,3,4,5"]
# Runs launch's entry point and reports, at exit, whether torch or megatron were imported.
PROBE = ("import atexit, sys; atexit.register(lambda: print('heavy imports:', sorted("
         "m for m in ('torch', 'megatron') if m in sys.modules), file=sys.stderr)); "
         "sys.argv = ['launch'] + sys.argv[1:]; from launcher.cli import main; main()")


def commands(folder: str) -> dict:
    return {"cfg_job_s": ["--cfg", "job", "+recipe=gpt"],
            "help_s": ["--help"],
            "sweep_preflight_s": ["-m", "+recipe=gpt", *GRID, "runtime.dry_run=true",
                                  f"hydra.sweep.dir={folder}/sweep"],
            "sweep_100_preflight_s": ["-m", "+recipe=gpt", *GRID_100, "runtime.dry_run=true",
                                      f"hydra.sweep.dir={folder}/sweep100"]}


def wall_time(args: list, cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run([str(BIN / "launch"), *args], check=True, cwd=cwd, capture_output=True)
    return time.perf_counter() - start


def heavy_imports(args: list, cwd: str) -> str:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], check=True, cwd=cwd,
                          capture_output=True, text=True)
    return proc.stderr.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, args in commands(folder).items():
            times = [wall_time(args, folder) for _ in range(repeats)]
            results[name] = statistics.median(times)
            print(f"{name}: median {results[name]:.2f} s of {repeats} "
                  f"(min {min(times):.2f}, max {max(times):.2f}); {heavy_imports(args, folder)}")
    print(" ".join(f"{k}={v:.2f}" for k, v in results.items()))


if __name__ == "__main__":
    main()
