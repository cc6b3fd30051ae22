"""The config mapping onto megatron-core's real config objects."""

import torch

from launcher.run import cpu_compat

if not torch.cuda.is_available():  # on a CUDA machine megatron imports as it is
    cpu_compat.activate()
from launcher.run import build  # noqa: E402  (imports megatron after the CPU layer)
from launcher.config import (  # noqa: E402
    CudaGraphConfig, CudaGraphImpl, FsdpConfig, FsdpDtype, ModelConfig, ParallelConfig, Precision,
    TrainConfig,
)


def test_prefetch_switch_maps_to_fsdp_all_gather_in_start_param_sync():
    for value in (True, False):
        ddp = build.ddp_config(FsdpConfig(prefetch_first_param_group=value), CudaGraphConfig(),
                               check_nan_in_grad=False, on_cpu=True)
        assert ddp.fsdp_all_gather_in_start_param_sync is value
        assert ddp.use_megatron_fsdp and ddp.data_parallel_sharding_strategy == "optim_grads_params"


def test_first_group_knobs_map_onto_megatron_with_megatron_lms_defaults():
    ddp = build.ddp_config(FsdpConfig(), CudaGraphConfig(), False, on_cpu=True)
    assert ddp.bucket_size is None and ddp.suggested_communication_unit_size is None
    assert ddp.nccl_ub is False and ddp.fsdp_double_buffer is False
    # Megatron-LM: --megatron-fsdp-main-params-dtype fp32, main-grads and grad-comm 'auto' (None)
    assert ddp.megatron_fsdp_main_params_dtype == torch.float32
    assert ddp.megatron_fsdp_main_grads_dtype is None and ddp.megatron_fsdp_grad_comm_dtype is None
    fsdp = FsdpConfig(bucket_size=8192, suggested_communication_unit_size=1000,
                      main_params_dtype=FsdpDtype.auto, main_grads_dtype=FsdpDtype.fp32,
                      grad_comm_dtype=FsdpDtype.bf16)
    ddp = build.ddp_config(fsdp, CudaGraphConfig(), False, on_cpu=True)
    assert ddp.bucket_size == 8192 and ddp.suggested_communication_unit_size == 1000
    assert ddp.megatron_fsdp_main_params_dtype is None
    assert ddp.megatron_fsdp_main_grads_dtype == torch.float32
    assert ddp.megatron_fsdp_grad_comm_dtype == torch.bfloat16


def test_graph_impl_sets_megatron_fsdp_cuda_graph_mode():
    graph = CudaGraphConfig(impl=CudaGraphImpl.full_iteration, warmup_steps=5)
    ddp = build.ddp_config(FsdpConfig(prefetch_first_param_group=False), graph,
                           check_nan_in_grad=False, on_cpu=False)
    assert ddp.megatron_fsdp_cuda_graph_mode is True
    assert ddp.gradient_reduce_div_fusion is True
    assert build.ddp_config(FsdpConfig(), CudaGraphConfig(), False, True) \
        .megatron_fsdp_cuda_graph_mode is False


def test_nan_in_grad_check_maps_to_megatron_check_for_nan_in_grad():
    for value in (True, False):
        ddp = build.ddp_config(FsdpConfig(), CudaGraphConfig(), check_nan_in_grad=value,
                               on_cpu=True)
        assert ddp.check_for_nan_in_grad is value


def test_transformer_config_carries_model_and_graph_settings():
    model = ModelConfig(num_layers=3, hidden_size=64, num_attention_heads=8, num_query_groups=2,
                        activation="swiglu")
    graph = CudaGraphConfig(impl=CudaGraphImpl.full_iteration, warmup_steps=4)
    tc = build.transformer_config(model, ParallelConfig(), graph,
                                  TrainConfig(precision=Precision.fp32), on_cpu=True)
    assert (tc.num_layers, tc.num_query_groups, tc.ffn_hidden_size) == (3, 2, 256)
    assert tc.gated_linear_unit and tc.cuda_graph_impl == "full_iteration"
    assert tc.cuda_graph_warmup_steps == 4 and tc.params_dtype == torch.float32
