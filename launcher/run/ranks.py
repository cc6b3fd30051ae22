"""Who this process is in the job, whichever starter ran it.

Three starters: `launch` itself (torch's elastic launch, as torchrun does: it sets RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT in each rank), torchrun running
`launch` (the same variables, already set in this process), and Slurm through submitit (one task
per rank; submitit's TorchDistributedEnvironment exports the same variables from SLURM_*). After
`layout()`, the training code reads only those variables and never knows which starter ran it.
Imports no torch.
"""

import os
from dataclasses import dataclass
from typing import Optional

from launcher.config import LAUNCH_WORLD, ConfigError, RuntimeConfig


@dataclass(frozen=True)
class Layout:
    starter: str
    """launch | torchrun | submitit."""
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    master_addr: str
    master_port: int

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.local_world_size

    @property
    def world_source(self) -> str:
        """Where the world size came from, as a user would change it."""
        return {"submitit": "hydra.launcher.nodes x hydra.launcher.tasks_per_node",
                "torchrun": "torchrun's --nnodes x --nproc-per-node"}.get(self.starter,
                                                                          LAUNCH_WORLD)


def external_starter() -> Optional[str]:
    """'submitit' or 'torchrun' when one of them started this process, else None (`launch`
    starts the ranks itself)."""
    if os.environ.get("SUBMITIT_EXECUTOR"):
        return "submitit"
    if "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ:
        return "torchrun"
    return None


def layout(starter: str = "launch") -> Layout:
    """This rank's place in the job; under submitit, first exports torch's variables."""
    if starter == "submitit":
        from submitit.helpers import TorchDistributedEnvironment

        # Each task sees every GPU of its node and picks its own by LOCAL_RANK.
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    env = os.environ
    return Layout(starter, int(env["RANK"]), int(env["LOCAL_RANK"]), int(env["WORLD_SIZE"]),
                  int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])), env["MASTER_ADDR"],
                  int(env["MASTER_PORT"]))


def check_runtime_matches(runtime: RuntimeConfig, found: Layout) -> None:
    """runtime.nproc_per_node / nnodes, where set, must be what the starter gave."""
    for key, wanted, got in (("nproc_per_node", runtime.nproc_per_node, found.local_world_size),
                             ("nnodes", runtime.nnodes, found.num_nodes)):
        if wanted is not None and wanted != got:
            raise ConfigError(f"runtime.{key}={wanted}, but {found.starter} started {got} "
                              f"({found.world_source}); set runtime.{key}={got} or null")


def rank_overrides(rank: int) -> list:
    """Hydra overrides for a rank other than 0 when every rank runs Hydra (torchrun, submitit):
    rank 0 keeps the config snapshot and `cli.log`; rank N logs to its own `cli.rankN.log`."""
    if rank == 0:
        return []
    return ["hydra.output_subdir=null",
            "hydra.job_logging.handlers.file.filename="
            f"${{hydra.runtime.output_dir}}/${{hydra.job.name}}.rank{rank}.log"]
