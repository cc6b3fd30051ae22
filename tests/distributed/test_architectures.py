"""The CPU twins of the Llama, MoE and DeepSeek recipes, trained for real through megatron-core and
Megatron-FSDP over gloo, as their recipes say (bf16): on 1, 2 and 4 ranks; with rope and untied
embeddings; with experts split over ranks; with HSDP; with activations recomputed."""

import csv
import os
import subprocess

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import LAUNCH, make_config, read_run, run_launch
from launcher.preflight.check import with_vocab
from launcher.estimate.memory import num_parameters, padded_vocab

pytestmark = pytest.mark.distributed

QUIET = ["logging.wandb.mode=disabled"]
SHORT = ["train.steps=6", "train.warmup_steps=1"]  # for the 4-rank runs: 2 cores, 4 ranks


def trained(tmp_path_factory, *overrides):
    """(summary, steps) of a run that must succeed, and whose loss must fall."""
    proc, run_dir = run_launch(tmp_path_factory.mktemp("run"), *QUIET, *overrides)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary, steps = read_run(run_dir)
    assert summary["status"] == "ok"
    assert steps[-1]["loss"] < steps[0]["loss"], [s["loss"] for s in steps]
    return summary, steps, run_dir


def losses(run):
    return [s["loss"] for s in run[1]]


def estimated_parameters(*overrides) -> int:
    """What `runtime.dry_run=true` says the model has."""
    cfg = with_vocab(make_config(*overrides))
    return num_parameters(cfg.model, padded_vocab(cfg)).total


@pytest.fixture(scope="module")
def llama_two(tmp_path_factory):
    return trained(tmp_path_factory, "+recipe=llama3_8b_tiny_cpu")


def test_llama_twin_on_two_ranks_matches_one_rank(llama_two, tmp_path_factory):
    """rope (base 500000), untied embeddings, no biases, GQA, SwiGLU, RMSNorm: 2 ranks sharding
    the same global batch train the same model as 1 rank (bf16: reductions in another order)."""
    one = trained(tmp_path_factory, "+recipe=llama3_8b_tiny_cpu", "runtime.nproc_per_node=1")
    assert one[0]["num_parameters"] == estimated_parameters("+recipe=llama3_8b_tiny_cpu")
    assert llama_two[0]["world_size"] == 2
    assert llama_two[0]["metrics"]["first_group_prefetches"] == 10
    assert losses(llama_two) == pytest.approx(losses(one), rel=5e-3)
    config = llama_two[0]["config"]["model"]
    assert config["position_embedding"] == "rope" and config["untie_embeddings"] is True


@pytest.mark.parametrize("recompute", [["+recipe=llama3_70b_tiny_cpu"],
                                       ["+recipe=llama3_8b_tiny_cpu",
                                        "model.recompute.granularity=selective",
                                        "model.recompute.modules=[core_attn,mlp]"]],
                         ids=["full-uniform", "selective"])
def test_recomputation_changes_no_loss(llama_two, tmp_path_factory, recompute):
    """The 70B twin is the 8B twin with every layer recomputed (full, uniform, 1 layer a
    chunk): a second forward in the backward gives the same gradients, so the same losses."""
    again = trained(tmp_path_factory, *recompute)
    assert again[0]["config"]["model"]["recompute"]["granularity"] in ("full", "selective")
    assert losses(again) == pytest.approx(losses(llama_two), rel=1e-6)


@pytest.fixture(scope="module")
def moe_ep2(tmp_path_factory):
    return trained(tmp_path_factory, "+recipe=moe_small_tiny_cpu",
                   "logging.tensorboard.enabled=true")


def test_moe_twin_splits_its_experts_and_logs_their_routing(moe_ep2, tmp_path_factory):
    """EP 2 on 2 ranks against EP 1 on the same 2 ranks (same seed and batch). The experts a rank
    holds are drawn from megatron's expert-parallel RNG, seeded per expert-parallel rank
    (tensor_parallel/random.py), so the two start from other expert weights: the losses agree
    within 2%, not exactly."""
    ep1 = trained(tmp_path_factory, "+recipe=moe_small_tiny_cpu",
                  "parallel.expert_model_parallel_size=1")
    assert ep1[0]["num_parameters"] == estimated_parameters("+recipe=moe_small_tiny_cpu")
    assert moe_ep2[0]["config"]["parallel"]["expert_model_parallel_size"] == 2
    assert losses(moe_ep2) == pytest.approx(losses(ep1), rel=2e-2)
    # 8 sequences of 32 tokens, each token to 2 experts, in both MoE layers; every rank's counted
    for step in moe_ep2[1]:
        assert len(step["tokens_per_expert"]) == 4 and sum(step["tokens_per_expert"]) == 1024
        assert 0 < step["moe_aux_loss"] < 4  # megatron's load-balancing loss: 1 when balanced
    events = EventAccumulator(str(moe_ep2[2] / "tb" / "run"))
    events.Reload()
    logged = [e.value for e in events.Scalars("train/moe_aux_loss")]
    assert logged == pytest.approx([s["moe_aux_loss"] for s in moe_ep2[1]], rel=1e-6)


def test_moe_twin_trains_on_one_rank(tmp_path_factory):
    overrides = ["+recipe=moe_small_tiny_cpu", "runtime.nproc_per_node=1",
                 "parallel.expert_model_parallel_size=1"]
    summary, steps, _ = trained(tmp_path_factory, *overrides)
    assert summary["world_size"] == 1 and steps[-1]["loss"] < steps[0]["loss"]
    assert summary["num_parameters"] == estimated_parameters(*overrides)


@pytest.fixture(scope="module")
def deepseek_hsdp(tmp_path_factory):
    return trained(tmp_path_factory, "+recipe=deepseek_v3_proxy_tiny_cpu", *SHORT)


def test_hsdp_on_four_ranks_matches_plain_fsdp(deepseek_hsdp, tmp_path_factory):
    """The DeepSeek twin as its recipe: 4 ranks as 2 HSDP groups of 2, the optimizer sharded
    across them too, experts split over 2 ranks; against plain FSDP over the 4 ranks."""
    flat = trained(tmp_path_factory, "+recipe=deepseek_v3_proxy_tiny_cpu", *SHORT,
                   "fsdp.num_distributed_optimizer_instances=1",
                   "fsdp.outer_dp_sharding_strategy=no_shard")
    fsdp = deepseek_hsdp[0]["config"]["fsdp"]
    assert fsdp["num_distributed_optimizer_instances"] == 2
    assert fsdp["outer_dp_sharding_strategy"] == "optim"
    assert losses(deepseek_hsdp) == pytest.approx(losses(flat), rel=5e-3)


@pytest.mark.parametrize("ranks,extra", [(1, ["parallel.expert_model_parallel_size=1",
                                               "fsdp.num_distributed_optimizer_instances=1",
                                               "fsdp.outer_dp_sharding_strategy=no_shard"]),
                                         (2, ["parallel.expert_model_parallel_size=1"])],
                         ids=["1-rank", "2-ranks-hsdp-2x1"])
def test_deepseek_twin_trains_on_one_and_two_ranks(tmp_path_factory, ranks, extra):
    overrides = ["+recipe=deepseek_v3_proxy_tiny_cpu", f"runtime.nproc_per_node={ranks}", *extra]
    summary, _, _ = trained(tmp_path_factory, *overrides, *SHORT)
    assert summary["world_size"] == ranks
    assert summary["num_parameters"] == estimated_parameters(*overrides)


def test_a_sweep_of_the_moe_twin_refuses_its_graph_cells_and_measures_the_eager_ones(tmp_path):
    """The switch against CUDA graphs on the MoE twin: a full-iteration graph cannot capture the
    local spec's experts, so both graph cells are refused with their reasons before any run;
    both eager cells run."""
    sweep_dir = tmp_path / "sweep"
    proc = subprocess.run(
        [LAUNCH, "-m", "+recipe=moe_small_tiny_cpu", "fsdp.prefetch_first_param_group=true,false",
         "cuda_graph.impl=none,full_iteration", "sweep.repeats=1", "train.steps=4",
         "train.warmup_steps=1", "cuda_graph.warmup_steps=1", *QUIET,
         f"hydra.sweep.dir={sweep_dir}"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
        env=dict(os.environ, WANDB_SILENT="true", HOME=str(tmp_path / "home")))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    with open(sweep_dir / "results.csv") as f:
        rows = {(r["fsdp.prefetch_first_param_group"], r["cuda_graph.impl"]): r
                for r in csv.DictReader(f)}
    for prefetch in ("true", "false"):
        assert rows[(prefetch, "none")]["status"] == "ok"
        assert float(rows[(prefetch, "none")]["tokens_per_s_per_gpu"]) > 0
        assert rows[(prefetch, "full_iteration")]["status"] == "invalid"
    assert "cannot capture a mixture of experts on the local layer spec" in \
        rows[("false", "full_iteration")]["reason"]
    assert "set fsdp.prefetch_first_param_group=false" in rows[("true", "full_iteration")]["reason"]
