"""The process environment a run needs, checked and set in the launch process before any rank
starts (each rank inherits it), and recorded by every rank in the summary.

Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 with Megatron-FSDP
(megatron/training/arguments.py). Full-iteration graphs need what Megatron-Bridge's
full-iteration recipes set (src/megatron/bridge/perf_recipes/llama/b200/llama3.py): without them
NCCL inside a capture fails (cudaErrorStreamCaptureUnjoined). A value the user set is kept when
it can work and refused in one line when it cannot; nothing is rewritten. Several ranks on a node
get OMP_NUM_THREADS=1 unless the user set it, as torchrun gives them
(torch/distributed/run.py), and so Megatron-LM's ranks: each rank's intra-op threads would
otherwise take every core, and the node's ranks would fight over them (2 ranks on this project's
2-core CPU: a step took 227 ms instead of 117).
"""

from typing import Mapping

from launcher.config import ConfigError, CudaGraphConfig

RECORDED = ("OMP_NUM_THREADS", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_GRAPH_REGISTER",
            "TORCH_NCCL_AVOID_RECORD_STREAMS", "PYTORCH_CUDA_ALLOC_CONF")

GRAPH_DEFAULTS = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "32",
    "NCCL_GRAPH_REGISTER": "0",
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "0",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,graph_capture_record_stream_reuse:True",
}


def run_environment(cuda_graph: CudaGraphConfig, environ: Mapping[str, str],
                    nccl_ub: bool = False, ranks_per_node: int = 1) -> dict:
    """The variables to add to `environ` for this run ({} when it needs none); raises ConfigError
    naming a variable the user set to a value the run cannot work with. `ranks_per_node`: the
    ranks `launch` starts on this node (1 where another starter starts them)."""
    check_connections(environ.get("CUDA_DEVICE_MAX_CONNECTIONS"))
    added = graph_environment(cuda_graph, environ)
    if ranks_per_node > 1 and "OMP_NUM_THREADS" not in environ:
        added["OMP_NUM_THREADS"] = "1"
    if nccl_ub:
        check_nccl_ub_alloc_conf({**environ, **added}.get("PYTORCH_CUDA_ALLOC_CONF"))
    return added


def graph_environment(cuda_graph: CudaGraphConfig, environ: Mapping[str, str]) -> dict:
    if not cuda_graph.enabled:
        return {}
    for name in ("NCCL_GRAPH_REGISTER", "TORCH_NCCL_AVOID_RECORD_STREAMS"):
        value = environ.get(name)
        if value is not None and value.strip() != "0":
            raise ConfigError(
                f"{name}={value} breaks NCCL inside a full-iteration CUDA graph capture "
                f"(cuda_graph.impl={cuda_graph.impl.value}); unset {name} or set it to 0")
    check_alloc_conf(environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    return {k: v for k, v in GRAPH_DEFAULTS.items() if k not in environ}


def check_connections(value) -> None:
    if value is None:
        return
    if not value.strip().isdigit() or int(value) < 1:
        raise ConfigError(f"CUDA_DEVICE_MAX_CONNECTIONS={value} is not a positive integer; unset "
                          "it or set it to a number above 1, e.g. 32")
    if int(value) == 1:
        raise ConfigError(
            "CUDA_DEVICE_MAX_CONNECTIONS=1 serialises Megatron-FSDP's communication with its "
            "compute (Megatron-LM refuses it with Megatron-FSDP); unset it or set it above 1, "
            "e.g. 32")


def check_nccl_ub_alloc_conf(value) -> None:
    """megatron-core (distributed_data_parallel_config.py) refuses NCCL user buffers with
    expandable segments before torch 2.11 (the torch.cuda.MemPool API clashes with them)."""
    from importlib.metadata import version

    major_minor = tuple(int(p) for p in version("torch").split(".")[:2])
    if value and "expandable_segments:True" in value.replace(" ", "").split(",") \
            and major_minor < (2, 11):
        raise ConfigError(
            f"fsdp.nccl_ub=true cannot run with PYTORCH_CUDA_ALLOC_CONF={value} on torch "
            f"{version('torch')} (megatron-core refuses expandable segments with NCCL user "
            "buffers before torch 2.11); set fsdp.nccl_ub=false, or use torch 2.11 or newer")


def check_alloc_conf(value) -> None:
    """A user's PYTORCH_CUDA_ALLOC_CONF is theirs to keep, unless it turns off the stream reuse
    that graph capture relies on."""
    if value is None:
        return
    options = dict(part.split(":", 1) for part in value.replace(" ", "").split(",") if ":" in part)
    if options.get("graph_capture_record_stream_reuse", "True").lower() == "false":
        raise ConfigError(
            f"PYTORCH_CUDA_ALLOC_CONF={value} turns off graph_capture_record_stream_reuse, which "
            "full-iteration CUDA graph capture needs; remove that option (or unset the variable)")
