"""The str Enums of the schema (omegaconf 2.3 has no Literal): every value a key accepts."""

from enum import Enum


class Activation(str, Enum):
    gelu = "gelu"
    swiglu = "swiglu"


class Normalization(str, Enum):
    LayerNorm = "LayerNorm"
    RMSNorm = "RMSNorm"


class PositionEmbedding(str, Enum):
    learned_absolute = "learned_absolute"
    rope = "rope"


class TokenDispatcher(str, Enum):
    alltoall = "alltoall"
    allgather = "allgather"


class RouterScore(str, Enum):
    softmax = "softmax"
    sigmoid = "sigmoid"


class RecomputeGranularity(str, Enum):
    selective = "selective"
    full = "full"


class RecomputeMethod(str, Enum):
    uniform = "uniform"
    block = "block"


class RecomputeModule(str, Enum):
    """megatron-core's recompute_modules that the local spec can honour (moe_act needs grouped
    GEMM, mla_up_proj multi-latent attention, gdn_norm_out GatedDeltaNet: none of them built)."""

    core_attn = "core_attn"
    layernorm = "layernorm"
    mlp = "mlp"
    moe = "moe"
    shared_experts = "shared_experts"


class LayerSpec(str, Enum):
    auto = "auto"
    local = "local"
    transformer_engine = "transformer_engine"


class ClusterKernels(str, Enum):
    ngc = "ngc"
    installed = "installed"


class ShardingStrategy(str, Enum):
    no_shard = "no_shard"
    optim = "optim"
    optim_grads = "optim_grads"
    optim_grads_params = "optim_grads_params"


class OuterSharding(str, Enum):
    """HSDP: what is sharded across the data-parallel groups (outer_dp_sharding_strategy)."""

    no_shard = "no_shard"
    optim = "optim"


class FsdpDtype(str, Enum):
    """A Megatron-FSDP buffer dtype; auto: megatron's own choice (None), as Megatron-LM's 'auto'."""

    fp32 = "fp32"
    bf16 = "bf16"
    auto = "auto"


class CudaGraphImpl(str, Enum):
    none = "none"
    local = "local"
    transformer_engine = "transformer_engine"
    full_iteration = "full_iteration"


# megatron-core's per-layer graphs: named so that a Megatron-LM user's word is recognised, refused
# in every run (CudaGraphConfig) because Megatron-FSDP cannot run them.
PER_LAYER_GRAPHS = (CudaGraphImpl.local, CudaGraphImpl.transformer_engine)
PER_LAYER_WHY = "per-layer graphs, which Megatron-FSDP in megatron-core does not support yet"

# Values of a key's Enum that no run can use, and why: a misspelled value's message lists only the
# others, and says why these are left out.
UNRUNNABLE = {"cuda_graph.impl": (PER_LAYER_GRAPHS, PER_LAYER_WHY)}


class CudaGraphModule(str, Enum):
    attn = "attn"
    mlp = "mlp"
    moe = "moe"
    moe_router = "moe_router"
    moe_preprocess = "moe_preprocess"
    mamba = "mamba"


class Precision(str, Enum):
    bf16 = "bf16"
    fp32 = "fp32"


class Fp8Format(str, Enum):
    """TransformerConfig.fp8 (Megatron-LM --fp8-format): e4m3 everywhere, or hybrid (e4m3
    forward, e5m2 for the gradients)."""

    e4m3 = "e4m3"
    hybrid = "hybrid"


class Fp8Recipe(str, Enum):
    """TransformerConfig.fp8_recipe (Megatron-LM --fp8-recipe), megatron-core 0.19.2's recipes
    but `custom` (a Python import path, which a config does not hold)."""

    delayed = "delayed"
    tensorwise = "tensorwise"
    blockwise = "blockwise"
    mxfp8 = "mxfp8"


class LrSchedule(str, Enum):
    constant = "constant"
    linear = "linear"
    cosine = "cosine"


class DataKind(str, Enum):
    mock = "mock"
    indexed = "indexed"


class WandbMode(str, Enum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class ProfileKind(str, Enum):
    none = "none"
    torch = "torch"
    nsys = "nsys"
