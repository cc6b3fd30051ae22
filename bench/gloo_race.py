"""The minimal reproducer of torch's ProcessGroupGloo status race (docs/crashes.md), and its
count with torch's default gloo groups against the launcher's (launcher.run.gloo: one worker
thread per group).

    .venv/bin/python bench/gloo_race.py [--trials 10] [--iterations 20000] [--world 1]

Each trial is a fresh process that keeps eight coalesced all-gathers of one gloo group in flight
(as Megatron-FSDP's prefetch does), `--iterations` times, and nothing else: no megatron, no
launcher code but the one line that sets the workers. Prints, for each setting, the trials a
signal killed, the signals, and how long the killed ones lived. Exit 1 if a trial with the
launcher's setting died.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def reproducer(iterations: int) -> None:
    """The whole reproducer: pure torch, any rank of any world size."""
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _coalescing_manager

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    shards = [torch.randn(64) for _ in range(8)]
    outputs = [torch.empty(64 * world) for _ in range(8)]
    for _ in range(iterations):
        managers = []
        for shard, output in zip(shards, outputs):  # 8 in flight: both workers of the group busy
            with _coalescing_manager(async_ops=True) as manager:
                dist.all_gather_into_tensor(output, shard, async_op=True)
            managers.append(manager)
        for manager in managers:
            manager.wait()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trial(setting: str, iterations: int, world: int, timeout: float) -> tuple:
    """(signal name or None, seconds) of one run of the reproducer on `world` ranks."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world), PYTHONPATH=str(ROOT))
    start = time.monotonic()
    ranks = [subprocess.Popen([sys.executable, __file__, "--child", setting,
                               "--iterations", str(iterations)],
                              env=dict(env, RANK=str(r)), stderr=subprocess.DEVNULL)
             for r in range(world)]
    deadline = start + timeout
    codes = []
    for rank in ranks:
        try:
            codes.append(rank.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append("timeout")
    for rank in ranks:  # a peer of a killed rank waits for it: end it
        if rank.poll() is None:
            rank.kill()
            rank.wait()
    seconds = time.monotonic() - start
    killed = [c for c in codes if isinstance(c, int) and c < 0]
    if killed:
        return signal.Signals(-killed[0]).name, seconds
    return ("timeout" if "timeout" in codes else None), seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300, help="seconds, each trial")
    parser.add_argument("--child", choices=["torch", "launcher"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.child == "launcher":
            from launcher.run import gloo
            gloo.use_one_worker_per_group()
        reproducer(args.iterations)
        return 0
    failed = False
    for setting, label in (("torch", "torch's default (2 workers per group)"),
                           ("launcher", "launcher.run.gloo (1 worker per group)")):
        results = [trial(setting, args.iterations, args.world, args.timeout)
                   for _ in range(args.trials)]
        deaths = [(how, s) for how, s in results if how]
        lived = ", ".join(f"{s:.1f}" for _, s in deaths) or "-"
        print(f"{label}: {len(deaths)} of {args.trials} trials died "
              f"({', '.join(sorted({how for how, _ in deaths})) or 'none'}); "
              f"seconds lived: {lived}; {args.iterations} x 8 all-gathers each, "
              f"{args.world} rank(s)", flush=True)
        failed = failed or (setting == "launcher" and bool(deaths))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
