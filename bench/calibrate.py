"""Measures this machine's constants for the dry run's time model (launcher/estimate/predict.py) and
prints them as a hardware file; `--write NAME` saves it as hardware/NAME.yaml.

    .venv/bin/python bench/calibrate.py [--write cpu_2core] [--ranks 1 2 4] [--layers 1 2 4]

- the matmul rate: fp32 and bf16 torch.mm of 1024 x 1024 matrices on one thread (a rank's
  share when the node's ranks are as many as its cores);
- memory bandwidth: a 256 MiB copy;
- gloo's all-gather for each rank count above 1 (processes of this machine, as the launcher's
  CPU runs start them), for t = latency + (n-1)/n x bytes / bandwidth: the latency is the time
  of a 4 KiB gather a rank, the bandwidth the slope between the two largest (4 and 16 MiB);
- the host's time a transformer layer and a step, for each rank count (the ranks sharing the
  cores as a run's do): `launch` of a calibration model (the gpt recipe, bf16, hidden 32,
  sequence 64, global batch 8: no twin of bench/prediction.py has that shape) with 1, 2 and 4
  layers, twice each in alternating order, the faster of the two counting (this machine has
  slow phases of 10 to 30 s). Less the model's compute and collectives for the same runs, the
  least-squares line through the step times gives a layer's host time (its slope over the
  microbatches) and the step's own (its intercept). An MoE layer's: two runs of an MoE
  calibration model (2 layers, both MoE, the same shape), less the model's step.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = str(Path(sys.executable).parent / "launch")
SIZES = [2**k for k in range(12, 25, 2)]  # bytes each rank gathers: 4 KiB .. 16 MiB
CALIBRATION = ["+recipe=gpt", "model=tiny", "model.hidden_size=32", "model.num_attention_heads=2",
               "model.seq_length=64", "train.global_batch_size=8", "train.micro_batch_size=2",
               "train.steps=25", "train.warmup_steps=5", "train.lr_warmup_steps=2",
               "runtime.device=cpu"]
MOE_CALIBRATION = ["+recipe=moe_small", "model=moe_tiny", "model.hidden_size=32",
                   "model.num_attention_heads=2", "model.seq_length=64",
                   "train.global_batch_size=8", "train.micro_batch_size=2", "train.steps=25",
                   "train.warmup_steps=5", "train.lr_warmup_steps=2", "runtime.device=cpu"]


def matmul_tflops(dtype: torch.dtype, n: int = 1024, repeats: int = 20) -> float:
    torch.set_num_threads(1)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e12


def copy_gbps(nbytes: int = 2**28) -> float:
    src, dst = torch.empty(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8)
    dst.copy_(src)
    start = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    return 2 * nbytes * 5 / (time.perf_counter() - start) / 1e9  # read and write


def _gather_worker(rank: int, ranks: int, port: int, out) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=ranks)
    results = {}
    for size in SIZES:
        mine = torch.zeros(size // 4, dtype=torch.float32)
        whole = torch.empty(size // 4 * ranks, dtype=torch.float32)
        times = []
        for _ in range(7):
            dist.barrier()
            start = time.perf_counter()
            dist.all_gather_into_tensor(whole, mine)
            times.append(time.perf_counter() - start)
        results[size * ranks] = statistics.median(times[2:])
    if rank == 0:
        out.put(results)
    dist.destroy_process_group()


def allgather(ranks: int) -> dict:
    """{latency_us, gbps} fitted over the whole gathered sizes."""
    queue = mp.get_context("spawn").Queue()
    mp.spawn(_gather_worker, args=(ranks, 29600 + ranks, queue), nprocs=ranks)
    times = queue.get()
    sizes = sorted(times)
    latency = times[sizes[0]]  # the smallest message: all latency
    big, bigger = sizes[-2], sizes[-1]  # the two largest: the bandwidth
    slope = (times[bigger] - times[big]) / ((ranks - 1) / ranks * (bigger - big))
    return {"latency_us": round(latency * 1e6, 1), "intra_node_gbps": round(1 / slope / 1e9, 3)}


def steady_step_s(args: list, folder: str, round_: int) -> float:
    """The median steady-state step time of `launch ARGS`."""
    run_dir = os.path.join(folder, f"run{round_}-{len(os.listdir(folder))}")
    subprocess.run([LAUNCH, *args, f"hydra.run.dir={run_dir}"], check=True,
                   capture_output=True, timeout=600)
    steps = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return statistics.median(s["step_time_s"] for s in steps if s["step"] > 5)


def host_times(figures: dict, ranks: int, layers: list) -> tuple:
    """({layer_host_us, step_host_us}, the runs' (layers, step time)) for `ranks` ranks: the
    least-squares line through the measured minus the modelled step times of runs of 1, 2 and 4
    layers (the faster of two runs each, run in alternating order); its slope over the
    microbatches is a layer's host time, its intercept the step's own."""
    from launcher.cli import compose
    from launcher.config import Hardware
    from launcher.estimate.predict import simulate, units_of
    from launcher.estimate.topology import Cluster

    entry = {**figures["by_ranks"][ranks], "layer_host_us": 0.0, "step_host_us": 0.0}
    bare = Hardware(**{**figures, "by_ranks": {ranks: entry}})
    cluster = Cluster(bare, ranks, 1)
    with tempfile.TemporaryDirectory() as folder:
        order = list(layers) + list(reversed(layers))
        measured = [(n, steady_step_s([*CALIBRATION, f"model.num_layers={n}",
                                       f"runtime.nproc_per_node={ranks}"], folder, i))
                    for i, n in enumerate(order)]
    xs, ys = [], []
    for n in layers:  # the faster of the two runs: this machine has slow phases of 10-30 s
        fastest = min(seconds for m, seconds in measured if m == n)
        cfg = compose([*CALIBRATION, f"model.num_layers={n}", f"runtime.nproc_per_node={ranks}"])
        xs.append(n)
        ys.append(fastest - simulate(cfg, units_of(cfg, cluster, "bf16"), cluster, True).step_s)
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
             / sum((x - mean_x) ** 2 for x in xs))
    microbatches = 8 // (2 * ranks)
    host = {"layer_host_us": round(slope / microbatches * 1e6, 1),
            "step_host_us": round(max(mean_y - slope * mean_x, 0.0) * 1e6, 1)}
    return {**host, "moe_layer_host_us": moe_host_us(figures, ranks, host)}, measured


def moe_host_us(figures: dict, ranks: int, host: dict) -> float:
    """An MoE layer's host time for `ranks` ranks: the faster of two runs of the MoE
    calibration model (2 layers, both MoE; expert parallelism up to 2), less the model's step
    with no host time in its layers, over its layers and microbatches."""
    from launcher.cli import compose
    from launcher.config import Hardware
    from launcher.estimate.predict import simulate, units_of
    from launcher.estimate.topology import Cluster

    args = [*MOE_CALIBRATION, f"runtime.nproc_per_node={ranks}",
            f"parallel.expert_model_parallel_size={min(ranks, 2)}"]
    with tempfile.TemporaryDirectory() as folder:
        fastest = min(steady_step_s(args, folder, i) for i in range(2))
    entry = {**figures["by_ranks"][ranks], **host, "moe_layer_host_us": 0.0}
    cluster = Cluster(Hardware(**{**figures, "by_ranks": {ranks: entry}}), ranks, 1)
    cfg = compose(args)
    modelled = simulate(cfg, units_of(cfg, cluster, "bf16"), cluster, True).step_s
    return round((fastest - modelled) / (8 // (2 * ranks)) / 2 * 1e6, 1)


def measure_machine(ranks: list, layers: list) -> dict:
    """This machine's hardware figures (a hardware file's fields but `sources`), measured now:
    the scalars from the first of `ranks`, by_ranks for each; host times from runs of the
    calibration models with `layers` layers."""
    cores = len(os.sched_getaffinity(0))
    fp32, bf16 = matmul_tflops(torch.float32), matmul_tflops(torch.bfloat16)
    by_ranks = {n: allgather(n) if n > 1 else {"latency_us": 0.0, "intra_node_gbps": 1.0}
                for n in ranks}
    many = next((n for n in ranks if n > 1), ranks[0])
    figures = {
        "name": f"this machine's CPU ({cores} cores)",
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "tflops": {"fp32": round(fp32, 4), "bf16": round(bf16, 4)}, "matmul_fraction": 1.0,
        "hbm_gbps": round(copy_gbps(), 2), "intra_node_gbps": by_ranks[many]["intra_node_gbps"],
        "inter_node_gbps": by_ranks[many]["intra_node_gbps"],
        "latency_us": by_ranks[many]["latency_us"], "nvlink_domain": 64, "gpus_per_node": 1,
        "layer_host_us": 0.0, "moe_layer_host_us": None, "step_host_us": 0.0,
        "async_host": False, "cores": cores,
        "by_ranks": by_ranks,
    }
    for n in ranks:
        host, measured = host_times(figures, n, layers)
        by_ranks[n].update(host)
        print(f"# {n} rank(s), steady step (layers: ms): "
              + ", ".join(f"{k}: {s * 1e3:.1f}" for k, s in measured), flush=True)
    figures.update({k: by_ranks[ranks[0]][k] for k in ("layer_host_us", "moe_layer_host_us",
                                                       "step_host_us")})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="NAME", help="save as hardware/NAME.yaml")
    parser.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4],
                        help="rank counts to measure (the first is the scalars')")
    parser.add_argument("--layers", nargs="+", type=int, default=[1, 2, 4],
                        help="layer counts of the calibration model's runs")
    args = parser.parse_args()
    text = render(measure_machine(args.ranks, args.layers))
    print(text)
    if args.write:
        (ROOT / "hardware" / f"{args.write}.yaml").write_text(text)


def render(figures: dict) -> str:
    from omegaconf import OmegaConf

    day = time.strftime("%Y-%m-%d")
    source = f"bench/calibrate.py on this machine, {day}"
    sources = {key: source for key in ("tflops", "hbm_gbps", "by_ranks", "layer_host_us",
                                       "moe_layer_host_us", "step_host_us", "intra_node_gbps",
                                       "latency_us")}
    sources["matmul_fraction"] = "1: tflops is the measured rate itself"
    sources["inter_node_gbps"] = "one machine: gloo over loopback, as intra_node_gbps"
    body = OmegaConf.to_yaml(OmegaConf.create({**figures, "sources": sources}))
    return (f"# This project's CPU machines, measured by {source}.\n"
            "# Each rank computes on one core; ranks beyond `cores` share them.\n" + body)


if __name__ == "__main__":
    main()
