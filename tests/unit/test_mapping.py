"""The config mapping onto megatron-core's real config objects."""

import torch

from launcher.run import cpu_compat

if not torch.cuda.is_available():  # on a CUDA machine megatron imports as it is
    cpu_compat.activate()
from launcher.run import build  # noqa: E402  (imports megatron after the CPU layer)
from launcher.config import (  # noqa: E402
    CudaGraphConfig, CudaGraphImpl, Fp8Config, Fp8Format, Fp8Recipe, FsdpConfig, FsdpDtype,
    LayerSpec, ModelConfig, ParallelConfig, Precision, TrainConfig,
)
from launcher.preflight.fusions import Fusions  # noqa: E402

NO_FUSIONS = Fusions(spec=LayerSpec.local, masked_softmax=False, bias_activation=False,
                     bias_dropout=False, rope=False, gradient_accumulation=False,
                     persist_layer_norm=False)


def test_prefetch_switch_maps_to_fsdp_all_gather_in_start_param_sync():
    for value in (True, False):
        ddp = build.ddp_config(FsdpConfig(prefetch_first_param_group=value), CudaGraphConfig(),
                               TrainConfig(), on_cpu=True)
        assert ddp.fsdp_all_gather_in_start_param_sync is value
        assert ddp.use_megatron_fsdp and ddp.data_parallel_sharding_strategy == "optim_grads_params"


def test_first_group_knobs_map_onto_megatron_with_megatron_lms_defaults():
    ddp = build.ddp_config(FsdpConfig(), CudaGraphConfig(), TrainConfig(), on_cpu=True)
    assert ddp.bucket_size is None and ddp.suggested_communication_unit_size is None
    assert ddp.nccl_ub is False and ddp.fsdp_double_buffer is False
    # Megatron-LM: --megatron-fsdp-main-params-dtype fp32, main-grads and grad-comm 'auto' (None)
    assert ddp.megatron_fsdp_main_params_dtype == torch.float32
    assert ddp.megatron_fsdp_main_grads_dtype is None and ddp.megatron_fsdp_grad_comm_dtype is None
    fsdp = FsdpConfig(bucket_size=8192, suggested_communication_unit_size=1000,
                      main_params_dtype=FsdpDtype.auto, main_grads_dtype=FsdpDtype.fp32,
                      grad_comm_dtype=FsdpDtype.bf16)
    ddp = build.ddp_config(fsdp, CudaGraphConfig(), TrainConfig(), on_cpu=True)
    assert ddp.bucket_size == 8192 and ddp.suggested_communication_unit_size == 1000
    assert ddp.megatron_fsdp_main_params_dtype is None
    assert ddp.megatron_fsdp_main_grads_dtype == torch.float32
    assert ddp.megatron_fsdp_grad_comm_dtype == torch.bfloat16


def test_graph_impl_sets_megatron_fsdp_cuda_graph_mode():
    graph = CudaGraphConfig(impl=CudaGraphImpl.full_iteration, warmup_steps=5)
    ddp = build.ddp_config(FsdpConfig(prefetch_first_param_group=False), graph,
                           TrainConfig(), on_cpu=False)
    assert ddp.megatron_fsdp_cuda_graph_mode is True
    assert ddp.gradient_reduce_div_fusion is True
    assert build.ddp_config(FsdpConfig(), CudaGraphConfig(), TrainConfig(), True) \
        .megatron_fsdp_cuda_graph_mode is False


def test_nan_in_grad_check_maps_to_megatron_check_for_nan_in_grad():
    for value in (True, False):
        train = TrainConfig(check_nan_in_grad=value)
        ddp = build.ddp_config(FsdpConfig(), CudaGraphConfig(), train, on_cpu=True)
        assert ddp.check_for_nan_in_grad is value
    # null: Megatron-LM's default, on; off with a CUDA graph, where Megatron-LM refuses it
    graph = CudaGraphConfig(impl=CudaGraphImpl.full_iteration)
    assert build.ddp_config(FsdpConfig(), CudaGraphConfig(), TrainConfig(), True) \
        .check_for_nan_in_grad is True
    assert build.ddp_config(FsdpConfig(prefetch_first_param_group=False), graph, TrainConfig(),
                            True).check_for_nan_in_grad is False


def test_grad_reduce_in_fp32_is_set_as_megatron_lm_sets_it():
    """The DDP config's field, as Megatron-LM's get_megatron_ddp_config fills it; Megatron-FSDP
    does not read it (tests/distributed/test_grad_dtypes.py shows what it reduces in)."""
    bf16 = TrainConfig(precision=Precision.bf16)
    assert build.ddp_config(FsdpConfig(), CudaGraphConfig(), bf16, True).grad_reduce_in_fp32
    in_bf16 = TrainConfig(precision=Precision.bf16, grad_reduce_in_bf16=True)
    assert not build.ddp_config(FsdpConfig(), CudaGraphConfig(), in_bf16, True).grad_reduce_in_fp32


def test_transformer_config_carries_model_and_graph_settings():
    model = ModelConfig(num_layers=3, hidden_size=64, num_attention_heads=8, num_query_groups=2,
                        activation="swiglu")
    graph = CudaGraphConfig(impl=CudaGraphImpl.full_iteration, warmup_steps=4)
    tc = build.transformer_config(model, ParallelConfig(), graph,
                                  TrainConfig(precision=Precision.fp32), NO_FUSIONS, on_cpu=True)
    assert (tc.num_layers, tc.num_query_groups, tc.ffn_hidden_size) == (3, 2, 256)
    assert tc.gated_linear_unit and tc.cuda_graph_impl == "full_iteration"
    assert tc.cuda_graph_warmup_steps == 4 and tc.params_dtype == torch.float32


def test_llama_moe_and_recompute_keys_reach_transformer_config_and_gpt_model():
    from launcher.config import (
        MoeConfig, PositionEmbedding, RecomputeConfig, RecomputeGranularity, RecomputeMethod,
        RouterScore,
    )

    model = ModelConfig(num_layers=3, position_embedding=PositionEmbedding.rope,
                        rotary_base=500000, untie_embeddings=True, add_bias_linear=False,
                        qk_layernorm=True, kv_channels=32,
                        moe=MoeConfig(num_experts=4, ffn_hidden_size=48, layer_freq=[0, 1, 1],
                                      shared_expert_ffn_hidden_size=96,
                                      router_score_function=RouterScore.sigmoid),
                        recompute=RecomputeConfig(granularity=RecomputeGranularity.full,
                                                  method=RecomputeMethod.block, num_layers=2))
    config = build.transformer_config(model, ParallelConfig(expert_model_parallel_size=2),
                                      CudaGraphConfig(), TrainConfig(), NO_FUSIONS,
                                      on_cpu=True)
    assert (config.kv_channels, config.add_bias_linear, config.qk_layernorm) == (32, False, True)
    assert (config.num_moe_experts, config.moe_ffn_hidden_size, config.moe_layer_freq) == \
        (4, 48, [0, 1, 1])
    assert config.moe_shared_expert_intermediate_size == 96
    assert config.moe_router_score_function == "sigmoid" and config.moe_router_topk == 2
    assert config.moe_token_dispatcher_type == "alltoall"
    assert config.moe_router_load_balancing_type == "aux_loss" and config.moe_aux_loss_coeff == 0.01
    assert config.expert_model_parallel_size == 2
    assert (config.recompute_granularity, config.recompute_method,
            config.recompute_num_layers) == ("full", "block", 2)
    assert build.position_fields(model) == dict(position_embedding_type="rope",
                                                rope_scaling=False, rotary_base=500000)


def test_hsdp_keys_reach_the_ddp_config():
    from launcher.config import OuterSharding

    fsdp = FsdpConfig(num_distributed_optimizer_instances=4,
                      outer_dp_sharding_strategy=OuterSharding.optim)
    ddp = build.ddp_config(fsdp, CudaGraphConfig(), TrainConfig(), on_cpu=True)
    assert ddp.num_distributed_optimizer_instances == 4
    assert ddp.outer_dp_sharding_strategy == "optim"
    assert build.ddp_config(FsdpConfig(), CudaGraphConfig(), TrainConfig(), True) \
        .outer_dp_sharding_strategy == "no_shard"


def test_fp8_keys_reach_megatron_as_megatron_lms_fp8_flags_set_them():
    """--fp8-format/--fp8-recipe: TransformerConfig.fp8/fp8_recipe (and OptimizerConfig's);
    --fp8-param-gather: TransformerConfig.fp8_param and the DDP config's fp8_param_gather."""
    fp8 = Fp8Config(Fp8Format.hybrid, Fp8Recipe.tensorwise, param_gather=True)
    train = TrainConfig(fp8=fp8)
    tc = build.transformer_config(ModelConfig(layer_spec=LayerSpec.transformer_engine),
                                  ParallelConfig(), CudaGraphConfig(), train, NO_FUSIONS,
                                  on_cpu=False)
    assert (tc.fp8, tc.fp8_recipe, tc.fp8_param) == ("hybrid", "tensorwise", True)
    ddp = build.ddp_config(FsdpConfig(), CudaGraphConfig(), train, on_cpu=False)
    assert ddp.fp8_param_gather is True
    assert build.optimizer_config(train, FsdpConfig()).fp8_recipe == "tensorwise"
    off = build.transformer_config(ModelConfig(), ParallelConfig(), CudaGraphConfig(),
                                   TrainConfig(), NO_FUSIONS, on_cpu=True)
    assert off.fp8 is None and not off.fp8_param  # megatron-core's defaults, Megatron-LM's too
    assert build.optimizer_config(TrainConfig(), FsdpConfig()).fp8_recipe is None
    assert not build.ddp_config(FsdpConfig(), CudaGraphConfig(), TrainConfig(),
                                on_cpu=True).fp8_param_gather
