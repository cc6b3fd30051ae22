"""The launcher's FLOPs and memory estimate against Megatron-LM's own code, not hand copies: each
recipe written as Megatron-LM's command-line flags, parsed by megatron.training's own argument
parser (the megatron-core wheel ships it), then given to
`megatron.training.training.num_floating_point_operations` and
`megatron.training.theoretical_memory_usage`.

What upstream does not cover, and why the launcher's numbers differ there:
- weights of GPT-2-style models: upstream counts no biases and no learned position embeddings;
  the launcher counts what GPTModel builds (the difference is exactly those);
- activations: upstream's formula without sequence parallelism
  (`compute_activation_memory_without_sp`, the one megatron uses unless sequence parallelism and
  selective recomputation are both on) keeps 34 s b h bytes a layer at TP 1, fused attention's
  (no s x s scores), as the launcher's transformer_engine spec does; it ignores recomputation,
  keeps the logits in 16-bit where the launcher keeps fp32 logits and the loss's copy, adds the
  embeddings' input and dropout, and 5% for temporaries. The comparison is of the layers
  (exactly equal) with those differences stated; the local spec's scores are the launcher's own;
- Megatron-FSDP's sharding of weights and gradients (optim_grads, optim_grads_params) and HSDP:
  upstream's distributed optimizer shards the optimizer state only, which is the launcher's
  `optim` strategy, the one compared; and upstream counts fp32 main gradients (its DDP's
  grad_reduce_in_fp32), which Megatron-FSDP keeps only with fsdp.main_grads_dtype=fp32 (bf16 by
  default for bf16 weights: 2 bytes a parameter less, unsharded under `optim`).
"""

import dataclasses

import sys

import pytest

from conftest import make_config
from launcher.preflight.check import with_vocab
from launcher.config import FsdpDtype, LayerSpec, Normalization, PositionEmbedding, Precision
from launcher.preflight import fusions, megatron_lm
from launcher.estimate.memory import activation_bytes, memory_per_gpu, num_parameters, padded_vocab
from launcher.estimate.flops import flops_per_step

pytestmark = pytest.mark.integration

# recipe: the world it is estimated on (data-parallel size)
RECIPES = {"gpt": 8, "llama3_8b": 8, "llama3_70b": 64, "moe_small": 8, "deepseek_v3_proxy": 128}


def megatron_lm_flags(cfg) -> list:
    """The recipe as Megatron-LM's pretrain_gpt.py flags (runtime.print_megatron_lm's), for a GPU
    without Transformer Engine."""
    spec, none = LayerSpec.local, fusions.Kernels(False, False, False, False)
    resolved = fusions.resolve(cfg.model, spec, cfg.train.precision, False, none)
    return megatron_lm.flags(cfg, resolved, spec, False)


def upstream_args(cfg, dp: int, monkeypatch):
    from megatron.training.arguments import parse_args

    monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py", *megatron_lm_flags(cfg)])
    args = parse_args()
    args.padded_vocab_size = padded_vocab(cfg)  # megatron pads the tokenizer's vocabulary so too
    tp = cfg.parallel.tensor_model_parallel_size
    args.world_size = dp * tp
    args.data_parallel_size = dp
    args.expert_tensor_parallel_size = tp
    args.use_distributed_optimizer = True
    args.virtual_pipeline_model_parallel_size = None  # what validate_args sets without PP
    return args


@pytest.fixture(params=list(RECIPES))
def recipe(request, monkeypatch):
    cfg = with_vocab(make_config(f"+recipe={request.param}"))
    return request.param, cfg, upstream_args(cfg, RECIPES[request.param], monkeypatch)


def test_flops_per_step_are_megatron_lm_s(recipe):
    from megatron.training.training import num_floating_point_operations

    _, cfg, args = recipe
    batch = cfg.train.global_batch_size
    ours = flops_per_step(cfg.model, batch, padded_vocab(cfg))
    assert ours == pytest.approx(num_floating_point_operations(args, batch), rel=1e-12)


def test_weight_and_optimizer_memory_is_megatron_lm_s(recipe):
    """bf16 weights, fp32 main weights and gradients, Adam in fp32 sharded over the
    data-parallel ranks (over the expert data-parallel ranks for experts): upstream's
    6 + 12/dp bytes a parameter, the launcher's `optim` strategy."""
    from megatron.training.theoretical_memory_usage import compute_weight_and_optimizer_memory

    name, cfg, args = recipe
    assert cfg.train.precision == Precision.bf16
    fp32_grads = dataclasses.replace(cfg, fsdp=dataclasses.replace(
        cfg.fsdp, main_grads_dtype=FsdpDtype.fp32))
    parts = memory_per_gpu(fp32_grads, RECIPES[name])["optim"]
    ours = sum(v for k, v in parts.items() if k != "activations")
    upstream = compute_weight_and_optimizer_memory(args)
    default = memory_per_gpu(cfg, RECIPES[name])["optim"]  # bf16 main gradients, unsharded
    assert parts["gradients"] - default["gradients"] == pytest.approx(
        2 * (num_parameters(cfg.model, padded_vocab(cfg)).dense
             + num_parameters(cfg.model, padded_vocab(cfg)).experts
             / cfg.parallel.expert_model_parallel_size))
    m = cfg.model
    if m.add_bias_linear or m.position_embedding == PositionEmbedding.learned_absolute:
        # upstream leaves out biases and learned positions: exactly the difference, at the
        # unsharded 6 bytes and sharded 12/dp of a dense parameter
        norm = 2 if m.normalization == Normalization.LayerNorm else 1
        assert norm == 2 and not m.moe.enabled
        h, q = m.hidden_size, m.head_channels * m.num_attention_heads
        k = m.head_channels * m.query_groups
        biases = m.num_layers * ((q + 2 * k) + h + m.ffn_size + h)
        extra = biases + m.seq_length * h
        assert ours - upstream == pytest.approx(extra * (6 + 12 / RECIPES[name]), rel=1e-9)
    else:
        assert ours == pytest.approx(upstream, rel=1e-9)
    assert num_parameters(m, padded_vocab(cfg)).total > 0


@pytest.mark.parametrize("name", ["llama3_8b", "llama3_70b"])
def test_fused_attention_activations_are_megatron_lm_s_layer_for_layer(name, monkeypatch):
    """Without recomputation (upstream's formula has none), the transformer_engine spec's layers
    are upstream's 34 s b h bytes each; what differs is stated term by term."""
    from megatron.training.theoretical_memory_usage import compute_activation_memory_without_sp

    cfg = with_vocab(make_config(f"+recipe={name}", "model.recompute.granularity=null",
                                 "model.recompute.method=null", "model.recompute.num_layers=null"))
    args = upstream_args(cfg, RECIPES[name], monkeypatch)
    assert not args.sequence_parallel and args.recompute_granularity is None
    upstream = compute_activation_memory_without_sp(args, num_microbatches=None)
    ours = activation_bytes(cfg, LayerSpec.transformer_engine)
    m = cfg.model
    sb, h, vocab = m.seq_length * cfg.train.micro_batch_size, m.hidden_size, padded_vocab(cfg)
    # upstream: (layers + embedding input 8sb and dropout sbh + 16-bit logits and final norm
    # output) x 1.05; ours: layers + fp32 logits and the loss's copy
    upstream_outside = 8 * sb + sb * h + 2 * (sb * vocab + sb * h)
    ours_outside = sb * vocab * 4 * 2
    assert upstream / 1.05 - upstream_outside == pytest.approx(ours - ours_outside, rel=1e-12)
    assert ours - ours_outside == m.num_layers * 34 * sb * h


def test_the_70b_recipes_full_recomputation_is_what_upstream_leaves_out(monkeypatch):
    from megatron.training.theoretical_memory_usage import compute_activation_memory_without_sp

    cfg = with_vocab(make_config("+recipe=llama3_70b"))
    args = upstream_args(cfg, RECIPES["llama3_70b"], monkeypatch)
    assert args.recompute_granularity == "full"
    upstream = compute_activation_memory_without_sp(args, num_microbatches=None)
    ours = activation_bytes(cfg, LayerSpec.transformer_engine)
    # upstream keeps every layer's activations; with one layer a chunk the launcher keeps each
    # layer's input (2 s b h) and one layer's activations while it is recomputed
    assert upstream / ours > 8
