"""Megatron-FSDP's parameter groups for a config, by arithmetic (no torch): what the dry run's
time model gathers and reduces, and what `fsdp.prefetch_first_param_group` moves (the first).

What it follows (megatron-core 0.19.2):
- The bucket size of the parameters outside the FSDP units is the one Megatron-LM's get_model
  hands Megatron-FSDP (megatron/training/training.py, resolve_ddp_bucket_size): the rank's
  parameters // fsdp.num_buckets; else fsdp.bucket_size; else max(4e7, 1e6 x the data-and-
  context-parallel size); None without overlapped gradient reduction.
- The groups (megatron_fsdp/param_and_grad_buffer.py, _get_parameter_groups): the parameters in
  `named_parameters()` order, grouped by expert or not and by FSDP unit (a transformer layer
  under optim_grads_params; none otherwise), each group in the order its first parameter comes;
  a group outside the units is cut into buckets, each closed once it reaches the bucket size.
- The parameter order is the local layer spec's GPTModel (tests/distributed/test_bucket_layout.py
  compares every full-size recipe with megatron's own grouping of the model it builds).
"""

from dataclasses import dataclass
from typing import List, Optional

from launcher.config import Activation, Config, Normalization, PositionEmbedding, ShardingStrategy

DEFAULT_BUCKET = 40_000_000  # resolve_ddp_bucket_size's floor
PER_RANK = 1_000_000  # and its elements per data-parallel rank


@dataclass(frozen=True)
class Param:
    """One parameter as a rank holds it (its local experts only)."""

    name: str
    numel: int
    expert: bool
    layer: Optional[int]
    """The transformer layer it is in; None outside them."""


@dataclass(frozen=True)
class Group:
    """One of Megatron-FSDP's parameter groups (buckets), as a rank holds it."""

    name: str
    params: int
    """Elements of this rank's parameters in it (a routed-experts group: its local experts)."""
    experts: bool
    unit: Optional[int]
    """The FSDP unit (transformer layer) it belongs to; None: outside the units."""


def norm(name: str, width: int, cfg: Config) -> List[Param]:
    bias = cfg.model.normalization == Normalization.LayerNorm
    return [Param(f"{name}.weight", width, False, None)] + (
        [Param(f"{name}.bias", width, False, None)] if bias else [])


def linear(name: str, rows: int, cols: int, cfg: Config, expert: bool = False) -> List[Param]:
    bias = cfg.model.add_bias_linear
    return [Param(f"{name}.weight", rows * cols, expert, None)] + (
        [Param(f"{name}.bias", rows, expert, None)] if bias else [])


def mlp(name: str, width: int, cfg: Config, expert: bool = False) -> List[Param]:
    h = cfg.model.hidden_size
    gates = 2 if cfg.model.activation == Activation.swiglu else 1
    return (linear(f"{name}.linear_fc1", width * gates, h, cfg, expert)
            + linear(f"{name}.linear_fc2", h, width, cfg, expert))


def layer_params(cfg: Config, moe: int) -> List[Param]:
    """One transformer layer's parameters in registration order (TransformerLayer, SelfAttention,
    MLP or MoELayer of the local spec)."""
    m = cfg.model
    h, d = m.hidden_size, m.head_channels
    q, k = d * m.num_attention_heads, d * m.query_groups
    out = (norm("input_layernorm", h, cfg) + linear("self_attention.linear_proj", h, q, cfg)
           + linear("self_attention.linear_qkv", q + 2 * k, h, cfg))
    if m.qk_layernorm:
        out += norm("self_attention.q_layernorm", d, cfg) + norm("self_attention.k_layernorm", d,
                                                                  cfg)
    out += norm("pre_mlp_layernorm", h, cfg)
    if not moe:
        return out + mlp("mlp", m.ffn_size, cfg)
    local = m.moe.num_experts // cfg.parallel.expert_model_parallel_size
    out.append(Param("mlp.router.weight", m.moe.num_experts * h, False, None))
    for j in range(local):
        out += mlp(f"mlp.experts.local_experts.{j}", m.expert_ffn_size, cfg, expert=True)
    if m.moe.shared_expert_ffn_hidden_size:
        out += mlp("mlp.shared_experts", m.moe.shared_expert_ffn_hidden_size, cfg)
    return out


def named_parameters(cfg: Config) -> List[Param]:
    """The rank's parameters in GPTModel's `named_parameters()` order (tensor parallelism 1)."""
    m = cfg.model
    vocab, h = m.padded_vocab_size(cfg.parallel.tensor_model_parallel_size), m.hidden_size
    out = [Param("embedding.word_embeddings.weight", vocab * h, False, None)]
    if m.position_embedding == PositionEmbedding.learned_absolute:
        out.append(Param("embedding.position_embeddings.weight", m.seq_length * h, False, None))
    for index, moe in enumerate(m.moe.pattern(m.num_layers)):
        out += [Param(f"decoder.layers.{index}.{p.name}", p.numel, p.expert, index)
                for p in layer_params(cfg, moe)]
    out += norm("decoder.final_layernorm", h, cfg)
    if m.untie_embeddings:
        out.append(Param("output_layer.weight", vocab * h, False, None))
    return out


def bucket_size(cfg: Config, dp_cp: int, num_parameters: int) -> Optional[int]:
    """The bucket size Megatron-LM's get_model hands Megatron-FSDP (see the module's
    docstring)."""
    f = cfg.fsdp
    if not f.overlap_grad_reduce:
        return None
    if f.num_buckets is not None:
        return num_parameters // f.num_buckets
    return f.bucket_size if f.bucket_size is not None else max(DEFAULT_BUCKET, PER_RANK * dp_cp)


def parameter_groups(cfg: Config, dp_cp: int) -> List[Group]:
    """The rank's groups in Megatron-FSDP's order, for `dp_cp` data-and-context-parallel ranks."""
    units = cfg.fsdp.sharding_strategy == ShardingStrategy.optim_grads_params
    params = named_parameters(cfg)
    size = bucket_size(cfg, dp_cp, sum(p.numel for p in params))
    by_key = {}
    for p in params:
        by_key.setdefault((p.expert, p.layer if units else None), []).append(p)
    groups = []
    for (expert, unit), members in by_key.items():
        bucket = []
        for p in members:
            bucket.append(p)
            full = unit is None and size and sum(b.numel for b in bucket) >= size
            if full or p is members[-1]:
                groups.append(Group(group_name(bucket, unit), sum(b.numel for b in bucket),
                                    expert, unit))
                bucket = []
    return groups


def group_name(bucket: List[Param], unit: Optional[int]) -> str:
    """A unit's name ("layer 3", "layer 3 experts"), or what a bucket outside the units holds."""
    if unit is not None:
        return f"layer {unit}" + (" experts" if bucket[0].expert else "")
    parts = {"word_embeddings": "embeddings", "position_embeddings": "position embeddings",
             "final_layernorm": "final norm", "output_layer": "output layer"}
    names = [next((v for k, v in parts.items() if k in p.name), "layers") for p in bucket]
    return " + ".join(dict.fromkeys(names))
