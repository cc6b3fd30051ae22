"""`runtime.dry_run=true`: what a run would be, without importing torch or starting a rank.

Parameters (total, and active per token for a mixture of experts), model FLOPs and tokens per
optimizer step, and an estimate of memory per GPU for each Megatron-FSDP sharding strategy.
Arithmetic only: config sections in, numbers out.

Parameters: megatron-core's GPTModel with the local layer spec: word embeddings, learned
absolute position embeddings (model.position_embedding=learned_absolute; rope has none), an
output layer of its own when model.untie_embeddings, biases on every linear layer when
model.add_bias_linear, LayerNorm with a bias or RMSNorm without, per-head query and key norms
with model.qk_layernorm; an MoE layer holds its router (experts x h), every expert's MLP and the
shared expert's.

Memory per GPU, as Megatron-FSDP holds it (dp = data-parallel size; experts are sharded over the
expert data-parallel group, dp / expert-parallel size, each rank holding experts / ep of them):
- model weights: 2 bytes/parameter in bf16, 4 in fp32; sharded by optim_grads_params;
- main (fp32) parameters: 4 bytes/parameter in bf16 (in fp32 the weights are the main ones);
- gradients: the main-gradient buffer, in the dtype gradient_dtypes says (bf16 weights: bf16
  unless fsdp.main_grads_dtype=fp32); sharded by optim_grads and up; with a CUDA graph
  (megatron_fsdp_cuda_graph_mode) a main-gradient dtype other than the main weights' also keeps
  the optimizer's cast copy of the local shard (param_and_grad_buffer.py zero_grad_buffer);
- Adam moments: 8 bytes/parameter; main parameters and moments sharded by optim and up;
  HSDP (fsdp.num_distributed_optimizer_instances = n) shards inside a group of dp / n ranks,
  and across the n groups too for what outer_dp_sharding_strategy=optim shards (the optimizer
  state and main parameters);
- activations of one microbatch, per layer s*b*h*(10 + 24/t + 5*a*s/(h*t)) bytes in 16-bit
  over t tensor-parallel ranks without sequence parallelism, as the launcher runs them
  (Korthikanti et al. 2022, table 2, no recomputation; 34 + 5*a*s/h at t = 1), twice in
  fp32, plus the fp32 logits s*b*V*4, of which the loss keeps a copy. The 5*a*s/h term is the s x s attention scores, which only the local
  layer spec's attention keeps: Transformer Engine's fused attention (the transformer_engine
  spec) keeps none, nor does selective recomputation of core_attn. Full recomputation keeps the
  input of each recomputed chunk (2*s*b*h in 16-bit; uniform: chunks of num_layers layers;
  block: the first num_layers layers one by one) and one chunk's activations while it is
  recomputed. With model.cpu_offloading_num_layers = n, n layers' activations are in the host's
  memory, but for one layer's on its way.
A sharded strategy also holds the unsharded weights of the layers in flight and their gradient
buckets, an MoE layer the tokens dispatched to its experts, and a gradient communication dtype
other than the main gradients' its cast buckets; all are left out.
"""

from dataclasses import dataclass
from typing import Optional

from launcher.config import (
    Activation, Config, FsdpDtype, LayerSpec, ModelConfig, Normalization, OuterSharding,
    PositionEmbedding, Precision, RecomputeGranularity, RecomputeMethod, RecomputeModule,
    ShardingStrategy,
)
from launcher.estimate.flops import flops_per_step
from launcher.preflight.support import for_gpu, layer_spec, target_kernels

MIB = 2**20


@dataclass(frozen=True)
class Parameters:
    """A model's parameter count, split where sharding differs: experts apart from the rest."""

    dense: int
    """Every parameter outside the routed experts (shared experts and routers included)."""
    experts: int
    """The routed experts' parameters, all of them."""
    active_experts: int
    """The routed experts' parameters one token passes through (top-k of each MoE layer)."""

    @property
    def total(self) -> int:
        return self.dense + self.experts

    @property
    def active(self) -> int:
        return self.dense + self.active_experts


def mlp_parameters(model: ModelConfig, width: int) -> int:
    gates = 2 if model.activation == Activation.swiglu else 1
    h, bias = model.hidden_size, model.add_bias_linear
    return h * width * gates + width * h + ((width * gates + h) if bias else 0)


def num_parameters(model: ModelConfig, padded_vocab: int) -> Parameters:
    """The GPTModel that `model` builds (see the module's docstring)."""
    layers = [layer_parameters(model, moe) for moe in model.moe.pattern(model.num_layers)]
    experts = sum(layer.experts for layer in layers)
    active = sum(layer.active_experts for layer in layers)
    return Parameters(outside_layers(model, padded_vocab) + sum(l.dense for l in layers),
                      experts, active)


def norm_parameters(model: ModelConfig) -> int:
    h = model.hidden_size
    return 2 * h if model.normalization == Normalization.LayerNorm else h


def outside_layers(model: ModelConfig, padded_vocab: int) -> int:
    """Word (and an untied output layer's) and position embeddings, and the final norm: the
    parameters outside the layers, which Megatron-FSDP buckets by the bucket size
    (launcher/estimate/param_groups.py)."""
    h = model.hidden_size
    embeddings = padded_vocab * h * (2 if model.untie_embeddings else 1)
    positions = (model.seq_length * h
                 if model.position_embedding == PositionEmbedding.learned_absolute else 0)
    return embeddings + positions + norm_parameters(model)


def layer_parameters(model: ModelConfig, moe: int) -> Parameters:
    """One transformer layer's parameters; `moe`: 1 for an MoE layer (router, shared expert and
    the routed experts in place of the MLP)."""
    h = model.hidden_size
    q = model.head_channels * model.num_attention_heads
    k = model.head_channels * model.query_groups
    norm = norm_parameters(model)
    head_norm = norm // h * model.head_channels
    bias = model.add_bias_linear
    attention = (norm + h * (q + 2 * k) + q * h + ((q + 2 * k + h) if bias else 0)
                 + (2 * head_norm if model.qk_layernorm else 0) + norm)  # + pre-MLP norm
    if not moe:
        return Parameters(attention + mlp_parameters(model, model.ffn_size), 0, 0)
    spec = model.moe
    expert = mlp_parameters(model, model.expert_ffn_size)
    shared = (mlp_parameters(model, spec.shared_expert_ffn_hidden_size)
              if spec.shared_expert_ffn_hidden_size else 0)
    return Parameters(attention + spec.num_experts * h + shared, spec.num_experts * expert,
                      spec.router_topk * expert)


@dataclass(frozen=True)
class GradientDtypes:
    """The dtypes Megatron-FSDP keeps and reduces gradients in (megatron-core 0.19.2)."""

    main: FsdpDtype
    """The main-gradient buffer's: fsdp.main_grads_dtype, auto being the weights' dtype
    (param_and_grad_buffer.py _resolve_group_grad_dtype)."""
    comm: FsdpDtype
    """The reduce-scatter's: fsdp.grad_comm_dtype, auto being the main gradients' (grad_dtype_fn
    there). Megatron-LM's grad_reduce_in_fp32 does not reach Megatron-FSDP: its adapter reads only
    the megatron_fsdp_*_dtype fields (mcore_fsdp_adapter.py MixedPrecisionPolicy)."""

    @property
    def main_bytes(self) -> int:
        return 2 if self.main == FsdpDtype.bf16 else 4

    @property
    def comm_bytes(self) -> int:
        return 2 if self.comm == FsdpDtype.bf16 else 4


def gradient_dtypes(cfg: Config) -> GradientDtypes:
    """What the run's Megatron-FSDP keeps and reduces gradients in; the time model and the
    memory table both read it."""
    main = FsdpDtype(cfg.fsdp.main_grads_dtype)
    if main == FsdpDtype.auto:
        main = FsdpDtype(Precision(cfg.train.precision).value)
    comm = FsdpDtype(cfg.fsdp.grad_comm_dtype)
    return GradientDtypes(main, main if comm == FsdpDtype.auto else comm)


def memory_spec(cfg: Config) -> LayerSpec:
    """The layer spec the memory is estimated for: the cluster's (cluster.gpu or
    runtime.device=cuda with cluster.kernels=ngc: Transformer Engine's where model.layer_spec is
    auto), else this installation's."""
    return layer_spec(cfg.model, target_kernels(cfg, bool(for_gpu(cfg))))


def memory_per_gpu(cfg: Config, dp: int, spec: Optional[LayerSpec] = None) -> dict:
    """{strategy: {part: bytes}} for one GPU with `spec` (default memory_spec's); model
    parallelism leaves the dense sizes undivided: the launcher's recipes use tp = pp = cp = 1."""
    params = num_parameters(cfg.model, padded_vocab(cfg))
    ep = cfg.parallel.expert_model_parallel_size
    bf16 = cfg.train.precision == Precision.bf16
    per_param = {"weights": 2 if bf16 else 4, "main_params": 4 if bf16 else 0,
                 "gradients": gradient_dtypes(cfg).main_bytes, "optimizer": 8 + cast_copy(cfg)}
    sharded = {ShardingStrategy.no_shard: (),
               ShardingStrategy.optim: ("main_params", "optimizer"),
               ShardingStrategy.optim_grads: ("main_params", "optimizer", "gradients"),
               ShardingStrategy.optim_grads_params: ("main_params", "optimizer", "gradients",
                                                     "weights")}
    acts = activation_bytes(cfg, spec or memory_spec(cfg))
    result = {}
    for strategy, which in sharded.items():
        parts = {}
        for part, width in per_param.items():
            dense = params.dense * width / shards(cfg, part, which, dp)
            experts = params.experts / ep * width / shards(cfg, part, which, dp // ep)
            parts[part] = dense + experts
        result[strategy.value] = {**parts, "activations": acts}
    return result


def cast_copy(cfg: Config) -> int:
    """Bytes per parameter of the optimizer's shard that a CUDA graph keeps as the main
    gradients cast to the main weights' dtype (megatron_fsdp_cuda_graph_mode does not
    dereference it, param_and_grad_buffer.py zero_grad_buffer); counted with the optimizer state,
    which is sharded the same way."""
    main_params = FsdpDtype(cfg.fsdp.main_params_dtype)
    if not cfg.cuda_graph.enabled or main_params == FsdpDtype.auto:
        return 0
    if gradient_dtypes(cfg).main == main_params:
        return 0
    return 2 if main_params == FsdpDtype.bf16 else 4


def shards(cfg: Config, part: str, sharded: tuple, group: int) -> int:
    """Over how many ranks `part` is split within a data-parallel group of `group` ranks."""
    if part not in sharded:
        return 1
    instances = cfg.fsdp.num_distributed_optimizer_instances
    across = (cfg.fsdp.outer_dp_sharding_strategy == OuterSharding.optim
              and part in ("main_params", "optimizer"))
    return group if across else max(group // instances, 1)


def layer_activation_bytes(cfg: Config, spec: LayerSpec) -> float:
    """One layer's activations for one microbatch with `spec`, nothing recomputed."""
    m, b = cfg.model, cfg.train.micro_batch_size
    s, h, a = m.seq_length, m.hidden_size, m.num_attention_heads
    width = 1 if cfg.train.precision == Precision.bf16 else 2
    recompute = m.recompute
    scores = 5 * a * s / h
    if spec == LayerSpec.transformer_engine or (
            recompute.granularity == RecomputeGranularity.selective
            and RecomputeModule.core_attn in recompute.modules):
        scores = 0  # fused attention keeps no s x s scores; nor does recomputing them
    t = cfg.parallel.tensor_model_parallel_size  # no sequence parallelism: 10 sbh replicated
    return s * b * h * (10 + 24 / t + scores / t) * width


def activation_bytes(cfg: Config, spec: LayerSpec) -> float:
    """One microbatch's activations with `spec` (see the module's docstring)."""
    m, b = cfg.model, cfg.train.micro_batch_size
    s, h = m.seq_length, m.hidden_size
    width = 1 if cfg.train.precision == Precision.bf16 else 2
    recompute = m.recompute
    per_layer = layer_activation_bytes(cfg, spec)
    offloaded = m.cpu_offloading_num_layers
    # offloaded layers' activations are in the host's memory, but for the one on its way
    layers = (m.num_layers - offloaded + (1 if offloaded else 0)) * per_layer
    if recompute.granularity == RecomputeGranularity.full:
        n, layer_input = min(recompute.num_layers, m.num_layers), 2 * s * b * h * width
        if recompute.method == RecomputeMethod.uniform:  # each chunk of n keeps its input
            layers = -(-m.num_layers // n) * layer_input + n * per_layer
        else:  # block: the first n layers keep their inputs, the others everything
            layers = (m.num_layers - n) * per_layer + n * layer_input + per_layer
    logits = s * b * padded_vocab(cfg) * 4 * 2
    return layers + logits


def padded_vocab(cfg: Config) -> int:
    return cfg.model.padded_vocab_size(cfg.parallel.tensor_model_parallel_size)


def describe(cfg: Config, world_size: int, dp: int, note: str = "") -> str:
    """What `launch ... runtime.dry_run=true` prints; `note`, if any, before its last line."""
    m, t = cfg.model, cfg.train
    flops = flops_per_step(m, t.global_batch_size, padded_vocab(cfg))
    params = num_parameters(m, padded_vocab(cfg))
    active = f" ({params.active:,} active per token)" if m.moe.enabled else ""
    lines = [f"[dry run] {params.total:,} parameters{active}; {flops / 1e12:.4g} TFLOP and "
             f"{t.global_batch_size * m.seq_length:,} tokens per step; world {world_size}, "
             f"data-parallel {dp}"
             + (f", expert-parallel {cfg.parallel.expert_model_parallel_size}"
                if m.moe.enabled else "")
             + f", {t.precision.value}"
             + (f" with FP8 GEMMs ({t.fp8.format.value}, {t.fp8.recipe.value} scaling"
                + (", FP8 parameter all-gather" if t.fp8.param_gather else "") + ")"
                if t.fp8.enabled else ""),
             f"[dry run] memory per GPU (MiB) for the {spec_text(memory_spec(cfg))}: "
             "strategy, weights, main params, gradients, optimizer, activations, total"]
    for strategy, parts in memory_per_gpu(cfg, dp).items():
        mark = " <- this run" if strategy == cfg.fsdp.sharding_strategy.value else ""
        values = [parts[k] / MIB for k in ("weights", "main_params", "gradients", "optimizer",
                                           "activations")]
        lines.append(f"  {strategy:<19}" + "".join(f"{v:>10.1f}" for v in values)
                     + f"{sum(values):>10.1f}{mark}")
    lines += [f"[dry run] {note}"] if note else []
    lines.append("[dry run] nothing started")
    return "\n".join(lines)


def spec_text(spec: LayerSpec) -> str:
    """The layer spec as the memory line names it, with what decides its attention's memory."""
    if spec == LayerSpec.transformer_engine:
        return "transformer_engine layer spec (fused attention, no s x s scores)"
    return f"{spec.value} layer spec (its attention keeps the s x s scores)"
