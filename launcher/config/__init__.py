"""Stage 1, config: what a run or a sweep is, before anything starts.

Owns the typed schema (one dataclass per config group: `model.py` for what is built, model,
parallel, fsdp and cuda_graph, `layers.py`, its moe and recompute, and `fusions.py`, its fused
kernels; `sections.py` for how it runs, train, data, logging, runtime and sweep; `profile.py`, the
profiling window; `fp8.py`, the FP8 training settings; `cluster.py`, the cluster a dry run predicts
for and its hardware files; `world.py`, the one world (ranks per node, nodes) derived from every place that
states it; `schema.py`: the root `Config`, the rules across sections and those that need the
world size; `error.py`: ConfigError; `values.py`: what any value may be beyond its type, a
bool only true or false, an int within its limit, a float finite), the enums of its vocabulary
(`choices.py`), which keys act only under which (`effect.py`), the one-line explanation of
Hydra's composition errors (`explain.py`), the composed config made typed (`convert.py`), and
the configuration reference it generates (`reference.py`), and a Hugging Face model's
config.json as a model section and back (`hf.py`). It may import the standard library, omegaconf and hydra, and nothing else: no torch, no megatron, nothing from launcher's other stages.
Every other stage imports it.
"""

from launcher.config.choices import (  # noqa: F401  (the schema's vocabulary)
    Activation, ClusterKernels, CudaGraphImpl, CudaGraphModule, DataKind, Device, Fp8Format,
    Fp8Recipe, FsdpDtype, LayerSpec, LrSchedule, Normalization, OuterSharding, PositionEmbedding,
    Precision, ProfileKind,
    RecomputeGranularity, RecomputeMethod, RecomputeModule, RouterScore, ShardingStrategy,
    TokenDispatcher, WandbMode,
)
from launcher.config.schema import (  # noqa: F401
    LAUNCH_WORLD, Config, as_dict, check_steady_state, check_world_size, no_steady_state,
    unknown_keys,
)
from launcher.config.convert import to_config  # noqa: F401
from launcher.config.error import ConfigError  # noqa: F401
from launcher.config.cluster import ClusterConfig, Hardware, load_hardware  # noqa: F401
from launcher.config.world import Stated, World, resolve_world  # noqa: F401
from launcher.config.fusions import FusionsConfig  # noqa: F401
from launcher.config.fp8 import Fp8Config  # noqa: F401
from launcher.config.layers import MoeConfig, RecomputeConfig  # noqa: F401
from launcher.config.profile import ProfileConfig  # noqa: F401
from launcher.config.model import (  # noqa: F401
    CudaGraphConfig, FsdpConfig, ModelConfig, ParallelConfig,
)
from launcher.config.sections import (  # noqa: F401
    CheckpointConfig, DataConfig, LoggingConfig, RuntimeConfig, SweepConfig, TrainConfig,
    TensorboardConfig, WandbConfig,
)
