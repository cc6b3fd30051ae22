"""The GPU check's stages, run one after another whatever fails: each prints its status and
time, a stage that needs a failed one is skipped with the reason, and the exit code is 0 only if
every stage passed. Standard library only: it runs before anything is installed.

    python3 gpu/check.py [--wheels DIR] [--out DIR]   a GPU machine without network
    python3 gpu/check.py --venv .venv                  a GPU machine with the checkout's .venv
    python3 gpu/check.py --rehearse                    the wheels' steps on a CPU machine
    python3 gpu/check.py --venv .venv --cpu            an existing venv, nothing installed

Without network, the GPU machine's `python3` holds torch (and what gpu/image_packages.txt
lists). The wheels gpu/wheels.py prepared (what that python lacks) are installed with
`pip install --no-index --no-deps --target .gpu-site`, and every stage runs with
PYTHONPATH=.gpu-site and .gpu-site/bin first on PATH: nothing of the machine's own is replaced.
`--rehearse` builds that layout on a CPU machine: a venv holding torch and what the project takes
from the image (its stand-in), then the same install and stages, a tiny CPU sweep and cell.

Stages: [rehearse: wheels, image] install, imports, gpu_tests, sweep, report, prediction (the
dry run's time model for each of the sweep's runs, predicted / measured), anchors,
fusions_off (the anchors' cell with every fusion off: with the anchors' launch run at the
defaults, the fusions-on/off pair; the screen prints both and their ratio), fp8 (the cell with
train.fp8.format=hybrid, where the imports found Transformer Engine and a GPU; skipped, saying
so, elsewhere: a skip for a missing requirement does not fail the check). OUT (--out, else $OUT
where set, else WORK/out) receives 6 files: gpu_check.json (every stage, what the
imports found), results.md and report.html (the sweep's), anchors.json, summary.txt (the screen
printed last) and logs.tar.gz (each stage's output, the sweep's and the anchors' logs).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / ".gpu-site"  # where the wheels go, beside the machine's own packages
REHEARSAL_VENV = ROOT / ".venv-rehearse"  # the rehearsal's stand-in for the machine's image
GPU_SWEEP = ["+recipe=gpt_1p3b_1gpu_bf16", "fsdp.prefetch_first_param_group=true,false",
             "cuda_graph.impl=none,full_iteration"]  # 3 valid cells x 1 repeat of 14 steps
GPU_CELL = ["+recipe=gpt_1p3b_1gpu_bf16"]  # the sweep's baseline: prefetch on, no graph
# The cell with every fused kernel off: the anchors' launch run is the cell at its defaults (on
# where installed), so the two make the fusions-on/off pair (docs/megatron_lm_parity.md).
FUSIONS_OFF = [f"model.fusions.{key}=false" for key in (
    "masked_softmax", "bias_activation", "bias_dropout", "rope", "gradient_accumulation",
    "persist_layer_norm")]
# One FP8 cell: the same cell with Megatron-LM's --fp8-format hybrid and its default recipe,
# delayed (the one every Transformer Engine runs); only where Transformer Engine is installed.
FP8 = ["train.fp8.format=hybrid"]

# Imports the machine's stack and says what it found, one JSON line.
PROBE = """
import importlib.metadata, importlib.util, json, torch, megatron.core
gpu = torch.cuda.is_available()
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
    "gpu": torch.cuda.get_device_name() if gpu else None,
    "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30 if gpu else None,
    "megatron_core": importlib.metadata.version("megatron-core"),
    "megatron_core_from": megatron.core.__file__,
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
    requires: List[tuple] = field(default_factory=list)
    """(key of the imports stage's findings, what lacks) that must be found true, else the stage
    is skipped with that reason, and the check still passes (an optional tier)."""
    unmet: str = ""  # the requirement it was skipped for
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
        found = (probe_result(stages) or {}) if stage.requires else {}
        stage.unmet = next((why for key, why in stage.requires if not found.get(key)), "")
        if missing and not stage.always:
            stage.status = f"skipped (needs {', '.join(missing)})"
        elif stage.unmet:
            stage.status = f"skipped ({stage.unmet})"
        else:
            print(f"[gpu_check] {stage.name}: running (limit {stage.timeout_s} s)", flush=True)
            run_stage(stage, env)
            tail = "\n".join(stage.output.strip().splitlines()[-15:])
            if tail:
                print(tail, flush=True)
        done[stage.name] = stage.status
        print(f"[gpu_check] {stage.name}: {stage.status} ({stage.seconds:.0f} s)", flush=True)
    return all(s.status == "ok" or s.unmet for s in stages)


def install_stages(args, python: str) -> List[Stage]:
    """The wheels into SITE, beside the machine's own packages; rehearsing, first the wheels themselves
    and the image's stand-in (a venv with torch and what the project takes from the image)."""
    stages = []
    if args.rehearse:
        venv_py = str(ROOT / ".venv" / "bin" / "python")
        stages.append(Stage("wheels", [venv_py, "gpu/wheels.py", "--dest", args.wheels],
                            300))
        image = (f"set -e; rm -rf {REHEARSAL_VENV}; {sys.executable} -m venv {REHEARSAL_VENV}; "
                 f"{REHEARSAL_VENV}/bin/pip install -q $({venv_py} gpu/wheels.py "
                 "--image-pins)")
        stages.append(Stage("image", ["bash", "-c", image], 900, ["wheels"]))
    install = (f"rm -rf {SITE} && {python} -m pip install -q --no-index --no-deps --no-compile "
               f"--no-cache-dir --upgrade --target {SITE} {args.wheels}/*.whl")
    stages.append(Stage("install", ["bash", "-c", install], 60 if args.rehearse else 45,
                        ["image"] if args.rehearse else []))
    return stages


def check_stages(args, python: str, bin_dir: Path, work: Path, needs: List[str]) -> List[Stage]:
    """imports, the GPU tier, the sweep and its report, the anchors."""
    cpu = args.rehearse or args.cpu
    sweep = work / "sweep"
    grid = (["+recipe=sweep_tiny_cpu", f"train.steps={args.cpu_steps}", "cuda_graph.warmup_steps=1"]
            if cpu else GPU_SWEEP)
    cell = (["+recipe=tiny_cpu", f"train.steps={args.cpu_steps}", "train.warmup_steps=2"]
            if cpu else GPU_CELL)
    return [
        Stage("imports", [python, "-c", PROBE], 30, needs),
        # -s: the tier prints what it measures but does not assert (the first-group events' cost)
        Stage("gpu_tests", [python, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                            "tests/gpu"], args.tests_timeout, ["imports"]),
        Stage("sweep", [str(bin_dir / "launch"), "-m", *grid, "sweep.repeats=1",
                        f"hydra.sweep.dir={sweep}"], args.sweep_timeout, ["imports"]),
        Stage("report", [str(bin_dir / "launch-report"), str(sweep)], 20, ["sweep"],
              always=True),
        # the dry run's time model for the sweep's cells, against what they measured
        Stage("prediction", [python, "bench/prediction.py", "--runs", str(sweep), "--hardware",
                             "cpu_2core" if cpu else "auto"], 120, ["sweep"]),
        Stage("anchors", [python, "bench/anchors.py", "--out", str(work / "anchors"),
                          "--timeout", str(args.anchors_timeout), *cell],
              args.anchors_timeout, ["imports"]),
        Stage("fusions_off", [str(bin_dir / "launch"), *cell, *FUSIONS_OFF,
                              "logging.wandb.mode=disabled",
                              f"hydra.run.dir={work / 'fusions_off'}"],
              args.fusions_timeout, ["imports"]),
        Stage("fp8", [str(bin_dir / "launch"), *cell, *FP8, "logging.wandb.mode=disabled",
                      f"hydra.run.dir={work / 'fp8'}"], args.fp8_timeout, ["imports"],
              requires=[("gpu", "no GPU here: FP8 runs on one"),
                        ("transformer_engine", "Transformer Engine is not installed here: "
                                               "FP8 GEMMs are its")]),
    ]


def fusions_pair(work: Path) -> Optional[str]:
    """The fusions-on/off line: the anchors' launch run (fusions at their defaults) against the
    fusions_off stage's run of the same cell, tokens/s/GPU each."""
    anchors, off = work / "anchors" / "anchors.json", work / "fusions_off" / "summary.json"
    if not (anchors.exists() and off.exists()):
        return None
    on = json.loads(anchors.read_text())["runs"].get("launch", {}).get("tokens_per_s_per_gpu")
    off = json.loads(off.read_text()).get("metrics", {}).get("tokens_per_s_per_gpu")
    if not (on and off):
        return None
    return (f"[gpu_check] fusions: at their defaults {on:.0f} tokens/s/GPU (the anchors' launch "
            f"run; its log's start line names any left off), all off {off:.0f}: "
            f"on/off {on / off:.3f}")


def fp8_pair(work: Path) -> Optional[str]:
    """The FP8 line: the fp8 stage's run against the anchors' launch run of the same cell in
    bf16, tokens/s/GPU and MFU (each against its own dtype's peak)."""
    anchors, fp8 = work / "anchors" / "anchors.json", work / "fp8" / "summary.json"
    if not (anchors.exists() and fp8.exists()):
        return None
    bf16 = json.loads(anchors.read_text())["runs"].get("launch", {})
    fp8 = json.loads(fp8.read_text()).get("metrics", {})
    if not (bf16.get("tokens_per_s_per_gpu") and fp8.get("tokens_per_s_per_gpu")):
        return None
    def mfu(run: dict) -> str:
        return "unknown" if run.get("mfu") is None else f"{run['mfu']:.1%}"

    return (f"[gpu_check] fp8 (hybrid, delayed): {fp8['tokens_per_s_per_gpu']:.0f} "
            f"tokens/s/GPU, MFU {mfu(fp8)} of the fp8 peak; bf16 (the anchors' launch run) "
            f"{bf16['tokens_per_s_per_gpu']:.0f}, MFU {mfu(bf16)} of the bf16 peak: fp8/bf16 "
            f"{fp8['tokens_per_s_per_gpu'] / bf16['tokens_per_s_per_gpu']:.3f}")


def stage_env(args, bin_dir: Path) -> dict:
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", PYTHONNOUSERSITE="1",
               PYTHONUNBUFFERED="1")
    if not args.venv:  # the wheels beside the machine's packages, their scripts first on PATH
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), env.get("PYTHONPATH")) if p)
        env["PATH"] = os.pathsep.join([str(bin_dir)] + ([str(REHEARSAL_VENV / "bin")]
                                                        if args.rehearse else []) + [env["PATH"]])
    return env


def probe_result(stages: List[Stage]) -> Optional[dict]:
    for stage in stages:
        if stage.name == "imports" and stage.status == "ok":
            return json.loads(stage.output.strip().splitlines()[-1])
    return None


def collect(stages: List[Stage], work: Path, out: Path, passed: bool, rehearse: bool) -> str:
    """Writes OUT's files and returns the screen printed last."""
    record = {"passed": passed, "rehearse": rehearse, "found": probe_result(stages),
              "stages": [{k: v for k, v in asdict(s).items() if k != "output"} for s in stages]}
    (out / "gpu_check.json").write_text(json.dumps(record, indent=2))
    for stage in stages:
        (work / "stages").mkdir(parents=True, exist_ok=True)
        (work / "stages" / f"{stage.name}.log").write_text(stage.output)
    for source in (work / "sweep" / "results.md", work / "sweep" / "report.html",
                   work / "anchors" / "anchors.json"):
        if source.exists():
            shutil.copy(source, out / source.name)
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file() and path.suffix in (".log", ".json", ".jsonl", ".md", ".csv",
                                                  ".txt", ".yaml"):
                tar.add(path, arcname=str(path.relative_to(work)))
    lines = ["", "[gpu_check] " + "; ".join(f"{s.name} {s.status} ({s.seconds:.0f} s)"
                                            for s in stages),
             f"[gpu_check] found: {record['found']}"]
    results = work / "sweep" / "results.md"
    if results.exists():  # its first table: one row per cell
        text = results.read_text().split("\n\n")
        lines += [block for block in text if block.lstrip().startswith("|")][:1]
    prediction = next((s for s in stages if s.name == "prediction"), None)
    if prediction and prediction.status == "ok":
        lines += [l for l in prediction.output.splitlines() if l.startswith(("|", "predicted"))]
    anchors = next((s for s in stages if s.name == "anchors"), None)
    if anchors and anchors.output:
        lines += [l for l in anchors.output.splitlines() if l.startswith(("|", "anchors on"))]
    for pair in (fusions_pair(work), fp8_pair(work)):
        if pair:
            lines.append(pair)
    lines.append(f"[gpu_check] {'all stages passed' if passed else 'NOT all stages passed'}; "
                 f"files in {out}")
    screen = "\n".join(lines)
    (out / "summary.txt").write_text(screen + "\n")
    return screen


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", default=str(ROOT / ".whl"))
    parser.add_argument("--rehearse", action="store_true")
    parser.add_argument("--venv", help="use this venv as it is (no venv made, nothing installed)")
    parser.add_argument("--cpu", action="store_true", help="the tiny CPU sweep (as --rehearse)")
    parser.add_argument("--cpu-steps", type=int, default=8,
                        help="training steps of each run of the tiny CPU sweep and cell")
    stamp = time.strftime("gpu_check_%Y%m%d_%H%M%S")
    parser.add_argument("--work", default=str(ROOT / "sweeps" / stamp),
                        help="the sweep and every log (default: sweeps/gpu_check_TIME)")
    parser.add_argument("--out", default=os.environ.get("OUT"),
                        help="the few files to keep (default: $OUT, else WORK/out)")
    # On the GPU the limits add up to 590 s, within 10 minutes:
    # install 45, imports 30, GPU tier 150 (12 runs of the tiny GPT), sweep 150 (3 runs of the
    # 1.3B GPT), report 20, anchors 135 (the 1.3B cell by launch, bare_loop and Megatron-LM's
    # loop), fusions_off 60 (the 1.3B cell once more). fp8 (60, the cell in FP8) runs only where
    # Transformer Engine is installed, and brings the sum to 650 s: there, lower another limit.
    parser.add_argument("--tests-timeout", type=int, default=150)
    parser.add_argument("--sweep-timeout", type=int, default=150)
    parser.add_argument("--anchors-timeout", type=int, default=135)
    parser.add_argument("--fusions-timeout", type=int, default=60)
    parser.add_argument("--fp8-timeout", type=int, default=60)
    args = parser.parse_args(argv)
    args.wheels = str(Path(args.wheels).resolve())
    work = Path(args.work).resolve()
    out = Path(args.out).resolve() if args.out else work / "out"
    out.mkdir(parents=True, exist_ok=True)
    if args.venv:
        bin_dir = Path(args.venv).resolve() / "bin"
        python, stages = str(bin_dir / "python"), []
    else:
        bin_dir = SITE / "bin"
        python = str(REHEARSAL_VENV / "bin" / "python") if args.rehearse else sys.executable
        stages = install_stages(args, python)
    stages += check_stages(args, python, bin_dir, work, ["install"] if stages else [])
    passed = run_stages(stages, stage_env(args, bin_dir))
    print(collect(stages, work, out, passed, args.rehearse))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
