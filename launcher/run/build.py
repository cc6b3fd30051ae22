"""Builds megatron-core objects from config sections: the mapping, the model, the optimizer, and
`build_all`, the three of them for a run, with the fused kernels it uses (`run_fusions`, resolved
once a rank) and their JIT warm-up.

The mapping functions (`transformer_config`, `ddp_config`, `optimizer_config`) are plain functions
from our typed sections to megatron-core's own config objects. Import this module only after
`cpu_compat.activate()` on a CPU: it imports megatron.
"""

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.distributed import DistributedDataParallelConfig
from megatron.core.distributed.finalize_model_grads import finalize_model_grads
from megatron.core.fp8_utils import correct_amax_history_if_needed
from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import (
    get_gpt_decoder_block_spec, get_gpt_layer_local_spec,
)
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.module import Float16Module

from launcher.config import (
    Activation, Config, CudaGraphConfig, Fp8Config, FsdpConfig, LayerSpec, ModelConfig, MoeConfig,
    ParallelConfig, Precision, RecomputeConfig, TrainConfig,
)
from launcher.preflight.fusions import Fusions
from launcher.preflight.support import layer_spec

_FSDP_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "auto": None}


def transformer_config(model: ModelConfig, parallel: ParallelConfig, cuda_graph: CudaGraphConfig,
                       train: TrainConfig, fusions: Fusions, on_cpu: bool) -> TransformerConfig:
    """Our model/parallel/cuda_graph/train sections as megatron-core's TransformerConfig, with the
    fused kernels the run uses and the layer spec they were resolved for
    (launcher.preflight.fusions.resolve). docs/megatron_lm_parity.md lists every field where it differs
    from what Megatron-LM builds from the same settings (launch ... runtime.print_megatron_lm)."""
    swiglu = model.activation == Activation.swiglu
    bf16 = train.precision == Precision.bf16
    return TransformerConfig(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.query_groups,
        kv_channels=model.head_channels,
        ffn_hidden_size=model.ffn_size,
        normalization=model.normalization.value,
        gated_linear_unit=swiglu,
        activation_func=F.silu if swiglu else F.gelu,
        add_bias_linear=model.add_bias_linear,
        add_qkv_bias=model.add_bias_linear,  # as Megatron-LM's validate_args (no other effect)
        qk_layernorm=model.qk_layernorm,
        tensor_model_parallel_size=parallel.tensor_model_parallel_size,
        pipeline_model_parallel_size=parallel.pipeline_model_parallel_size,
        context_parallel_size=parallel.context_parallel_size,
        expert_model_parallel_size=parallel.expert_model_parallel_size,
        **moe_fields(model.moe, model.num_layers),
        **recompute_fields(model.recompute),
        **offloading_fields(model.cpu_offloading_num_layers),
        **fp8_fields(train.fp8),
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        pipeline_dtype=torch.bfloat16 if bf16 else torch.float32,
        hidden_dropout=model.hidden_dropout,
        attention_dropout=model.attention_dropout,
        attention_softmax_in_fp32=model.attention_softmax_in_fp32,
        init_method_std=model.init_method_std,
        layernorm_epsilon=model.norm_epsilon,
        **fusions.fields(),
        use_cpu_initialization=on_cpu,
        transformer_impl=fusions.spec.value,
        # as Megatron-LM's core_transformer_config_from_args; neither acts in this launcher's runs
        deallocate_pipeline_outputs=True, cp_comm_type="p2p", inference_sampling_seed=train.seed,
        cuda_graph_impl=cuda_graph.impl.value,
        cuda_graph_modules=[m.value for m in cuda_graph.modules],
        cuda_graph_warmup_steps=cuda_graph.warmup_steps,
    )


def moe_fields(moe: MoeConfig, num_layers: int) -> dict:
    """The model.moe section as TransformerConfig's moe_* fields (none without experts)."""
    if not moe.enabled:
        return {}
    return dict(
        num_moe_experts=moe.num_experts,
        moe_router_topk=moe.router_topk,
        moe_ffn_hidden_size=moe.ffn_hidden_size,
        moe_shared_expert_intermediate_size=moe.shared_expert_ffn_hidden_size,
        moe_layer_freq=moe.pattern(num_layers),
        moe_aux_loss_coeff=moe.aux_loss_coeff,
        moe_router_load_balancing_type="aux_loss" if moe.aux_loss_coeff else "none",
        moe_token_dispatcher_type=moe.token_dispatcher.value,
        moe_router_score_function=moe.router_score_function.value,
        moe_grouped_gemm=moe.grouped_gemm,
    )


def fp8_fields(fp8: Fp8Config) -> dict:
    """train.fp8 as TransformerConfig's fields, as Megatron-LM's core_transformer_config_from_args
    sets them from --fp8-format, --fp8-recipe and --fp8-param-gather (argument_utils.py:
    fp8_param from fp8_param_gather); none without FP8, where megatron-core's defaults are
    Megatron-LM's."""
    if not fp8.enabled:
        return {}
    return dict(fp8=fp8.format.value, fp8_recipe=fp8.recipe.value, fp8_param=fp8.param_gather)


def recompute_fields(recompute: RecomputeConfig) -> dict:
    """The model.recompute section as TransformerConfig's recompute_* fields."""
    if recompute.granularity is None:
        return {}
    return dict(
        recompute_granularity=recompute.granularity.value,
        recompute_method=recompute.method and recompute.method.value,
        recompute_num_layers=recompute.num_layers,
        recompute_modules=[m.value for m in recompute.modules],
    )


def offloading_fields(layers: int) -> dict:
    """model.cpu_offloading_num_layers as TransformerConfig's fields, as Megatron-LM's
    validate_args sets cpu_offloading from --cpu-offloading-num-layers (arguments.py); none
    without offloading, where megatron-core's defaults are Megatron-LM's."""
    return dict(cpu_offloading=True, cpu_offloading_num_layers=layers) if layers else {}


def ddp_config(fsdp: FsdpConfig, cuda_graph: CudaGraphConfig, train: TrainConfig,
               on_cpu: bool) -> DistributedDataParallelConfig:
    """Our fsdp section (and the train section's gradient checks and reduction dtype) as
    megatron-core's DistributedDataParallelConfig for Megatron-FSDP."""
    return DistributedDataParallelConfig(
        use_megatron_fsdp=True,
        use_distributed_optimizer=True,
        data_parallel_sharding_strategy=fsdp.sharding_strategy.value,
        fsdp_all_gather_in_start_param_sync=fsdp.prefetch_first_param_group,
        overlap_grad_reduce=fsdp.overlap_grad_reduce,
        overlap_param_gather=fsdp.overlap_param_gather,
        fsdp_double_buffer=fsdp.double_buffer,
        bucket_size=fsdp.bucket_size,  # resolved as Megatron-LM's get_model: build_model
        num_buckets=fsdp.num_buckets,
        suggested_communication_unit_size=fsdp.suggested_communication_unit_size,
        nccl_ub=fsdp.nccl_ub,
        megatron_fsdp_main_params_dtype=_FSDP_DTYPES[fsdp.main_params_dtype.value],
        megatron_fsdp_main_grads_dtype=_FSDP_DTYPES[fsdp.main_grads_dtype.value],
        megatron_fsdp_grad_comm_dtype=_FSDP_DTYPES[fsdp.grad_comm_dtype.value],
        megatron_fsdp_cuda_graph_mode=cuda_graph.enabled,
        num_distributed_optimizer_instances=fsdp.num_distributed_optimizer_instances,
        outer_dp_sharding_strategy=fsdp.outer_dp_sharding_strategy.value,
        # gloo has no PREMUL_SUM, so the fused divide-in-reduce is a NCCL-only option.
        gradient_reduce_div_fusion=not on_cpu,
        check_for_nan_in_grad=train.nan_grad_check(cuda_graph.enabled),
        # As Megatron-LM sets it for bf16 (arguments.py); Megatron-FSDP reads only the
        # megatron_fsdp_*_dtype fields above (estimate.gradient_dtypes says what they give)
        grad_reduce_in_fp32=train.precision == Precision.bf16 and not train.grad_reduce_in_bf16,
        fp8_param_gather=train.fp8.param_gather,  # --fp8-param-gather sets this field too
    )


def optimizer_config(train: TrainConfig, fsdp: FsdpConfig) -> OptimizerConfig:
    """Our train section as megatron-core's OptimizerConfig (Adam, distributed optimizer)."""
    bf16 = train.precision == Precision.bf16
    return OptimizerConfig(
        optimizer="adam",
        lr=train.lr,
        min_lr=train.min_lr,
        weight_decay=train.weight_decay,
        clip_grad=train.grad_clip,
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        use_distributed_optimizer=True,
        overlap_param_gather=fsdp.overlap_param_gather,  # as Megatron-LM's --overlap-param-gather
        # Megatron-LM passes --fp8-recipe whether FP8 is on or not; None says "no FP8" plainly
        fp8_recipe=train.fp8.recipe.value if train.fp8.enabled else None,
    )


def warm_up_fusions(megatron_lm_flags: list) -> None:
    """megatron.training's JIT warm-up (initialize.py set_jit_fusion_options), where pretrain
    runs it: after seeding, before the model is built. It compiles the fused bias-GELU/SwiGLU and
    bias-dropout-add functions for both grad modes before step 1, and its torch.rand draws
    advance the CUDA generator as in Megatron-LM, so hidden-dropout masks come out the same.
    It reads megatron.training's global args: they are parsed by megatron's own parser from the
    run's Megatron-LM flags (launcher.preflight.megatron_lm) and unset after. GPU runs only: on a CPU
    the compiled fusions are off, and compiling them costs 30-50 s a rank."""
    import argparse

    from megatron.training import global_vars
    from megatron.training.arguments import add_megatron_arguments
    from megatron.training.initialize import set_jit_fusion_options

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    global_vars.set_args(parser.parse_args(megatron_lm_flags))
    try:
        set_jit_fusion_options()
    finally:
        global_vars.set_args(None)


def build_model(gpt, config: TransformerConfig, ddp: DistributedDataParallelConfig,
                device: torch.device, wrapping_stream) -> FullyShardedDataParallel:
    """The GPT (gpt_model, its weights set) wrapped in megatron-core's M-FSDP adapter on
    `wrapping_stream` (launcher.run.graphs.wrapping_stream), with the bucket size Megatron-LM's
    get_model gives."""
    resolve_bucket_size(ddp, gpt)
    with wrapping_stream:
        wrapped = FullyShardedDataParallel(config, ddp, gpt, device=device)
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = wrapped.no_sync
    return wrapped


def gpt_model(model: ModelConfig, parallel: ParallelConfig, config: TransformerConfig):
    """The GPT, in Float16Module with bf16 (bf16 weights, fp32 logits), as Megatron-LM's
    get_model hands it to Megatron-FSDP."""
    gpt = GPTModel(
        config=config,
        transformer_layer_spec=layer_spec_module(model, config),
        vocab_size=model.padded_vocab_size(parallel.tensor_model_parallel_size),
        max_sequence_length=model.seq_length,
        share_embeddings_and_output_weights=not model.untie_embeddings,
        **position_fields(model),
    )
    if config.bf16:
        gpt = Float16Module(config, gpt)  # bf16 weights, fp32 logits, as Megatron-LM's get_model
    if config.fp8:  # as get_model: before TE 2.0, .bfloat16() wrote FP8 weights' amax history
        correct_amax_history_if_needed([gpt])
    return gpt


def load_hf(gpt, model: ModelConfig, parallel: ParallelConfig, folder: str) -> None:
    """train.init_hf's weights into the unwrapped GPT: with expert parallelism, this rank's
    slice of the experts (megatron's local experts are numbered from 0 on every rank)."""
    from launcher.run import hf_weights

    local = (model.moe.num_experts or 0) // parallel.expert_model_parallel_size
    first = parallel_state.get_expert_model_parallel_rank() * local if model.moe.enabled else 0
    hf_weights.load(gpt, model, folder, model.padded_vocab_size(
        parallel.tensor_model_parallel_size), first)


def resolve_bucket_size(ddp: DistributedDataParallelConfig, gpt) -> None:
    """ddp.bucket_size as Megatron-LM's get_model sets it before wrapping (megatron/training/
    training.py, resolve_ddp_bucket_size: this rank's parameters // fsdp.num_buckets; null,
    max(4e7, 1e6 x the data-and-context-parallel size); None without overlapped gradient
    reduction), by megatron's own function. Megatron-FSDP buckets the parameters outside its
    units (the embeddings, the output layer, the final norm) by it: it decides the first
    parameter group."""
    from megatron.training.training import resolve_ddp_bucket_size

    num_parameters = sum(p.nelement() for p in gpt.parameters())
    ddp.bucket_size = resolve_ddp_bucket_size(
        ddp, parallel_state.get_data_parallel_group(with_context_parallel=True),
        ddp.overlap_grad_reduce, num_parameters)


def position_fields(model: ModelConfig) -> dict:
    """GPTModel's position-embedding arguments; rope's unset ones keep megatron's defaults."""
    fields = dict(position_embedding_type=model.position_embedding.value,
                  rope_scaling=model.rope_scaling, rotary_base=model.rotary_base,
                  rotary_percent=model.rotary_percent,
                  rope_scaling_factor=model.rope_scaling_factor)
    return {k: v for k, v in fields.items() if v is not None}


def layer_spec_module(model: ModelConfig, config: TransformerConfig):
    """megatron-core's spec for `model.layer_spec` (launcher.preflight.support.layer_spec), chosen as
    Megatron-LM's gpt_builders.py does: with experts, the decoder block spec (dense and MoE
    layers as model.moe.layer_freq says); without, one layer spec for every layer."""
    te = layer_spec(model) == LayerSpec.transformer_engine
    norm = model.normalization.value
    if model.moe.enabled:
        return get_gpt_decoder_block_spec(config, use_transformer_engine=te, normalization=norm)
    if te:
        from megatron.core.models.gpt.gpt_layer_specs import (
            get_gpt_layer_with_transformer_engine_spec,
        )

        return get_gpt_layer_with_transformer_engine_spec(qk_layernorm=model.qk_layernorm)
    return get_gpt_layer_local_spec(qk_layernorm=model.qk_layernorm, normalization=norm)


def build_optimizer(wrapped, train: TrainConfig, fsdp: FsdpConfig):
    """megatron-core's DistributedOptimizer over the M-FSDP model, and its LR scheduler. The
    scheduler counts samples, as Megatron-LM's get_optimizer_param_scheduler sets it up with
    --train-iters (megatron/training/training.py: warmup, decay and weight-decay steps are
    iterations x global batch, and train_step steps it by the global batch), so its state is the
    one a Megatron-LM checkpoint holds and either side resumes the other's."""
    optimizer = get_megatron_optimizer(optimizer_config(train, fsdp), [wrapped])
    decay_style = train.lr_schedule.value
    samples = train.global_batch_size
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0 if train.lr_warmup_steps else train.lr,
        max_lr=train.lr,
        min_lr=train.min_lr,
        lr_warmup_steps=train.lr_warmup_steps * samples,
        # megatron's scheduler needs warmup < decay steps: a run shorter than its warmup gets
        # the decay put after its end, so each of its steps has the LR train.lr_warmup_steps gives
        lr_decay_steps=max(train.steps, train.lr_warmup_steps + 1) * samples,
        lr_decay_style=decay_style,
        start_wd=train.weight_decay,
        end_wd=train.weight_decay,
        wd_incr_steps=train.steps * samples,
        wd_incr_style="constant",
    )
    return optimizer, scheduler


def build_all(cfg: Config, fusions: Fusions, on_cpu: bool):
    """The M-FSDP-wrapped GPT, its DistributedOptimizer and LR scheduler, with the fused kernels
    `fusions` (run_fusions). With CUDA graphs on, the config keeps cuda_graph_impl on a CPU too
    (the model builds the same); only capture is out of a CPU's reach (launcher.run.graphs)."""
    from launcher.run import graphs

    if not on_cpu:  # where megatron.training's pretrain warms its fusions up: before the build
        warm_up_fusions(megatron_lm_flags(cfg, fusions, on_cpu))
    tconfig = transformer_config(cfg.model, cfg.parallel, cfg.cuda_graph, cfg.train, fusions,
                                 on_cpu)
    device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
    ddp = ddp_config(cfg.fsdp, cfg.cuda_graph, cfg.train, on_cpu)
    gpt = gpt_model(cfg.model, cfg.parallel, tconfig)
    if cfg.train.init_hf:  # whole tensors on every rank, before M-FSDP shards them
        load_hf(gpt, cfg.model, cfg.parallel, cfg.train.init_hf)
    model = build_model(gpt, tconfig, ddp, device, graphs.wrapping_stream(cfg.cuda_graph))
    optimizer, scheduler = build_optimizer(model, cfg.train, cfg.fsdp)
    tconfig.grad_scale_func = optimizer.scale_loss
    return model, optimizer, scheduler


def megatron_lm_flags(cfg: Config, fusions: Fusions, on_cpu: bool) -> list:
    """This run as Megatron-LM's flags (launcher.preflight.megatron_lm), with its fusions."""
    from launcher.preflight import megatron_lm

    return megatron_lm.flags(cfg, fusions, layer_spec(cfg.model), on_cpu)


def run_fusions(cfg: Config, on_cpu: bool) -> Fusions:
    """The fused kernels this run uses (launcher.preflight.fusions), resolved once a rank: the
    Trainer holds them for the start line and the build."""
    from launcher.preflight import fusions

    return fusions.resolve(cfg.model, layer_spec(cfg.model), cfg.train.precision, on_cpu,
                           fusions.Kernels.here())


def local_shard_numel(model) -> int:
    """Elements of the model weights this rank holds (its M-FSDP shard)."""
    total = 0
    for group in model.param_and_grad_buffer.parameter_groups:
        if group.model_weight_buffer is not None:
            total += group.model_weight_buffer.data.numel()
    return total
