"""Start-up cost of `launch`: the resolved config, and a 12-cell sweep's pre-flight.

    .venv/bin/python bench/startup.py [--repeats 5]

Times `launch --cfg job +recipe=gpt` and `launch -m ... runtime.dry_run=true` over a 2 x 2 x 3
grid (compose and validate every cell, print the plan, start nothing), each as a fresh process,
the median of --repeats runs. Targets on the 2-core machine: 0.6 s and 2 s, and neither may
import torch or megatron (checked in one more run of each). Ends with one machine-readable line:
`cfg_job_s=X.XX sweep_preflight_s=Y.YY`.
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
# Runs launch's entry point and reports, at exit, whether torch or megatron were imported.
PROBE = ("import atexit, sys; atexit.register(lambda: print('heavy imports:', sorted("
         "m for m in ('torch', 'megatron') if m in sys.modules), file=sys.stderr)); "
         "sys.argv = ['launch'] + sys.argv[1:]; from launcher.cli import main; main()")


def commands(folder: str) -> dict:
    return {"cfg_job_s": ["--cfg", "job", "+recipe=gpt"],
            "sweep_preflight_s": ["-m", "+recipe=gpt", *GRID, "runtime.dry_run=true",
                                  f"hydra.sweep.dir={folder}/sweep"]}


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
