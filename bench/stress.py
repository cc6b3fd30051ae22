"""Runs the shapes that crashed (issue 27: a SIGSEGV of CPU runs, 1 and 2 ranks) many times and
counts the runs that died of a signal, with where they died.

    .venv/bin/python bench/stress.py [--runs 200] [--steps 12] [--minutes M] [--out DIR]
                                     [--load both] [--overrides KEY=VALUE ...]

Each run is `launch +recipe=gpt model=tiny` on the CPU (the gpt recipe shrunk, wandb offline as
the recipe has it), --steps steps (12, as the crashing sweep; more steps a run spend less of
the machine's time starting processes), cycling over ranks {1, 2} x precision {fp32, bf16} x the switch
{true, false} x a CPU-bound job beside it or not (`--load`: both, on, off); `--overrides` adds
launch overrides to every run (`profile=torch train.eval_interval=5`: the profiling window's
shape, docs/crashes.md). A run killed by a
signal keeps its folder (crash.rankN.log: every thread's stack) under OUT/crashes/; the others
are deleted. Every run is a line of OUT/runs.jsonl (appended: a second invocation with the same
--out adds to the count). Prints each signal death as it happens, and at the end the count per
shape and the deaths grouped by where they died.
"""

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = str(Path(sys.executable).parent / "launch")
BURNER = "while True: pass"


def shapes(load: str):
    loads = {"both": (False, True), "on": (True,), "off": (False,)}[load]
    return itertools.cycle([
        {"ranks": r, "precision": p, "prefetch": s, "load": l}
        for l in loads for r in (1, 2) for p in ("fp32", "bf16") for s in ("true", "false")])


def run_once(shape: dict, steps: int, folder: Path, timeout: float, overrides: list) -> tuple:
    burner = subprocess.Popen([sys.executable, "-c", BURNER]) if shape["load"] else None
    run_dir = folder / f"run-{time.time_ns()}"
    env = dict(os.environ, WANDB_SILENT="true", HOME=str(folder / "home"))
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [LAUNCH, "+recipe=gpt", "model=tiny", f"train.steps={steps}", "train.warmup_steps=2",
             "train.lr_warmup_steps=2", "train.global_batch_size=8", "train.micro_batch_size=2",
             f"train.precision={shape['precision']}",
             f"fsdp.prefetch_first_param_group={shape['prefetch']}", "runtime.device=cpu",
             f"runtime.nproc_per_node={shape['ranks']}", *overrides,
             f"hydra.run.dir={run_dir}"],
            capture_output=True, text=True, env=env, timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    finally:
        if burner:
            burner.kill()
            burner.wait()
    record = {**shape, "steps": steps, "exit": code,
              "seconds": round(time.monotonic() - start, 1)}
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    record["status"] = summary.get("status", "no summary")
    if summary.get("status") not in (None, "ok"):
        record["message"] = summary.get("message", "")
    return record, run_dir


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=12, help="training steps of each run")
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    parser.add_argument("--out", default=str(ROOT / "sweeps" / "stress"))
    parser.add_argument("--load", choices=["both", "on", "off"], default="both")
    parser.add_argument("--timeout", type=float, default=300, help="seconds, each run")
    parser.add_argument("--overrides", nargs="*", default=[], help="launch overrides, every run")
    args = parser.parse_args(argv)
    out = Path(args.out)
    (out / "crashes").mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else None
    work = out / "work"
    for n, shape in zip(range(args.runs), shapes(args.load)):
        if deadline and time.monotonic() > deadline:
            break
        record, run_dir = run_once(shape, args.steps, work, args.timeout, args.overrides)
        with open(out / "runs.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if record["status"] != "ok":
            kept = out / "crashes" / run_dir.name
            shutil.move(str(run_dir), kept)
            print(f"run {n + 1}: {record['status']} {shape}: {record.get('message', '')} "
                  f"(kept in {kept})", flush=True)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    print(tally(out / "runs.jsonl"))
    return 0


def tally(path: Path) -> str:
    records = [json.loads(l) for l in path.read_text().splitlines()]
    per_shape = Counter((r["ranks"], r["precision"], r["prefetch"], r["load"]) for r in records)
    died = [r for r in records if r["status"] == "rank_died"]
    died_per_shape = Counter((r["ranks"], r["precision"], r["prefetch"], r["load"]) for r in died)
    steps = sum(r.get("steps", 12) for r in records)
    lines = [f"{len(records)} runs ({steps} steps), {len(died)} killed by a signal, "
             f"{sum(r['status'] not in ('ok', 'rank_died') for r in records)} failed otherwise",
             "ranks precision prefetch load: runs, signal deaths"]
    lines += [f"  {k[0]} {k[1]} {k[2]} {'on ' if k[3] else 'off'}: {v}, {died_per_shape[k]}"
              for k, v in sorted(per_shape.items())]
    where = Counter(r.get("message", "").split(" at ", 1)[-1] for r in died)
    lines += [f"  {count} x at {frames}" for frames, count in where.most_common()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
