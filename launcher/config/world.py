"""The one world of a run: ranks per node and nodes, derived from every place a user states them.

A world can be stated in three places: the runtime section (`runtime.nproc_per_node`,
`runtime.nnodes`: what `launch` starts), the starter's own (a Slurm launcher's
`hydra.launcher.tasks_per_node` and `hydra.launcher.nodes`, or torchrun's flags) and the cluster
section (`cluster.gpus_per_node`, `cluster.nodes`). `resolve_world` is the only place they are
combined: what the dry run estimates and predicts for, what the pre-flight checks and what the
spawner starts all come from it. Statements that disagree are refused; what nobody states takes
its default: `cluster.gpu`'s hardware file's `gpus_per_node` where a cluster is named, else 1.
"""

from dataclasses import dataclass
from typing import List, Optional

from launcher.config.cluster import ClusterConfig, hardware_names, load_hardware
from launcher.config.error import ConfigError
from launcher.config.sections import RuntimeConfig


@dataclass(frozen=True)
class Stated:
    """One place's statement of the world; None where it says nothing."""

    per_node: Optional[int]
    nodes: Optional[int]
    per_node_key: str
    """The key (or flag) a user changes for the ranks per node, as the user writes it."""
    nodes_key: str


@dataclass(frozen=True)
class World:
    """The world of a run, and the key each of its two numbers came from."""

    per_node: int
    nodes: int
    per_node_key: str
    nodes_key: str

    @property
    def size(self) -> int:
        return self.per_node * self.nodes

    @property
    def source(self) -> str:
        """Where the size came from, as a user would change it."""
        return f"{self.per_node_key} x {self.nodes_key}"

    def describe(self) -> str:
        """`16 (2 node(s) of 8: hydra.launcher.tasks_per_node x hydra.launcher.nodes)`."""
        return f"{self.size} ({self.nodes} node(s) of {self.per_node}: {self.source})"


def runtime_stated(runtime: RuntimeConfig) -> Stated:
    return Stated(runtime.nproc_per_node, runtime.nnodes, "runtime.nproc_per_node",
                  "runtime.nnodes")


def cluster_stated(cluster: ClusterConfig) -> Stated:
    return Stated(cluster.gpus_per_node, cluster.nodes, "cluster.gpus_per_node", "cluster.nodes")


def resolve_world(runtime: RuntimeConfig, cluster: ClusterConfig,
                  starter: Optional[Stated] = None) -> World:
    """The world every stage uses. starter: what a Slurm launcher will give each job (planned
    before submitting) or what torchrun / Slurm gave this process; None: `launch` starts the
    ranks itself. Raises ConfigError where two statements name different numbers."""
    stated = ([starter] if starter else []) + [runtime_stated(runtime), cluster_stated(cluster)]
    named = cluster.gpu is not None
    per_node, per_node_key = agreed(stated, "per_node", "per_node_key")
    if per_node is None:  # nobody said: a named cluster's node, else one rank
        per_node = cluster.hardware().gpus_per_node if named else 1
        per_node_key = "cluster.gpus_per_node" if named else "runtime.nproc_per_node"
    nodes, nodes_key = agreed(stated, "nodes", "nodes_key")
    if nodes is None:
        nodes, nodes_key = 1, "cluster.nodes" if named else "runtime.nnodes"
    return World(per_node, nodes, per_node_key, nodes_key)


def agreed(stated: List[Stated], number: str, key: str) -> tuple:
    """(value, key) of the first statement that names `number`, after checking that every later
    one names the same; (None, "") where none does."""
    first = None
    for s in stated:
        value = getattr(s, number)
        if value is None:
            continue
        if first is None:
            first = s
        elif value != getattr(first, number):
            raise ConfigError(
                f"{getattr(s, key)}={value} and {getattr(first, key)}={getattr(first, number)} "
                f"name two worlds; set {getattr(s, key)}={getattr(first, number)} or null")
    return (getattr(first, number), getattr(first, key)) if first else (None, "")


def recipe_note(runtime: RuntimeConfig, cluster: ClusterConfig, world: World,
                recipe: Optional[str]) -> str:
    """The dry run's line where the recipe is written for another world size (cluster.recipe_*;
    the same GPUs in other nodes, 64 GB200s as 16 x 4, are the recipe's), with the keys that
    give it: those that decided this world; "" where they agree or the recipe names no world."""
    per_node, nodes = cluster.recipe_gpus_per_node, cluster.recipe_nodes or 1
    if per_node is None or per_node * nodes == world.size:
        return ""
    meant = (f"one {per_node}-GPU node" if nodes == 1
             else f"{nodes} nodes of {per_node} GPUs ({per_node * nodes} GPUs)")
    fix, other = [], []
    if per_node != world.per_node:
        fix.append(f"{world.per_node_key}={per_node}")
        if cluster.gpu is None and runtime.nproc_per_node is None and \
                cluster.gpus_per_node is None:  # a named cluster's node would give it
            other.append(f"cluster.gpu={gpu_with(per_node)}")
    if nodes != world.nodes:
        fix.append(f"{world.nodes_key}={nodes}")
        if world.nodes_key == "runtime.nnodes":
            fix.append("runtime.rdzv_endpoint=HOST:PORT")
            other += [f"cluster.nodes={nodes}"] if runtime.nnodes is None else []
    name = f"recipes/{recipe}.yaml" if recipe else "the recipe"
    return (f"[dry run] {name} is written for {meant}; this dry run is for world {world.size} "
            f"({world.source}): set {' '.join(fix)}"
            + (f" (or name its cluster: {' '.join(other)})" if other else ""))


def gpu_with(per_node: int) -> str:
    """A hardware file whose nodes hold `per_node` GPUs (h100_sxm first), for a hint."""
    names = [n for n in hardware_names() if load_hardware(n).gpus_per_node == per_node]
    return "h100_sxm" if "h100_sxm" in names else (names[0] if names else "GPU")
