"""The architectures beyond GPT-2 (rope, untied embeddings, MoE, HSDP, recomputation): their recipes
compose, every rule refuses in one line before any rank, and the estimate counts what megatron-core
builds. Through Hydra's real compose, as test_config."""

import pytest

from conftest import make_config as make
from launcher.preflight.check import with_vocab
from launcher.config import CudaGraphConfig, ConfigError, LayerSpec, check_world_size, resolve_world
from launcher.estimate.memory import num_parameters, padded_vocab
from launcher.estimate.flops import flops_per_step
from launcher.preflight.support import check_support

MOE = ["model=moe_tiny"]
DENSE_LLAMA = ["model=llama_tiny"]

RULES = [
    # rope (a key that acts only with another: tests/unit/test_effect.py)
    (DENSE_LLAMA + ["model.rotary_percent=1.5"], r"model.rotary_percent=1.5 must be in \(0, 1\]"),
    (DENSE_LLAMA + ["model.kv_channels=15"], r"rope rotates channel pairs, and 15 channels per "
                                             r"head rotate"),
    (["model.kv_channels=0"], r"model.kv_channels=0 must be a positive integer or null"),
    # MoE
    (MOE + ["model.moe.router_topk=5"], r"model.moe.router_topk=5 routes each token to more "
                                        r"experts than model.moe.num_experts=4 has"),
    (MOE + ["model.moe.router_topk=1"], r"model.moe.router_topk=1 with "
                                        r"model.moe.router_score_function=softmax gives the "
                                        r"router a zero gradient"),
    (MOE + ["model.moe.layer_freq=[1,1,1]"], r"model.moe.layer_freq has 3 entries and "
                                             r"model.num_layers=2 \(megatron-core asserts one per "
                                             r"layer"),
    (MOE + ["model.moe.layer_freq=[0,2]"], r"model.moe.layer_freq holds 2; each entry is 0"),
    (MOE + ["model.moe.layer_freq=[0,0]"], r"model.moe.layer_freq has no MoE layer"),
    (MOE + ["model.moe.aux_loss_coeff=-1"], r"model.moe.aux_loss_coeff=-1.0 must be >= 0"),
    (MOE + ["parallel.expert_model_parallel_size=3"],
     r"parallel.expert_model_parallel_size=3 must divide model.moe.num_experts=4"),
    (MOE + ["parallel.tensor_model_parallel_size=2"],
     r"parallel.tensor_model_parallel_size=2 with model.moe.num_experts=4 needs sequence "
     r"parallelism"),
    (["model.num_attention_heads=12", "model.hidden_size=96", "model.num_query_groups=3",
      "parallel.tensor_model_parallel_size=2"],
     r"model.num_query_groups=3 must be a multiple or a divisor of "
     r"parallel.tensor_model_parallel_size=2"),
    # HSDP
    (["fsdp.outer_dp_sharding_strategy=optim", "fsdp.num_distributed_optimizer_instances=2",
      "fsdp.sharding_strategy=optim_grads"],
     r"fsdp.outer_dp_sharding_strategy=optim needs fsdp.sharding_strategy=optim_grads_params "
     r"inside each group \(Megatron-FSDP's fully_shard.py refuses optim_grads\)"),
    (["fsdp.num_distributed_optimizer_instances=0"],
     r"fsdp.num_distributed_optimizer_instances=0 must be at least 1"),
    # recomputation
    (["model.recompute.granularity=full"], r"model.recompute.granularity=full needs "
                                           r"model.recompute.method \(uniform or block\) and "
                                           r"model.recompute.num_layers"),
    (["model.recompute.granularity=full", "model.recompute.method=block",
      "model.recompute.num_layers=3"], r"model.recompute.num_layers=3 must be between 1 and "
                                       r"model.num_layers=2"),
    (["model.recompute.granularity=selective", "model.recompute.modules=[]"],
     r"recomputes nothing"),
    (["model.recompute.granularity=selective", "model.recompute.modules=[moe]"],
     r"model.recompute.modules holds moe, which this model has not"),
    (MOE + ["model.recompute.granularity=selective", "model.recompute.modules=[mlp]"],
     r"model.recompute.modules holds mlp, which this model has not"),
]


@pytest.mark.parametrize("overrides,message", RULES, ids=[r[1][:40] for r in RULES])
def test_rule(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make(*overrides)


WORLD_RULES = [
    (MOE + ["parallel.expert_model_parallel_size=4", "runtime.nproc_per_node=2"],
     r"parallel.expert_model_parallel_size=4 must divide the data-parallel size 2"),
    (["fsdp.num_distributed_optimizer_instances=2", "runtime.nproc_per_node=3",
      "train.global_batch_size=6"],
     r"fsdp.num_distributed_optimizer_instances=2 must divide the data-parallel x "
     r"context-parallel size 3"),
    (MOE + ["parallel.expert_model_parallel_size=2", "fsdp.num_distributed_optimizer_instances=4",
            "runtime.nproc_per_node=4"],
     r"fsdp.num_distributed_optimizer_instances=4 must divide the expert data-parallel size 2"),
    (MOE + ["runtime.nproc_per_node=2", "train.checkpoint.interval=3"],
     r"train.checkpoint.interval=3 cannot save this mixture of experts: its experts are sharded "
     r"over an expert data-parallel size of 2 .*raise parallel.expert_model_parallel_size"),
]


@pytest.mark.parametrize("overrides,message", WORLD_RULES, ids=[r[1][:40] for r in WORLD_RULES])
def test_world_rule(overrides, message):
    cfg = make(*overrides)
    with pytest.raises(ConfigError, match=message):
        check_world_size(cfg, resolve_world(cfg.runtime, cfg.cluster).size)


def test_moe_graphs_and_grouped_gemm_are_refused_on_the_local_spec():
    graphs = make(*MOE, "cuda_graph=full_iteration", "fsdp.prefetch_first_param_group=false")
    with pytest.raises(ConfigError, match=r"cuda_graph.impl=full_iteration cannot capture a "
                                          r"mixture of experts on the local layer spec .*#6152"):
        check_support(graphs.model, graphs.parallel, graphs.cuda_graph)
    grouped = make(*MOE, "model.moe.grouped_gemm=true")
    with pytest.raises(ConfigError, match=r"model.moe.grouped_gemm=true would be ignored: the "
                                          r"local layer spec builds the experts as SequentialMLP"):
        check_support(grouped.model, grouped.parallel, CudaGraphConfig())


@pytest.mark.parametrize("name,total", [("llama3_8b", 8_030_261_248),
                                        ("llama3_70b", 70_553_706_496)])
def test_llama_recipes_have_meta_s_parameter_counts(name, total):
    """Meta's published sizes: 8.03B and 70.55B (untied, 128,256-token vocabulary)."""
    cfg = with_vocab(make(f"+recipe={name}"))
    assert num_parameters(cfg.model, padded_vocab(cfg)).total == total


def test_gpt2_small_is_tied_and_124m():
    cfg = with_vocab(make("+recipe=gpt"))
    assert not cfg.model.untie_embeddings
    assert num_parameters(cfg.model, padded_vocab(cfg)).total == 124_475_904


def test_moe_flops_count_topk_routed_and_the_shared_expert():
    """Megatron-LM's MLP term per token for an MoE layer: 3*2*h*F*(ffn_e*topk + ffn_s); worked
    for moe_tiny (h 64, swiglu F 3, ffn_e 48, top-2, shared 96, both layers MoE) against the
    dense twin of the same attention."""
    moe = make(*MOE).model
    dense = make(*MOE, "model.moe.num_experts=null", "model.moe.ffn_hidden_size=null",
                 "model.moe.shared_expert_ffn_hidden_size=null").model
    per_token = (flops_per_step(moe, 1, 128) - flops_per_step(dense, 1, 128)) / moe.seq_length
    assert per_token == 2 * 3 * 2 * 64 * 3 * ((48 * 2 + 96) - 176)


def test_hsdp_and_experts_shard_the_estimate():
    from launcher.estimate.memory import memory_per_gpu

    base = ["+recipe=deepseek_v3_proxy_tiny_cpu"]
    hsdp = memory_per_gpu(with_vocab(make(*base)), 4)["optim_grads_params"]
    flat = memory_per_gpu(with_vocab(make(*base, "fsdp.num_distributed_optimizer_instances=1",
                                          "fsdp.outer_dp_sharding_strategy=no_shard")), 4)
    # outer optim shards main params and moments over all 4 ranks, as plain FSDP does; weights
    # and gradients only inside a group of 2
    assert hsdp["optimizer"] == flat["optim_grads_params"]["optimizer"]
    assert hsdp["weights"] > flat["optim_grads_params"]["weights"]


def test_recomputation_shows_the_activation_memory_it_saves():
    from launcher.estimate.memory import activation_bytes

    def activations(*overrides):  # the local spec: its attention keeps the s x s scores
        return activation_bytes(with_vocab(make("+recipe=llama3_70b", *overrides)),
                                LayerSpec.local)

    full = activations()  # the recipe: full, uniform, one layer a chunk
    none = activations("model.recompute.granularity=null", "model.recompute.method=null",
                       "model.recompute.num_layers=null")
    selective = activations("model.recompute.granularity=selective",
                            "model.recompute.method=null", "model.recompute.num_layers=null")
    assert full < selective < none
    assert none / full > 30  # 80 layers' activations against their inputs and one layer's
