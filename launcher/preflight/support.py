"""What this installation can build, checked before any rank starts: Transformer Engine, and
the parallel sizes that need it; and what the run's device can do (check_device: a CPU has no
NCCL, no CUDA allocator, nothing for Nsight Systems). Finds packages without importing them (no
torch here).

Context parallelism needs Transformer Engine attention: megatron-core's own DotProductAttention
(the local spec's) asserts context_parallel_size == 1 (transformer/dot_product_attention.py),
and no other attention of the GPT specs supports it in 0.19.2.
"""

import importlib.metadata
import importlib.util
import re
from typing import Optional, Tuple

from launcher.config import (
    ClusterKernels, Config, ConfigError, CudaGraphConfig, CudaGraphImpl, Device, Fp8Config,
    Fp8Recipe, FsdpConfig, LayerSpec, ModelConfig, ParallelConfig, ProfileKind,
)
from launcher.preflight.fusions import Kernels, resolve


def transformer_engine_installed() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


def transformer_engine_version() -> Optional[Tuple[int, ...]]:
    """The installed Transformer Engine's (major, minor, patch) from its package metadata (no
    import: it imports torch); None where no distribution says (a source build may not)."""
    for name in ("transformer_engine", "transformer-engine", "transformer_engine_torch"):
        try:
            return tuple(int(n) for n in re.findall(r"\d+", importlib.metadata.version(name))[:3])
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


# the oldest Transformer Engine megatron-core 0.19.2 runs each with (core/fp8_utils.py
# get_fp8_recipe; Megatron-FSDP's FP8 parameters: _quantize_param_shard_impl)
FP8_RECIPE_MIN_TE = {Fp8Recipe.tensorwise: (2, 2), Fp8Recipe.blockwise: (2, 3),
                     Fp8Recipe.mxfp8: (2, 1)}
FP8_PARAM_GATHER_MIN_TE = (2, 3)


def check_fp8_support(fp8: Fp8Config) -> None:
    """Raises ConfigError where this installation cannot train train.fp8: without Transformer
    Engine megatron-core's FP8 context is a no-op (fp8_utils.get_fp8_context), and the run would
    train in bf16 under an FP8 label."""
    if not fp8.enabled:
        return
    if not transformer_engine_installed():
        raise ConfigError(
            f"train.fp8.format={fp8.format.value} needs Transformer Engine (its FP8 GEMMs; "
            "without it megatron-core trains in bf16), which is not installed; install "
            "Transformer Engine, or set train.fp8.format=null")
    version = transformer_engine_version()
    needs = [(f"train.fp8.recipe={fp8.recipe.value}", FP8_RECIPE_MIN_TE.get(fp8.recipe))]
    if fp8.param_gather:
        needs.append(("train.fp8.param_gather=true", FP8_PARAM_GATHER_MIN_TE))
    for what, minimum in needs:
        if minimum and version is not None and version < minimum:
            raise ConfigError(
                f"{what} needs Transformer Engine >= {'.'.join(map(str, minimum))} "
                f"(megatron-core fp8_utils.py), and {'.'.join(map(str, version))} is installed; "
                f"upgrade it, or change {what.split('=')[0]}")


def layer_spec(model: ModelConfig, kernels: Optional[Kernels] = None) -> LayerSpec:
    """The spec `model.layer_spec` means with `kernels` (default: this installation's): auto is
    transformer_engine where Transformer Engine is there."""
    if model.layer_spec == LayerSpec.auto:
        te = kernels.transformer_engine if kernels else transformer_engine_installed()
        return LayerSpec.transformer_engine if te else LayerSpec.local
    return LayerSpec(model.layer_spec)


def for_gpu(cfg: Config) -> Optional[bool]:
    """Whether what is printed for `cfg` (its Megatron-LM command, its dry run) is for GPUs:
    runtime.device=cuda or a GPU's cluster.gpu; False for runtime.device=cpu or a CPU's hardware
    file; None for runtime.device=auto without cluster.gpu (the device found here decides)."""
    if cfg.runtime.device != Device.auto:
        return cfg.runtime.device == Device.cuda
    if cfg.cluster.gpu is not None:
        return cfg.cluster.hardware().async_host  # a CPU's file computes on the host
    return None


def target_kernels(cfg: Config, gpu: bool) -> Kernels:
    """The kernels what is printed for `cfg` assumes: a GPU cluster's (cluster.kernels=ngc:
    NVIDIA's PyTorch container), or this installation's (a CPU, or cluster.kernels=installed)."""
    if gpu and cfg.cluster.kernels == ClusterKernels.ngc:
        return Kernels.ngc()
    return Kernels.here()


def check_support(model: ModelConfig, parallel: ParallelConfig,
                  cuda_graph: CudaGraphConfig) -> None:
    """Raises ConfigError for what this installation cannot build."""
    te = transformer_engine_installed()
    local = layer_spec(model) != LayerSpec.transformer_engine
    if local and model.moe.enabled and cuda_graph.impl == CudaGraphImpl.full_iteration:
        raise ConfigError(
            "cuda_graph.impl=full_iteration cannot capture a mixture of experts on the local "
            "layer spec (SequentialMLP reads tokens_per_expert on the host, and the token "
            "dispatcher syncs with it; upstream issue #6152, and PR #7075 excludes MoE); set "
            "cuda_graph.impl=none, or model.moe.num_experts=null"
            + ("" if te else " (Transformer Engine is not installed here)"))
    if model.cpu_offloading_num_layers and not te:
        raise ConfigError(
            f"model.cpu_offloading_num_layers={model.cpu_offloading_num_layers} needs Transformer "
            "Engine (megatron-core offloads through its cpu_offload), which is not installed; "
            "install it, or set model.cpu_offloading_num_layers=0")
    if model.layer_spec == LayerSpec.transformer_engine and not te:
        raise ConfigError("model.layer_spec=transformer_engine needs Transformer Engine, which is "
                          "not installed; install it, or set model.layer_spec=auto (or local)")
    if model.moe.grouped_gemm and local:
        raise ConfigError(
            "model.moe.grouped_gemm=true would be ignored: the local layer spec builds the experts "
            "as SequentialMLP (megatron-core gpt_layer_specs.py), "
            + ("and Transformer Engine is not installed" if not te else
               "which model.layer_spec=local asks for")
            + "; set model.moe.grouped_gemm=false"
            + ("" if not te else ", or model.layer_spec=auto"))
    cp = parallel.context_parallel_size
    if cp > 1 and layer_spec(model) != LayerSpec.transformer_engine:
        why = ("Transformer Engine is not installed" if not te else
               "model.layer_spec=local uses megatron's DotProductAttention, which refuses it")
        raise ConfigError(
            f"parallel.context_parallel_size={cp} needs Transformer Engine attention "
            f"(TEDotProductAttention) and {why}; "
            + ("install Transformer Engine" if not te else "set model.layer_spec=auto")
            + " or set parallel.context_parallel_size=1")


def check_device(cfg: Config, device_type: str) -> None:
    """Raises ConfigError for a fused kernel asked for and missing, and for what the run's device
    cannot do on a CPU: NCCL user buffers, the double buffers (Megatron-FSDP's pool allocates them
    on the CUDA device inside the backward pass, where the CPU compatibility layer's device
    mapping does not reach), Nsight Systems' window and the CUDA allocator's history."""
    check_fsdp_device(cfg.fsdp, device_type)
    # a fusion asked for (model.fusions.KEY=true) whose kernel this run lacks
    resolve(cfg.model, layer_spec(cfg.model), cfg.train.precision, device_type == "cpu",
            Kernels.here())
    if device_type != "cpu":
        return
    if cfg.profile.kind == ProfileKind.nsys:
        raise ConfigError("profile=nsys marks its window with cudaProfilerStart/Stop for Nsight "
                          "Systems, which profiles CUDA work a CPU run has none of; set "
                          "profile=torch (a Chrome trace of the CPU run), or run on GPUs")
    if cfg.profile.memory:
        raise ConfigError("profile.memory=true records the CUDA allocator's history, which a CPU "
                          "run has not; set profile.memory=false (the trace still shows the "
                          "window), or run on GPUs")


def check_fsdp_device(fsdp: FsdpConfig, device_type: str) -> None:
    if fsdp.double_buffer and device_type == "cpu" and not fsdp.nccl_ub:
        raise ConfigError("fsdp.double_buffer=true allocates Megatron-FSDP's fixed buffer pool on "
                          "a CUDA device (megatron_fsdp/utils.py GlobalMemoryBuffer), which a CPU "
                          "run has not; set fsdp.double_buffer=false, or run on GPUs "
                          "(runtime.device=cuda)")
    if fsdp.nccl_ub and device_type == "cpu":
        raise ConfigError("fsdp.nccl_ub=true registers Megatron-FSDP's buffers with NCCL, and a "
                          "CPU run communicates through gloo; set fsdp.nccl_ub=false, or run on "
                          "GPUs (runtime.device=cuda)")
