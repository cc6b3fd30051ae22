"""A rank's setup around the model: megatron's process groups and every RNG seeded
(`init_parallel`, Megatron-LM's initialize.py), the hosts and environments gathered from every
rank (`gather_hosts`), rank 0's start line (`start_line`), the step's shape (`Batch`) and the
rank's microbatches (`build_microbatches`). Import only after `cpu_compat.activate()` on a CPU:
it imports megatron."""

import os
import random
import socket
from dataclasses import dataclass

import numpy as np
import torch
from megatron.core import parallel_state, tensor_parallel
from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

from launcher.config import Config, ParallelConfig
from launcher.preflight.environment import RECORDED
from launcher.preflight.fusions import Fusions


def init_parallel(parallel: ParallelConfig, optimizer_instances: int, seed: int, timeout_s: int,
                  graph_safe_rng: bool) -> None:
    """Megatron's process groups (with the run's collective timeout; HSDP's when
    fsdp.num_distributed_optimizer_instances > 1), then every RNG seeded."""
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=parallel.tensor_model_parallel_size,
        pipeline_model_parallel_size=parallel.pipeline_model_parallel_size,
        context_parallel_size=parallel.context_parallel_size,
        expert_model_parallel_size=parallel.expert_model_parallel_size,
        num_distributed_optimizer_instances=optimizer_instances,
        distributed_timeout_minutes=timeout_s / 60,  # timedelta(minutes=...) takes a float
    )
    seed_rngs(seed + 100 * parallel_state.get_pipeline_model_parallel_rank(), graph_safe_rng)


def seed_rngs(seed: int, graph_safe_rng: bool) -> None:
    """Megatron-LM's _set_random_seed (megatron/training/initialize.py): Python, numpy, torch,
    then megatron's model-parallel RNG tracker, graph-safe (its states are torch.Generators that a
    CUDA graph can register) when a CUDA-graph impl is on: `use_cudagraphable_rng=(cuda_graph_impl
    != "none")`."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    # force_reset_rng: the tracker is made anew for this seeding, graph-safe or not, even where
    # one exists already (a run seeds once per process, so only a test can see the difference)
    tensor_parallel.model_parallel_cuda_manual_seed(seed, use_cudagraphable_rng=graph_safe_rng,
                                                    force_reset_rng=True)


@dataclass(frozen=True)
class Hosts:
    """Where the job's ranks run, gathered from every rank."""

    devices_by_host: dict
    """{host: [device of each of its ranks]}: the job's host list."""
    env: list
    """The variables of launcher.preflight.environment each rank saw, in rank order."""


def gather_hosts(on_cpu: bool) -> Hosts:
    """Collective: every rank's host, device and environment."""
    mine = (socket.gethostname(), "cpu" if on_cpu else torch.cuda.get_device_name(),
            {name: os.environ.get(name) for name in RECORDED})
    everyone = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, mine)
    devices = {}
    for host, device, _ in everyone:
        devices.setdefault(host, []).append(device)
    return Hosts(devices, [env for _, _, env in everyone])


def start_line(cfg: Config, hosts: Hosts, world_size: int, run_dir: str, fusions: Fusions,
               on_cpu: bool) -> str:
    """Rank 0's start line, its first: the devices, the wrapper, the switch, the graphs, the
    run's folder, and the fusions Megatron-LM would use that this run goes without."""
    devices = hosts.devices_by_host
    on_hosts = f" on {len(devices)} hosts" if len(devices) > 1 else ""
    off = fusions.start_line()
    return (f"[launch] {devices[socket.gethostname()][0]} x{world_size}{on_hosts}, "
            f"{FullyShardedDataParallel.__name__} ({cfg.fsdp.sharding_strategy.value}), "
            f"prefetch_first_param_group={cfg.fsdp.prefetch_first_param_group}, "
            f"cuda_graph.impl={cfg.cuda_graph.impl.value}"
            + (" through FullCudaGraphWrapper, not captured: a CPU runs it eagerly"
               if cfg.cuda_graph.enabled and on_cpu else "")
            + f"; outputs in {run_dir}"
            + (f"; {off}" if off else ""))


@dataclass(frozen=True)
class Batch:
    """The shape of one step, as megatron's schedule takes it."""

    num_microbatches: int
    seq_length: int
    micro_batch_size: int

    @classmethod
    def of(cls, cfg: Config) -> "Batch":
        """After megatron's groups exist: the data-parallel size divides the global batch."""
        train, dp_size = cfg.train, parallel_state.get_data_parallel_world_size()
        return cls(train.global_batch_size // (train.micro_batch_size * dp_size),
                   cfg.model.seq_length, train.micro_batch_size)

    def schedule(self) -> dict:
        """The schedule's keyword arguments for this shape."""
        return {"num_microbatches": self.num_microbatches, "seq_length": self.seq_length,
                "micro_batch_size": self.micro_batch_size}


def build_microbatches(cfg: Config, run_dir: str, first_step: int, device: torch.device) -> tuple:
    """This rank's training microbatches (from `first_step` on) and validation microbatches."""
    from launcher.data.datasets import build_datasets, microbatches

    train, eval_ = cfg.train, cfg.train.eval_interval
    evaluations = train.steps // eval_ + 1 if eval_ else 0
    datasets = build_datasets(
        cfg.data, cfg.model.seq_length, cfg.model.vocab_size, train.seed,
        (train.steps * train.global_batch_size,
         max(evaluations * train.eval_iters * train.global_batch_size, 1)),
        cfg.data.cache_dir or os.path.join(run_dir, "data_cache"))
    share = (train.micro_batch_size, train.global_batch_size,
             parallel_state.get_data_parallel_rank(),
             parallel_state.get_data_parallel_world_size())
    training = microbatches(datasets[0], *share, cfg.data.fixed_batch, device, first_step)
    # validation batch k of the run is the same whichever step the run resumed at
    done = (first_step - 1) // eval_ * train.eval_iters + 1 if eval_ else 1
    return training, microbatches(datasets[1], *share, False, device, done)
