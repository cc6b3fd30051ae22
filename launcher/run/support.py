"""What this installation can build, checked before any rank starts: Transformer Engine, and
the parallel sizes that need it. Finds packages without importing them (no torch here).

Context parallelism needs Transformer Engine attention: megatron-core's own DotProductAttention
(the local spec's) asserts context_parallel_size == 1 (transformer/dot_product_attention.py),
and no other attention of the GPT specs supports it in 0.19.2.
"""

import importlib.util

from launcher.config import ConfigError, LayerSpec, ModelConfig, ParallelConfig


def transformer_engine_installed() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


def layer_spec(model: ModelConfig) -> LayerSpec:
    """The spec `model.layer_spec` means here: auto is transformer_engine where it is installed."""
    if model.layer_spec == LayerSpec.auto:
        return LayerSpec.transformer_engine if transformer_engine_installed() else LayerSpec.local
    return LayerSpec(model.layer_spec)


def check_support(model: ModelConfig, parallel: ParallelConfig) -> None:
    """Raises ConfigError for what this installation cannot build."""
    te = transformer_engine_installed()
    if model.layer_spec == LayerSpec.transformer_engine and not te:
        raise ConfigError("model.layer_spec=transformer_engine needs Transformer Engine, which is "
                          "not installed; install it, or set model.layer_spec=auto (or local)")
    cp = parallel.context_parallel_size
    if cp > 1 and layer_spec(model) != LayerSpec.transformer_engine:
        why = ("Transformer Engine is not installed" if not te else
               "model.layer_spec=local uses megatron's DotProductAttention, which refuses it")
        raise ConfigError(
            f"parallel.context_parallel_size={cp} needs Transformer Engine attention "
            f"(TEDotProductAttention) and {why}; "
            + ("install Transformer Engine" if not te else "set model.layer_spec=auto")
            + " or set parallel.context_parallel_size=1")
