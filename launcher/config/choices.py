"""The str Enums of the schema (omegaconf 2.3 has no Literal): every value a key accepts."""

from enum import Enum


class Activation(str, Enum):
    gelu = "gelu"
    swiglu = "swiglu"


class Normalization(str, Enum):
    LayerNorm = "LayerNorm"
    RMSNorm = "RMSNorm"


class LayerSpec(str, Enum):
    auto = "auto"
    local = "local"
    transformer_engine = "transformer_engine"


class ShardingStrategy(str, Enum):
    no_shard = "no_shard"
    optim = "optim"
    optim_grads = "optim_grads"
    optim_grads_params = "optim_grads_params"


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
