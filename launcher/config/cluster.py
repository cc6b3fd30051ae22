"""The cluster a dry run predicts for (`cluster.gpu`, `cluster.gpus_per_node`, `cluster.nodes`),
and the hardware files it names: hardware/<name>.yaml, one per GPU kind (and one for
this project's CPU machines), each figure with its public source or the command that measured
it. Hardware is data: a new GPU is a new file, no code.
"""

import math
import re
import typing
from dataclasses import MISSING, dataclass, fields
from functools import lru_cache, partial
from pathlib import Path
from typing import Dict, Optional, Tuple

from launcher.config.choices import ClusterKernels
from launcher.config.error import ConfigError, size_or_null, text_or_null
from launcher.config.values import shown

# a value as a hardware file writes it: a string quoted (the quotes tell it from a number)
as_in_file = partial(shown, separator=", ", quote=True)

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "hardware"

Band = Tuple[float, float]
"""A rate as the public measurements spread it, written [low, high] in a file: the prediction's
range runs from every rate at its low end to every rate at its high end."""


@dataclass(frozen=True)
class Hardware:
    """One accelerator kind and the network its machines come with, per GPU (per rank on a CPU).
    The fields are the schema of a hardware file: read_hardware checks each figure against its
    field's type and RANGES when the file is loaded."""

    name: str
    memory_gib: float
    """Device memory (a CPU: the machine's RAM)."""
    tflops: Dict[str, float]
    """Peak dense matmul rate by dtype (bf16, fp8; fp32 on a CPU), TFLOP/s, no sparsity."""
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
    step_host_us: float
    """Host time between two steps (the step's end, the next batch, the schedule's set-up),
    microseconds: a GPU idles through it after the launcher's per-step sync point."""
    async_host: bool
    """True on a GPU: the host enqueues kernels ahead of the device. False on a CPU."""
    matmul_fraction: Optional[float] = None
    """A CPU: the share of `tflops` its matmuls reach (measured by bench/calibrate.py); every
    FLOP runs at tflops x matmul_fraction. null on a GPU, whose kernel classes (gemm_fraction
    and the figures after it) set the time instead."""
    layer_host_us: Optional[float] = None
    """A CPU: the host's time for one transformer layer's forward and backward of one
    microbatch, microseconds, added to the compute (a GPU counts its kernels' launches instead:
    launch_us)."""
    moe_layer_host_us: Optional[float] = None
    """The same for a mixture-of-experts layer (router, dispatch, each expert's MLP, combine);
    null: layer_host_us."""
    sms: Optional[int] = None
    """A GPU: its streaming multiprocessors. A GEMM's output tiles run in waves of this many,
    and a last wave that fills few of them leaves the rest idle."""
    gemm_fraction: Optional[Dict[str, Band]] = None
    """A GPU, by dtype: the share of `tflops` a large GEMM reaches ([low, high] over public
    measurements of the best achievable matmul)."""
    attention_fraction: Optional[Dict[int, Band]] = None
    """A GPU, by sequence length: the share of the bf16 peak a causal flash attention's forward
    and backward reach together at head dimension 128 (between lengths, interpolated)."""
    hbm_fraction: Optional[Band] = None
    """A GPU: the share of `hbm_gbps` a memory-bound kernel moves (norms, activations, rope,
    residual adds, FP8 casts, the optimizer step)."""
    bus_fraction: Optional[Band] = None
    """A GPU: the share of intra_node_gbps NCCL's all-gather and reduce-scatter reach on large
    messages inside the NVLink domain (their bus bandwidth)."""
    nic_fraction: Optional[Band] = None
    """A GPU: the same across NVLink domains, the share of its ranks' NICs together
    (inter_node_gbps each) NCCL reaches."""
    launch_us: Optional[Band] = None
    """A GPU: the host's time to issue one kernel in eager PyTorch, microseconds (a layer's
    kernels run behind it; a CUDA graph replays them without it)."""
    host_link_gbps: Optional[Band] = None
    """A GPU: GB/s one way between it and its host's memory, as copies reach it with every GPU
    of the host copying (PCIe, or NVLink-C2C shared with the Grace CPU's other GPU): what
    model.cpu_offloading_num_layers moves activations at."""
    published_mfu: Optional[Dict[str, float]] = None
    """A GPU, by dtype: the highest MFU a published training run of this GPU kind reached; a
    prediction above it says so."""
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


# cluster.gpu names a file of hardware/, never a path: no `/`, no leading `.`
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")

# What each kind of value must be, as said in a message, and the test (a bool is no number)
TYPES = {
    float: ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    bool: ("true or false", lambda v: isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
}

# The range of each numeric figure beyond its type (Hardware's fields give the types); a tflops
# entry takes tflops', a by_ranks entry its figure's. A zero rate would divide by zero, a
# negative one predict negative times.
RANGES = {
    "memory_gib": "> 0", "tflops": "> 0", "matmul_fraction": "in (0, 1]", "hbm_gbps": "> 0",
    "intra_node_gbps": "> 0", "inter_node_gbps": "> 0", "latency_us": ">= 0",
    "nvlink_domain": "> 0", "gpus_per_node": "> 0", "layer_host_us": ">= 0",
    "moe_layer_host_us": ">= 0", "step_host_us": ">= 0", "cores": ">= 0", "sms": "> 0",
    "gemm_fraction": "in (0, 1]", "attention_fraction": "in (0, 1]", "hbm_fraction": "in (0, 1]",
    "bus_fraction": "in (0, 1]", "nic_fraction": "in (0, 1]", "launch_us": ">= 0",
    "host_link_gbps": "> 0", "published_mfu": "in (0, 1]",
}
WITHIN = {"> 0": lambda v: v > 0, ">= 0": lambda v: v >= 0, "in (0, 1]": lambda v: 0 < v <= 1}
BANDS = ("hbm_fraction", "bus_fraction", "nic_fraction", "launch_us", "host_link_gbps")
KERNEL_CLASSES = ("sms", "gemm_fraction", "attention_fraction", "hbm_fraction", "bus_fraction",
                  "nic_fraction", "launch_us", "host_link_gbps")
"""A GPU file's figures for the kernel-class model (launcher/estimate/kernels.py): all or none."""

# The figures by_ranks may hold for a rank count (Hardware.at reads them)
BY_RANKS = ("latency_us", "intra_node_gbps", "layer_host_us", "moe_layer_host_us",
            "step_host_us")
FIGURES = tuple(f.name for f in fields(Hardware))

# The mappings: how each is written (for the fix), the names its keys may be (None: any of the
# key type), and the figure whose range its entries take (None: the figure each key names)
MAPPINGS = {
    "tflops": ("{DTYPE: TFLOP/s}, e.g. {bf16: 989}", None, "tflops"),
    "sources": ("{FIGURE: where it comes from}", FIGURES, "sources"),
    "by_ranks": ("{RANKS: {FIGURE: VALUE}}, e.g. {2: {latency_us: 389.2}}", None,
                 "by_ranks entry"),
    "by_ranks entry": ("{FIGURE: VALUE}, e.g. {latency_us: 389.2}", BY_RANKS, None),
    "gemm_fraction": ("{DTYPE: [LOW, HIGH]}, e.g. {bf16: [0.7, 0.8]}", None, "gemm_fraction"),
    "attention_fraction": ("{SEQUENCE LENGTH: [LOW, HIGH]}, e.g. {8192: [0.5, 0.6]}", None,
                           "attention_fraction"),
    "published_mfu": ("{DTYPE: MFU}, e.g. {bf16: 0.43}", None, "published_mfu"),
}
KEYS = {str: "a name", int: "a positive integer"}
COUNTED = {"by_ranks": " (a rank count)", "attention_fraction": " (a sequence length)"}


def hardware_names() -> list:
    """The names cluster.gpu takes: hardware/'s files whose names NAME accepts."""
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml") if NAME.fullmatch(p.stem))


@lru_cache(maxsize=None)
def load_hardware(name: str) -> Hardware:
    """The figures of hardware/<name>.yaml. Only a name: a path (`../x`, `/tmp/x`) would read
    figures from outside the files this project ships and documents."""
    if not NAME.fullmatch(name):
        raise ConfigError(f"cluster.gpu={name} is not a name of hardware/ (a file's name, no "
                          f"path); pick one of {', '.join(hardware_names())}, or add a new "
                          "file hardware/NAME.yaml and set cluster.gpu=NAME")
    path = HARDWARE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"cluster.gpu={name} has no hardware file; pick one of "
                          f"{', '.join(hardware_names())} (hardware/), or add "
                          f"hardware/{name}.yaml")
    return read_hardware(path)


def read_hardware(path: Path) -> Hardware:
    """The figures of one hardware file, each checked against Hardware's field types and
    RANGES: a file is data someone writes by hand, and a bad figure must be refused by name here
    rather than met later as a negative time or a ZeroDivisionError in the prediction."""
    where = f"hardware/{path.name}"
    values = read_yaml(path, where)
    unknown = sorted(set(values) - set(FIGURES), key=str)
    if unknown:
        raise ConfigError(f"{where} has {unknown[0]}, which is not a hardware figure; "
                          f"use {', '.join(sorted(FIGURES))}")
    for f in fields(Hardware):
        if f.name not in values and f.default is MISSING:
            raise ConfigError(f"{where} has no {f.name}; add {f.name} to it (Hardware in "
                              "launcher/config/cluster.py says what each figure is)")
        if f.name in values:
            check_value(where, f.name, values[f.name], f.type, f.name)
    given = [k for k in KERNEL_CLASSES if values.get(k) is not None]
    if given and len(given) < len(KERNEL_CLASSES):
        missing = next(k for k in KERNEL_CLASSES if k not in given)
        raise ConfigError(f"{where} has {given[0]} but no {missing}; a GPU's kernel classes "
                          f"need all of {', '.join(KERNEL_CLASSES)}")
    if not given and values.get("matmul_fraction") is None:
        raise ConfigError(f"{where} has neither matmul_fraction nor the kernel classes; add "
                          f"matmul_fraction (a CPU) or {', '.join(KERNEL_CLASSES)} (a GPU)")
    return Hardware(**{k: tuple(v) if k in BANDS and v is not None else v
                       for k, v in values.items()})


def read_yaml(path: Path, where: str) -> dict:
    """The file as plain data; a file that is no YAML mapping, in one line (the parser's line
    and column where it has them)."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        values = OmegaConf.to_container(OmegaConf.load(path))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        raise ConfigError(f"{where} is not valid YAML: {err.problem or err.context} at line "
                          f"{mark.line + 1}, column {mark.column + 1}; fix the file there")
    except (yaml.YAMLError, OmegaConfBaseException, UnicodeDecodeError, OSError) as err:
        said = str(err).strip().splitlines()[0]
        raise ConfigError(f"{where} cannot be read: {said}; fix the file")
    if not isinstance(values, dict):
        raise ConfigError(f"{where} holds {as_in_file(values)}, not a mapping of figures; write "
                          "one `figure: value` a line, as the shipped files do")
    return values


def check_value(where: str, key: str, value, tp, figure: str) -> None:
    """`value` of the dotted `key` against its field type `tp` (Optional takes null; a Dict
    each entry) and against `figure`'s range."""
    if typing.get_origin(tp) is typing.Union:
        if value is None:
            return
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) is dict:
        return check_mapping(where, key, value, tp, figure)
    if tp == Band:
        return check_band(where, key, value, figure)
    said, test = TYPES[tp]
    if not test(value):
        raise ConfigError(f"{where}: {key}={as_in_file(value)} is not {said}; give {key} {said}")
    if tp in (int, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {key}={as_in_file(value)} is not a finite number; give {key} "
                          "a finite number")
    bound = RANGES.get(figure)
    if bound and not WITHIN[bound](value):
        raise ConfigError(f"{where}: {key}={as_in_file(value)} must be {bound}; set {key} to "
                          f"{said} {bound}")


def check_band(where: str, key: str, value, figure: str) -> None:
    """A Band: [low, high], two numbers in the figure's range, low <= high."""
    if not isinstance(value, list) or len(value) != 2:
        raise ConfigError(f"{where}: {key}={as_in_file(value)} is not [low, high]; give {key} as two "
                          "numbers, e.g. [0.7, 0.8]")
    for end in value:
        check_value(where, key, end, float, figure)
    if value[0] > value[1]:
        raise ConfigError(f"{where}: {key}={as_in_file(value)} has its low end above its high end; "
                          f"give {key} as [{value[1]}, {value[0]}]")


def check_mapping(where: str, key: str, value, tp, figure: str) -> None:
    """One of MAPPINGS: the keys' types and names, then each entry."""
    written, names, entries = MAPPINGS[figure]
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {key}={as_in_file(value)} is not a mapping; give {key} as "
                          f"{written}")
    key_type, value_type = typing.get_args(tp)
    said = KEYS[key_type] + (COUNTED.get(figure, "") if key_type is int else "")
    for name, entry in value.items():
        if not TYPES[key_type][1](name) or (key_type is int and name < 1):
            raise ConfigError(f"{where}: {key} has the key {as_in_file(name)}, which is not {said}; "
                              f"make each key of {key} {said}")
        if names is not None and name not in names:
            raise ConfigError(f"{where}: {key} has {name}, which is not a figure it may hold; "
                              f"use {', '.join(names)}")
        check_value(where, f"{key}.{name}", entry, value_type, entries or name)



@dataclass
class ClusterConfig:
    """The cluster `runtime.dry_run=true` predicts step time, throughput and MFU for. Its sizes
    state the world as the runtime section's do: a run starts the world its dry run predicts
    (launcher.config.world)."""

    gpu: Optional[str] = None
    """The name of a file in hardware/, not a path (h100_sxm, h200_sxm, b200, gb200, gb300,
    cpu_2core; another GPU kind is a new file hardware/NAME.yaml); null: the dry run predicts
    no time. Each file's figures are checked against Hardware's fields when it is loaded."""
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
        text_or_null("cluster.gpu", self.gpu)
        if self.gpu is not None:
            load_hardware(str(self.gpu))

    def hardware(self) -> Hardware:
        return load_hardware(str(self.gpu))
