"""The train section's FP8 subsection (`train.fp8`), and its rules against the other sections.

Each key is one of Megatron-LM's flags (megatron-core 0.19.2, megatron/training/arguments.py and
argument_utils.py): `format` is --fp8-format (TransformerConfig.fp8), `recipe` --fp8-recipe
(TransformerConfig.fp8_recipe, and OptimizerConfig.fp8_recipe), `param_gather`
--fp8-param-gather (TransformerConfig.fp8_param and DistributedDataParallelConfig.
fp8_param_gather). Megatron-LM's other FP8 flags (--fp8-margin, --fp8-amax-history-len,
--fp8-amax-compute-algo, --fp8-wgrad...) keep megatron-core's defaults, which are theirs too.
What needs Transformer Engine, and which version, is checked where the installation is known
(launcher/preflight/support.py check_fp8_support).
"""

from dataclasses import dataclass
from typing import Optional

from launcher.config.choices import (
    Fp8Format, Fp8Recipe, FsdpDtype, LayerSpec, Precision, RecomputeGranularity,
    RecomputeModule, ShardingStrategy,
)
from launcher.config.error import ConfigError


@dataclass
class Fp8Config:
    """FP8 GEMMs through Transformer Engine, as Megatron-LM's --fp8-* flags set them."""

    format: Optional[Fp8Format] = None
    """null: no FP8 | e4m3 | hybrid (e4m3 forward, e5m2 gradients): Megatron-LM --fp8-format."""
    recipe: Fp8Recipe = Fp8Recipe.delayed
    """How the scales are set (--fp8-recipe): delayed (amax history; any Transformer Engine) |
    tensorwise (current scaling per tensor, Bridge's FP8-CS; TE >= 2.2) | blockwise (TE >= 2.3) |
    mxfp8 (TE >= 2.1, Blackwell GPUs only). delayed, as Megatron-LM."""
    param_gather: bool = False
    """Keep the sharded compute weights in FP8 and all-gather them in FP8 (--fp8-param-gather:
    TransformerConfig.fp8_param and DistributedDataParallelConfig.fp8_param_gather); Megatron-FSDP
    supports it with fsdp.sharding_strategy=optim_grads_params only, and TE >= 2.3."""

    @property
    def enabled(self) -> bool:
        return self.format is not None


def check_fp8(fp8: Fp8Config, precision: Precision, model, fsdp) -> None:
    """The FP8 rules across sections (model: ModelConfig, fsdp: FsdpConfig), called by the
    root's __post_init__; keys set with FP8 off are refused by launcher/config/effect.py."""
    if not fp8.enabled:
        return
    key = f"train.fp8.format={fp8.format.value}"
    if precision != Precision.bf16:
        raise ConfigError(
            f"{key} runs FP8 GEMMs inside a bf16 run (Megatron-Bridge's FP8 recipes are bf16 "
            f"with FP8), and train.precision={precision.value}; set train.precision=bf16, or "
            "train.fp8.format=null")
    if model.layer_spec == LayerSpec.local:
        raise ConfigError(
            f"{key} needs Transformer Engine's layers, and model.layer_spec=local builds "
            "megatron-core's own, which have no FP8 (megatron-core then trains in bf16 and says "
            "nothing); set model.layer_spec=auto, or train.fp8.format=null")
    recompute = model.recompute
    if (fp8.recipe == Fp8Recipe.delayed and recompute.granularity == RecomputeGranularity.selective
            and RecomputeModule.layernorm in recompute.modules):
        # megatron-core's TransformerConfig raises the same on every rank (transformer_config.py)
        raise ConfigError(
            "train.fp8.recipe=delayed cannot recompute the layernorm (model.recompute.modules "
            "has layernorm; megatron-core refuses delayed scaling with it); set "
            "train.fp8.recipe=tensorwise, or take layernorm out of model.recompute.modules")
    if fp8.param_gather:
        check_param_gather(fsdp)


def check_param_gather(fsdp) -> None:
    """Megatron-FSDP 0.19.2 keeps FP8 compute weights only when they are sharded and have a main
    weight buffer to be cast from after each step (param_and_grad_buffer.py: "we only support FP8
    parameters for FSDP, i.e. fully-sharded compute parameters with a high-precision main weight
    buffer"); anything else would never refresh them, and megatron does not refuse it."""
    strategy = ShardingStrategy(fsdp.sharding_strategy)
    if strategy != ShardingStrategy.optim_grads_params:
        raise ConfigError(
            f"train.fp8.param_gather=true needs sharded compute weights, and "
            f"fsdp.sharding_strategy={strategy.value} keeps them whole (Megatron-FSDP supports FP8 "
            "parameters with optim_grads_params only); set fsdp.sharding_strategy="
            "optim_grads_params, or train.fp8.param_gather=false")
    if FsdpDtype(fsdp.main_params_dtype) == FsdpDtype.auto:
        raise ConfigError(
            "train.fp8.param_gather=true casts the FP8 weights from the main weights after each "
            "step, and fsdp.main_params_dtype=auto keeps none; set fsdp.main_params_dtype=fp32, "
            "or train.fp8.param_gather=false")
