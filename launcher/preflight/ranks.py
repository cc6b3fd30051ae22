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

from launcher.config import Stated


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

    def stated(self) -> Stated:
        """The world this starter gives, as launcher.config.world compares it with the config's,
        named by the keys (or flags) a user changes."""
        keys = {"submitit": ("hydra.launcher.tasks_per_node", "hydra.launcher.nodes"),
                "torchrun": ("torchrun's --nproc-per-node", "torchrun's --nnodes")}.get(
                    self.starter, ("runtime.nproc_per_node", "runtime.nnodes"))
        return Stated(self.local_world_size, self.num_nodes, *keys)


def is_submitit(launcher) -> bool:
    """Whether a `hydra.launcher` node is hydra-submitit-launcher's (Slurm or its local twin)."""
    return "hydra_submitit_launcher" in str(launcher.get("_target_", ""))


def planned_world(launcher) -> Optional[Layout]:
    """The world a submitit launcher's tasks (hydra/launcher=slurm, submitit_slurm,
    submitit_local: the `hydra.launcher` node) give each job; None for any other launcher:
    `launch` starts the ranks itself."""
    if not is_submitit(launcher):
        return None
    local = int(launcher.tasks_per_node)
    return Layout("submitit", 0, 0, local * int(launcher.nodes), local, "", 0)


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


def rank_overrides(rank: int) -> list:
    """Hydra overrides for a rank other than 0 when every rank runs Hydra (torchrun, submitit):
    rank 0 keeps the config snapshot and `cli.log`; rank N logs to its own `cli.rankN.log`."""
    if rank == 0:
        return []
    return ["hydra.output_subdir=null",
            "hydra.job_logging.handlers.file.filename="
            f"${{hydra.runtime.output_dir}}/${{hydra.job.name}}.rank{rank}.log"]
