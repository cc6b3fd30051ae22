"""What this installation can build: the layer spec `auto` resolves to, and what is refused
without Transformer Engine (this machine has none)."""

import importlib.util

import pytest

from launcher.config import ConfigError, CudaGraphConfig, LayerSpec, ModelConfig, ParallelConfig
from launcher.preflight.support import check_support, layer_spec

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is not None,
                                reason="Transformer Engine is installed here")


def test_auto_is_the_local_spec_without_transformer_engine():
    assert layer_spec(ModelConfig()) == LayerSpec.local
    assert layer_spec(ModelConfig(layer_spec=LayerSpec.local)) == LayerSpec.local
    check_support(ModelConfig(), ParallelConfig(tensor_model_parallel_size=2), CudaGraphConfig())


def test_transformer_engine_spec_without_it_is_refused():
    with pytest.raises(ConfigError, match=r"model.layer_spec=transformer_engine needs Transformer "
                                          r"Engine, which is not installed; install it, or set "
                                          r"model.layer_spec=auto"):
        check_support(ModelConfig(layer_spec=LayerSpec.transformer_engine), ParallelConfig(),
                      CudaGraphConfig())


def test_context_parallel_without_transformer_engine_is_refused():
    with pytest.raises(ConfigError, match=r"parallel.context_parallel_size=2 needs Transformer "
                                          r"Engine attention \(TEDotProductAttention\)"):
        check_support(ModelConfig(), ParallelConfig(context_parallel_size=2), CudaGraphConfig())


def test_cpu_offloading_without_transformer_engine_is_refused():
    """megatron-core offloads through Transformer Engine's cpu_offload context and asserts
    without it (transformer_block.py), on every rank; the pre-flight says so first."""
    with pytest.raises(ConfigError, match=r"^model.cpu_offloading_num_layers=2 needs Transformer "
                                          r"Engine \(megatron-core offloads through its "
                                          r"cpu_offload\), which is not installed; install it, "
                                          r"or set model.cpu_offloading_num_layers=0$"):
        check_support(ModelConfig(num_layers=4, cpu_offloading_num_layers=2), ParallelConfig(),
                      CudaGraphConfig())
