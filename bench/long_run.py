"""A 1,000-step tiny CPU run: what the launcher or its CPU layer keeps must not grow with the
steps. Prints torch's queue of CUDA-start callbacks (must stay at most 5: megatron's RNG tracker
forks twice a step, 2,000 entries if queued) and the memory a step adds (RSS after the last step
minus after the first, per step; docs/performance.md explains why it falls after the first few
hundred steps).

    .venv/bin/python bench/long_run.py [--steps 1000]

Exit 1 when the queue grew.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LAUNCH = str(Path(sys.executable).parent / "launch")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder, "run")
        subprocess.run([LAUNCH, "+recipe=tiny_cpu", f"train.steps={args.steps}",
                        "train.warmup_steps=2", "logging.wandb.mode=disabled",
                        "logging.print_steps=false", f"hydra.run.dir={run_dir}"], check=True,
                       env=dict(os.environ, WANDB_SILENT="true"))
        summary = json.loads((run_dir / "summary.json").read_text())
    queued = summary["torch_cuda_queued_calls"]
    growth = summary["metrics"]["rss_growth_bytes_per_step"]
    print(f"{args.steps} steps: torch.cuda._queued_calls {queued} (at most 5), "
          f"memory a step adds {growth / 1024:.1f} KiB")
    return 0 if queued <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
