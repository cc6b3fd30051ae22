"""The cluster a dry run predicts for (`cluster.gpu`, `cluster.gpus_per_node`, `cluster.nodes`),
and the hardware files it names: hardware/<name>.yaml, one per GPU kind (and one for
this project's CPU machines), each figure with its public source or the command that measured
it. Hardware is data: a new GPU is a new file, no code.
"""

from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Dict, Optional

from launcher.config.choices import ClusterKernels
from launcher.config.error import ConfigError, size_or_null

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "hardware"


@dataclass(frozen=True)
class Hardware:
    """One accelerator kind and the network its machines come with, per GPU (per rank on a CPU)."""

    name: str
    memory_gib: float
    """Device memory (a CPU: the machine's RAM)."""
    tflops: Dict[str, float]
    """Peak dense matmul rate by dtype (bf16, fp8; fp32 on a CPU), TFLOP/s, no sparsity."""
    matmul_fraction: float
    """The share of `tflops` a large matmul reaches (measured, see `sources`); the model's
    compute rate is tflops x matmul_fraction."""
    hbm_gbps: float
    """Memory bandwidth, GB/s: the optimizer step streams its state at this rate."""
    intra_node_gbps: float
    """All-gather / reduce-scatter bus bandwidth per GPU inside the NVLink domain, GB/s, one
    direction."""
    inter_node_gbps: float
    """The same across NVLink domains (the NIC per GPU), GB/s."""
    latency_us: float
    """Fixed cost of one collective, microseconds."""
    nvlink_domain: int
    """GPUs one NVLink domain joins (8 in a DGX; 72 in a GB200 NVL72 rack)."""
    gpus_per_node: int
    """GPUs (ranks) per node, the default of cluster.gpus_per_node."""
    layer_host_us: float
    """Host time to launch one transformer layer's forward and backward of one microbatch,
    microseconds: on a GPU hidden behind the layer's kernels unless they are shorter, and gone
    under a full-iteration CUDA graph; on a CPU (async_host false) it adds to the compute."""
    moe_layer_host_us: Optional[float]
    """The same for a mixture-of-experts layer (router, dispatch, each expert's MLP, combine);
    null: layer_host_us."""
    step_host_us: float
    """Host time between two steps (the step's end, the next batch, the schedule's set-up),
    microseconds: a GPU idles through it after the launcher's per-step sync point."""
    async_host: bool
    """True on a GPU: the host enqueues kernels ahead of the device. False on a CPU."""
    cores: int = 0
    """A CPU: the cores its ranks share (ranks beyond it divide the compute rate); 0: a GPU."""
    by_ranks: Optional[Dict[int, Dict[str, float]]] = None
    """A CPU: figures bench/calibrate.py measured with that many ranks on the machine at once
    ({ranks: {latency_us, intra_node_gbps, layer_host_us, moe_layer_host_us, step_host_us}}),
    in place of the
    scalars of the same names for the nearest rank count: gloo's all-gather, and the host's
    time with its ranks sharing the cores as they do in a run."""
    sources: Optional[Dict[str, str]] = None
    """figure -> where it comes from (a vendor page, or the command that measured it)."""

    def at(self, name: str, ranks: int) -> float:
        """Figure `name` for `ranks` ranks on a node: by_ranks' nearest entry, else the scalar."""
        if self.by_ranks:
            nearest = min(self.by_ranks, key=lambda n: (abs(n - ranks), -n))
            if name in self.by_ranks[nearest]:
                return self.by_ranks[nearest][name]
        value = getattr(self, name)
        return self.layer_host_us if value is None and name == "moe_layer_host_us" else value

    @property
    def measured_host(self) -> bool:
        """Whether the host figures were measured with the ranks sharing the cores (by_ranks)."""
        return bool(self.by_ranks) and any("layer_host_us" in v for v in self.by_ranks.values())

    def collective(self, ranks: int, across_nodes: bool, per_node: int) -> tuple:
        """(latency in s, bandwidth in bytes/s) of one collective over `ranks` ranks."""
        gbps = self.inter_node_gbps if across_nodes else self.at("intra_node_gbps", per_node)
        return self.at("latency_us", per_node) * 1e-6, gbps * 1e9


def hardware_names() -> list:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml"))


@lru_cache(maxsize=None)
def load_hardware(name: str) -> Hardware:
    """The figures of hardware/<name>.yaml."""
    from omegaconf import OmegaConf

    path = HARDWARE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"cluster.gpu={name} has no hardware file; pick one of "
                          f"{', '.join(hardware_names())} (hardware/), or add "
                          f"hardware/{name}.yaml")
    values = OmegaConf.to_container(OmegaConf.load(path))
    known = {f.name for f in fields(Hardware)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"hardware/{name}.yaml has {unknown[0]}, which is not a "
                          f"hardware figure; use {', '.join(sorted(known))}")
    if values.get("by_ranks"):
        values["by_ranks"] = {int(k): v for k, v in values["by_ranks"].items()}
    return Hardware(**values)


@dataclass
class ClusterConfig:
    """The cluster `runtime.dry_run=true` predicts step time, throughput and MFU for. Its sizes
    state the world as the runtime section's do: a run starts the world its dry run predicts
    (launcher.config.world)."""

    gpu: Optional[str] = None
    """A file of hardware/ (h100_sxm, h200_sxm, b200, gb200, cpu_2core); null: the dry
    run predicts no time."""
    gpus_per_node: Optional[int] = None
    """Ranks (GPUs) per node, as runtime.nproc_per_node states it for a run; null: what
    runtime.nproc_per_node or the Slurm launcher says, else the hardware file's gpus_per_node
    (launcher.config.world)."""
    nodes: Optional[int] = None
    """Nodes, as runtime.nnodes states it for a run; null: what runtime.nnodes or the Slurm
    launcher says, else 1."""
    recipe_gpus_per_node: Optional[int] = None
    """GPUs per node the recipe is written for (a recipe sets it); a dry run for another world
    says so and how to get it. Changes nothing; null: the recipe names no world."""
    recipe_nodes: Optional[int] = None
    """Nodes the recipe is written for; null: 1 (read with recipe_gpus_per_node)."""
    kernels: ClusterKernels = ClusterKernels.ngc
    """The cluster's software, for what is printed for it (the Megatron-LM command of a GPU
    run, the dry run's layer spec and memory): ngc, Transformer Engine and Apex with its CUDA
    extensions, as NVIDIA's PyTorch containers ship them; installed, what this installation
    has. A run itself always uses what is installed where it runs."""

    def __post_init__(self):
        for key in ("gpus_per_node", "nodes", "recipe_gpus_per_node", "recipe_nodes"):
            size_or_null(f"cluster.{key}", getattr(self, key))
        if self.gpu is not None:
            load_hardware(str(self.gpu))

    def hardware(self) -> Hardware:
        return load_hardware(str(self.gpu))
