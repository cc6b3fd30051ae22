"""The dry run's memory: the layer spec the cluster runs (Transformer Engine's fused attention
keeps no s x s scores), the gradient dtypes Megatron-FSDP keeps and reduces in, and the verdict
against the GPU's memory with the cheapest change that fits. Values by hand, for the Llama 3 8B
recipe on 8 x H100 (sequence 8192, hidden 4096, 32 heads, 32 layers, vocabulary 128,256,
micro-batch 1, 8,030,261,248 parameters)."""

import pytest

from conftest import make_config
from launcher.config import FsdpDtype, LayerSpec
from launcher.estimate.memory import (
    activation_bytes, gradient_dtypes, memory_per_gpu, memory_spec,
)
from launcher.estimate.fit import fit
from launcher.estimate.predict import GIB, cluster_of, grad_bytes, predict
from launcher.estimate.prediction_text import short
from launcher.preflight.check import with_vocab

LLAMA_8B = ["+recipe=llama3_8b", "cluster.gpu=h100_sxm", "runtime.nproc_per_node=8"]
PARAMS = 8_030_261_248
S, H, A, LAYERS, VOCAB = 8192, 4096, 32, 32, 128_256
MIB = 2**20


def llama(*overrides):
    return with_vocab(make_config(*LLAMA_8B, *overrides))


def test_fused_attention_keeps_no_scores_by_hand():
    cfg = llama()
    per_layer = S * H * 34  # bf16: Korthikanti's 34 s b h bytes
    logits = S * VOCAB * 4 * 2  # fp32 logits and the loss's copy
    assert activation_bytes(cfg, LayerSpec.transformer_engine) == LAYERS * per_layer + logits
    assert activation_bytes(cfg, LayerSpec.transformer_engine) / MIB == 42_832
    scores = 5 * A * S * S  # the local attention's softmax, its dropout mask and output
    assert activation_bytes(cfg, LayerSpec.local) - activation_bytes(
        cfg, LayerSpec.transformer_engine) == LAYERS * scores


@pytest.mark.parametrize("overrides, spec", [
    ([], LayerSpec.transformer_engine),  # a GPU cluster: NVIDIA's container has TE
    (["model.layer_spec=local"], LayerSpec.local),
    (["cluster.kernels=installed"], LayerSpec.local),  # this machine has no TE
    (["cluster.gpu=null", "runtime.device=cpu"], LayerSpec.local),
])
def test_memory_is_for_the_spec_the_cluster_runs(overrides, spec):
    assert memory_spec(llama(*overrides)) == spec


@pytest.mark.parametrize("overrides, main, comm", [
    ([], FsdpDtype.bf16, FsdpDtype.bf16),  # auto: the weights' dtype, as megatron-core's
    (["train.grad_reduce_in_bf16=true"], FsdpDtype.bf16, FsdpDtype.bf16),  # M-FSDP ignores it
    (["fsdp.main_grads_dtype=fp32"], FsdpDtype.fp32, FsdpDtype.fp32),
    (["fsdp.grad_comm_dtype=fp32"], FsdpDtype.bf16, FsdpDtype.fp32),
    (["train.precision=fp32", "fsdp.main_params_dtype=auto"], FsdpDtype.fp32, FsdpDtype.fp32),
])
def test_one_function_gives_the_time_model_and_the_memory_table_their_dtypes(overrides, main,
                                                                            comm):
    cfg = llama(*overrides)
    dtypes = gradient_dtypes(cfg)
    assert (dtypes.main, dtypes.comm) == (main, comm)
    assert grad_bytes(cfg) == (2 if comm == FsdpDtype.bf16 else 4)
    table = memory_per_gpu(cfg, 8)["optim_grads_params"]
    assert table["gradients"] == PARAMS * (2 if main == FsdpDtype.bf16 else 4) / 8


def test_a_cuda_graph_keeps_the_optimizers_fp32_copy_of_bf16_gradients():
    eager = memory_per_gpu(llama("fsdp.prefetch_first_param_group=false"), 8)
    graph = memory_per_gpu(llama("fsdp.prefetch_first_param_group=false",
                                 "cuda_graph.impl=full_iteration"), 8)
    for strategy, shards in (("optim_grads_params", 8), ("no_shard", 1)):
        assert graph[strategy]["optimizer"] - eager[strategy]["optimizer"] == \
            pytest.approx(PARAMS * 4 / shards)
    same = memory_per_gpu(llama("fsdp.prefetch_first_param_group=false",
                                "fsdp.main_grads_dtype=fp32", "cuda_graph.impl=full_iteration"), 8)
    assert same["optim_grads_params"]["optimizer"] == eager["optim_grads_params"]["optimizer"]


def test_the_recipe_fits_an_h100_with_fused_attention():
    cfg = llama()
    verdict = fit(cfg, cluster_of(cfg))
    # weights 2, main weights 4, bf16 gradients 2, Adam 8 bytes, all over 8 ranks
    by_hand = (PARAMS * 16 / 8 + 42_832 * MIB) / GIB
    assert verdict.memory_gib == pytest.approx(by_hand) == pytest.approx(56.785, abs=1e-3)
    assert verdict.fits and verdict.change is None
    assert verdict.text() == "56.8 GiB of 80: fits"
    assert short(cfg)[0].endswith(", 57 GiB")


def test_the_local_spec_does_not_fit_and_selective_recomputation_is_named():
    cfg = llama("model.layer_spec=local")
    verdict = fit(cfg, cluster_of(cfg))
    assert not verdict.fits
    assert verdict.memory_gib == pytest.approx(56.785 + LAYERS * 5 * A * S * S / GIB, abs=1e-3)
    # recomputing core_attn drops the scores: the fused spec's memory, and no extra FLOPs in the
    # time model; a smaller micro-batch is already 1, and full recomputation costs a forward
    assert verdict.change.overrides == "model.recompute.granularity=selective"
    assert verdict.change.memory_gib == pytest.approx(56.785, abs=1e-3)
    assert verdict.text().startswith("376.8 GiB of 80: does not fit; the cheapest change that "
                                     "fits: model.recompute.granularity=selective (56.8 GiB")
    assert "DOES NOT FIT: 377 GiB of 80, fits with model.recompute.granularity=selective" in \
        short(cfg)[0]


def test_the_cheapest_fitting_change_is_the_shortest_predicted_step():
    cfg = llama("train.micro_batch_size=4")
    verdict = fit(cfg, cluster_of(cfg))
    assert verdict.memory_gib == pytest.approx((PARAMS * 2 + 4 * 42_832 * MIB) / GIB)
    # micro-batch 2 (98.6 GiB) does not fit; 1 does, as does full recomputation, which repeats
    # the forward: the micro-batch is named
    assert verdict.change.overrides == "train.micro_batch_size=1"
    full = llama("train.micro_batch_size=4", "model.recompute.granularity=full",
                 "model.recompute.method=uniform", "model.recompute.num_layers=1")
    assert fit(full, cluster_of(full)).fits
    assert verdict.change.step_s < predict(full, cluster_of(full)).timeline.step_s


def test_nothing_tried_fits_says_so():
    cfg = with_vocab(make_config("+recipe=llama3_70b", "cluster.gpu=h100_sxm",
                                 "runtime.nproc_per_node=8"))
    verdict = fit(cfg, cluster_of(cfg))
    assert not verdict.fits and verdict.change is None
    assert verdict.text().endswith("does not fit, and no single change tried fits (sharding, "
                                   "recomputation, micro-batch)")
