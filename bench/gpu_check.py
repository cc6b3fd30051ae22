"""The GPU check's stages, run one after another whatever fails: each prints its status and
time, a stage that needs a failed one is skipped with the reason, and the exit code is 0 only if
every stage passed. Standard library only: it runs before anything is installed.

    python3.12 bench/gpu_check.py [--wheels DIR]    on the GPU machine (bench/gpu_check.sh)
    python3.12 bench/gpu_check.py --rehearse        the same stages on a CPU machine: a fresh venv,
                                                    torch from the registry, the rest from DIR
    python3.12 bench/gpu_check.py --venv .venv      an existing venv: no venv, no install

Everything it learns (stage statuses, versions, whether apex and Transformer Engine import) is
written to OUT/gpu_check.json, and the sweep's report to OUT/sweep/ (results.md, report.html),
also when the sweep stopped part way.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.11.0"  # the GPU machine's own version (../shared/FACTS.md)

# Imports the machine's stack and says what it found, one JSON line.
PROBE = """
import importlib.metadata, importlib.util, json, torch, megatron.core
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
    "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    "megatron_core": importlib.metadata.version("megatron-core"),
    "apex": importlib.util.find_spec("apex") is not None,
    "transformer_engine": importlib.util.find_spec("transformer_engine") is not None}))
"""


@dataclass
class Stage:
    name: str
    command: List[str]
    timeout_s: int
    needs: List[str] = field(default_factory=list)
    always: bool = False  # runs even when a stage it needs did not pass (the report)
    status: str = "pending"
    seconds: float = 0.0
    output: str = ""


def run_stage(stage: Stage, env: dict) -> None:
    """Runs the stage's command in a session of its own, so that a timeout ends its whole process
    group (a sweep's ranks too), not only the command."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(stage.command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    except OSError as err:
        stage.status = f"failed ({err.strerror}: {stage.command[0]})"
        return
    try:
        stage.output, _ = proc.communicate(timeout=stage.timeout_s)
        stage.status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stage.output, _ = proc.communicate()
        stage.status = f"timeout (after {stage.timeout_s} s)"
    stage.seconds = time.monotonic() - start


def run_stages(stages: List[Stage], env: dict) -> bool:
    """Runs every stage in order; True when all passed."""
    done = {}
    for stage in stages:
        missing = [n for n in stage.needs if done.get(n) != "ok"]
        if missing and not stage.always:
            stage.status = f"skipped (needs {', '.join(missing)})"
        else:
            print(f"[gpu_check] {stage.name}: running (limit {stage.timeout_s} s)", flush=True)
            run_stage(stage, env)
            tail = "\n".join(stage.output.strip().splitlines()[-15:])
            if tail:
                print(tail, flush=True)
        done[stage.name] = stage.status
        print(f"[gpu_check] {stage.name}: {stage.status} ({stage.seconds:.0f} s)", flush=True)
    return all(s.status == "ok" for s in stages)


def stages_for(args, venv: Path, out: Path) -> List[Stage]:
    py, bin_ = str(venv / "bin" / "python"), venv / "bin"
    wheels = sorted(str(p) for p in Path(args.wheels).glob("*.whl"))
    stages = []
    if not args.venv:
        make = [sys.executable, "-m", "venv", str(venv)]
        stages.append(Stage("venv", make if args.rehearse else make + ["--system-site-packages"],
                            20))
        if args.rehearse:  # the stand-in for the GPU machine's own torch
            stages.append(Stage("torch", [py, "-m", "pip", "install", "-q", TORCH], 600, ["venv"]))
        stages.append(Stage("install", [py, "-m", "pip", "install", "-q", "--no-index",
                                        "--no-deps", *wheels], 300 if args.rehearse else 90,
                            ["torch"] if args.rehearse else ["venv"]))
    installed = [] if args.venv else ["install"]
    stages.append(Stage("imports", [py, "-c", PROBE], 60, installed))
    # -s: the tier prints what it measures but does not assert (the first-group events' cost)
    stages.append(Stage("gpu_tests", [py, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                                      "tests/gpu"], args.tests_timeout, ["imports"]))
    sweep = out / "sweep"
    grid = (["+recipe=sweep_tiny_cpu", f"train.steps={args.cpu_steps}", "cuda_graph.warmup_steps=1"]
            if args.rehearse or args.cpu else
            # 1.3B on one H200, shrunk to fit: 3 valid cells x 1 repeat of the recipe's 14 steps
            ["+recipe=gpt_1p3b_1gpu_bf16", "fsdp.prefetch_first_param_group=true,false",
             "cuda_graph.impl=none,full_iteration"])
    stages.append(Stage("sweep", [str(bin_ / "launch"), "-m", *grid, "sweep.repeats=1",
                                  f"hydra.sweep.dir={sweep}"], args.sweep_timeout, ["imports"]))
    stages.append(Stage("report", [str(bin_ / "launch-report"), str(sweep)], 30, ["sweep"],
                        always=True))
    return stages


def probe_result(stages: List[Stage]) -> Optional[dict]:
    for stage in stages:
        if stage.name == "imports" and stage.status == "ok":
            return json.loads(stage.output.strip().splitlines()[-1])
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", default=str(ROOT / ".whl"))
    parser.add_argument("--rehearse", action="store_true")
    parser.add_argument("--venv", help="use this venv as it is (no venv made, nothing installed)")
    parser.add_argument("--cpu", action="store_true", help="the tiny CPU sweep (as --rehearse)")
    parser.add_argument("--cpu-steps", type=int, default=8,
                        help="training steps of each run of the tiny CPU sweep")
    parser.add_argument("--out", default=str(ROOT / "sweeps" /
                                             time.strftime("gpu_check_%Y%m%d_%H%M%S")))
    # The limits add up to 500 s, within the 8 minutes one H200 is lent for (venv 20, install 90,
    # imports 60, GPU tier 120: 7 tiny runs; sweep 180: 3 runs of the 1.3B GPT; report 30).
    parser.add_argument("--tests-timeout", type=int, default=120)
    parser.add_argument("--sweep-timeout", type=int, default=180)
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    venv = Path(args.venv).resolve() if args.venv else \
        ROOT / (".venv-rehearse" if args.rehearse else ".venv-gpu")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", PYTHONNOUSERSITE="1")
    stages = stages_for(args, venv, out)
    passed = run_stages(stages, env)
    record = {"passed": passed, "rehearse": args.rehearse, "found": probe_result(stages),
              "stages": [{k: v for k, v in asdict(s).items() if k != "output"} for s in stages]}
    (out / "gpu_check.json").write_text(json.dumps(record, indent=2))
    print("\n[gpu_check] " + "; ".join(f"{s.name} {s.status}" for s in stages))
    print(f"[gpu_check] found: {record['found']}")
    results = out / "sweep" / "results.md"
    if results.exists():
        print(results.read_text())
    print(f"[gpu_check] {'all stages passed' if passed else 'NOT all stages passed'}; "
          f"record in {out / 'gpu_check.json'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
