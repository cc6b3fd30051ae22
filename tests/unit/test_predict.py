"""The dry run's time model (launcher/estimate/predict.py) against values computed by hand for one
small model, the hardware files, and the cluster keys' refusals."""

import dataclasses

import pytest

from launcher.cli import compose
from launcher.config import ConfigError, Hardware, load_hardware
from launcher.config.cluster import hardware_names
from launcher.estimate.param_groups import parameter_groups
from launcher.estimate.predict import predict, simulate, units_of
from launcher.estimate.topology import Cluster

# The gpt recipe on the tiny GPT (2 layers, hidden 64, 4 heads, sequence 32, vocabulary 128,
# GELU MLP of 256, LayerNorm, learned positions, tied embeddings), bf16, 2 ranks, global batch 8
# of microbatches of 2: 2 microbatches a rank.
TINY = ["+recipe=gpt", "model=tiny", "train.global_batch_size=8", "train.micro_batch_size=2"]
# Round figures: 1 TFLOP/s, 1 GB/s inside a node of 8, 0.5 GB/s across, 10 us a collective, no
# host time, the host ahead of the device (a GPU's).
ROUND = Hardware(name="round", memory_gib=1, tflops={"bf16": 1.0}, matmul_fraction=1.0,
                 hbm_gbps=1.0, intra_node_gbps=1.0, inter_node_gbps=0.5, latency_us=10.0,
                 nvlink_domain=8, gpus_per_node=8, layer_host_us=0.0, moe_layer_host_us=None,
                 step_host_us=0.0,
                 async_host=True)
US = 1e-6


@pytest.fixture(scope="module")
def tiny():
    return compose(TINY)


def test_the_groups_are_the_embeddings_then_one_per_layer(tiny):
    groups = parameter_groups(tiny, 2)
    # word 128 x 64 + positions 32 x 64 + the final LayerNorm's weight and bias: under the
    # 4e7 elements of Megatron-LM's default bucket, one bucket
    assert groups[0].name == "embeddings + position embeddings + final norm"
    assert groups[0].params == 128 * 64 + 32 * 64 + 2 * 64 == 10_368
    # QKV 64 x 192 + 192, projection 64 x 64 + 64, MLP 64 x 256 + 256 and 256 x 64 + 64, two
    # LayerNorms of 128: 12 h^2 + 13 h
    assert [g.params for g in groups[1:]] == [12 * 64**2 + 13 * 64] * 2 == [49_984] * 2


def test_each_units_collectives_and_compute_by_hand(tiny):
    units = units_of(tiny, Cluster(ROUND, 2, 1), "bf16")
    # all-gather over 2 ranks in bf16: 10 us + 1/2 x params x 2 bytes / 1 GB/s
    assert units[0].allgather_s == pytest.approx((10 + 10_368 * 1e-3) * US)
    assert units[1].allgather_s == pytest.approx((10 + 49_984 * 1e-3) * US)
    # the reduce-scatter in the main gradients' dtype, bf16 (fsdp.main_grads_dtype=auto)
    assert units[1].reduce_s == units[1].allgather_s
    # a layer's model FLOPs per token: 6 x (h F ffn + h (q+k+v) + q s + q h) with F = 2,
    # = 6 x (32768 + 12288 + 2048 + 4096) = 307,200; 64 tokens a microbatch; forward a third
    assert units[1].forward_s == pytest.approx(307_200 * 64 / 3 * 1e-12)
    assert units[1].backward_s == pytest.approx(2 * units[1].forward_s)
    # the logits: 6 x h x V per token
    assert units[0].forward_s == pytest.approx(6 * 64 * 128 * 64 / 3 * 1e-12)


def test_a_step_with_the_switch_off_by_hand(tiny):
    cluster = Cluster(ROUND, 2, 1)
    off = simulate(tiny, units_of(tiny, cluster, "bf16"), cluster, prefetch=False)
    # In us: the first group alone, 20.368, waited; then layers 1 and 2 (59.984 each) back to
    # back on the channel while the forward waits for each; logits; the backward regathers
    # 2 then 1 and reduce-scatters 2, 1, then the first group; microbatch 2 likewise, the first
    # group still gathered. Done when the last reduce-scatter is, at 800.310656; then Adam
    # over the 55,168-parameter shard at 28 bytes each and 1 GB/s: 1544.704.
    assert off.first_wait_s == pytest.approx(20.368 * US)
    assert off.optimizer_s == pytest.approx(1544.704 * US)
    assert off.step_s == pytest.approx((800.310656 + 1544.704) * US)
    assert off.tail_s == 0


def test_a_step_with_the_switch_on_by_hand(tiny):
    cluster = Cluster(ROUND, 2, 1)
    on = simulate(tiny, units_of(tiny, cluster, "bf16"), cluster, prefetch=True)
    # The prefetch window (at least 5e8 elements) holds every unit: start_param_sync gathered
    # all three, 140.336 us, and the step's sync point waited for them (a GPU); the forward of
    # microbatch 1 waits for nothing, and the last reduce-scatter ends at 666.528256.
    assert on.first_wait_s == 0
    assert on.tail_s == pytest.approx(140.336 * US)
    assert on.step_s == pytest.approx((666.528256 + 1544.704 + 140.336) * US)


def test_the_prediction_derives_throughput_and_the_switch(tiny):
    cluster = Cluster(ROUND, 2, 1)
    p = predict(tiny, cluster)
    step = (666.528256 + 1544.704 + 140.336) * US
    assert p.tokens_per_s_per_gpu == pytest.approx(8 * 32 / step / 2)
    assert p.mfu == pytest.approx(p.tflops_per_gpu / 1.0)
    # off minus on: on pays the whole window at the sync point, off only the first group
    # and the first layer's wait: 2345.014656 - 2351.568256
    assert p.saving_s == pytest.approx(-6.5536 * US)
    assert "sync point" in p.why


def test_a_collective_beyond_the_nvlink_domain_takes_the_nics_bandwidth():
    within, across = Cluster(ROUND, 8, 1), Cluster(ROUND, 8, 2)
    assert within.collective_s(1e6, 8) == pytest.approx(10 * US + 7 / 8 * 1e-3)
    assert across.collective_s(1e6, 16) == pytest.approx(10 * US + 15 / 16 * 2e-3)
    assert within.collective_s(1e6, 1) == 0


def test_ranks_beyond_a_cpus_cores_share_them():
    cpu = dataclasses.replace(ROUND, cores=2, async_host=False)
    assert Cluster(cpu, 1, 1).host_share == 1
    assert Cluster(cpu, 4, 1).host_share == 2
    assert Cluster(ROUND, 8, 1).host_share == 1  # a GPU's ranks have their own devices


def test_a_full_recomputation_repeats_the_forward_in_the_backward():
    cfg = compose(TINY + ["model.recompute.granularity=full", "model.recompute.method=uniform",
                          "model.recompute.num_layers=1"])
    layer = units_of(cfg, Cluster(ROUND, 2, 1), "bf16")[1]
    assert layer.backward_s == pytest.approx(3 * layer.forward_s)


# A file's figures that are no measurement: its name, what kind of machine it is, and the
# CPU's measured table (bench/calibrate.py's, named in the file's heading)
UNSOURCED = {"name", "async_host", "gpus_per_node", "cores", "by_ranks", "sources"}


def test_every_hardware_file_loads_with_a_source_for_each_figure():
    assert {"h100_sxm", "h200_sxm", "b200", "gb200", "gb300", "cpu_2core"} <= set(
        hardware_names())
    for name in hardware_names():
        hw = load_hardware(name)
        assert {"bf16"} <= set(hw.tflops), name
        if not hw.async_host:  # a CPU: measured by bench/calibrate.py, the file says so
            assert {"tflops", "hbm_gbps", "matmul_fraction"} <= set(hw.sources), name
            continue
        given = {f.name for f in dataclasses.fields(hw) if getattr(hw, f.name) is not None}
        missing = given - UNSOURCED - set(hw.sources)
        assert not missing, (name, missing)
        for figure, source in hw.sources.items():  # a page to open, or an estimate said so
            assert "https://" in source or "an estimate" in source, (name, figure)
    assert load_hardware("h100_sxm").tflops["bf16"] == 989  # dense, not the sparse 1,979


@pytest.mark.parametrize("overrides, message", [
    (["cluster.gpu=h1000"], r"cluster.gpu=h1000 has no hardware file; pick one of b200, "
                            r"cpu_2core, gb200, gb300, h100_sxm, h200_sxm"),
    (["cluster.gpu=h100_sxm", "cluster.nodes=8", "runtime.nnodes=4",
      "runtime.rdzv_endpoint=n:1"], r"cluster.nodes=8 and runtime.nnodes=4 name two worlds"),
    (["cluster.nodes=0"], r"cluster.nodes=0 must be a positive integer or null"),
])
def test_the_cluster_keys_refuse_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        compose(TINY + overrides)


def test_the_cluster_takes_the_runtime_sections_world_where_it_names_none():
    from launcher.estimate.predict import cluster_of

    cfg = compose(TINY + ["cluster.gpu=h100_sxm", "runtime.nproc_per_node=4"])
    assert (cluster_of(cfg).gpus_per_node, cluster_of(cfg).nodes) == (4, 1)
    cfg = compose(TINY + ["cluster.gpu=h100_sxm", "cluster.nodes=8",
                          "train.global_batch_size=128"])
    assert cluster_of(cfg).world == 64  # the hardware's 8 a node


@pytest.mark.parametrize("overrides", [TINY, ["+recipe=llama3_8b"], ["+recipe=moe_small"],
                                       ["+recipe=deepseek_v3_proxy"]])
def test_the_layers_and_logits_add_up_to_megatron_lms_flops(overrides):
    from launcher.estimate.memory import padded_vocab
    from launcher.estimate.flops import flops_per_step
    from launcher.estimate.predict import layer_flops, logits_flops

    cfg = compose(overrides)
    m, microbatches = cfg.model, cfg.train.global_batch_size // cfg.train.micro_batch_size
    layers = sum(layer_flops(cfg, moe) for moe in m.moe.pattern(m.num_layers))
    assert (layers + logits_flops(cfg)) * microbatches == pytest.approx(
        flops_per_step(m, cfg.train.global_batch_size, padded_vocab(cfg)))


@pytest.mark.parametrize("dp, size", [(8, 4e7), (64, 6.4e7)])
def test_the_first_group_of_llama3_is_the_embeddings_alone(dp, size):
    """Megatron-LM's get_model buckets the parameters outside the layers by max(4e7, 1e6 x dp)
    elements: Llama-3's 128,256 x 4,096 embeddings fill the first bucket alone, and the final
    norm and the untied output layer make the second."""
    from launcher.estimate.param_groups import bucket_size

    cfg = compose(["+recipe=llama3_8b"])
    assert bucket_size(cfg, dp, 8_000_000_000) == size
    groups = parameter_groups(cfg, dp)
    assert [(g.name, g.params) for g in groups[:3]] == [
        ("embeddings", 128_256 * 4096), ("final norm + output layer", 4096 + 128_256 * 4096),
        ("layer 0", groups[2].params)]
    assert [g.unit for g in groups[2:]] == list(range(32))


def test_the_bucket_keys_split_the_first_group_as_megatron_lms_flags():
    """fsdp.bucket_size (--ddp-bucket-size) as given; fsdp.num_buckets (--ddp-num-buckets) the
    parameters divided; no bucket at all without overlapped gradient reduction."""
    from launcher.estimate.param_groups import bucket_size

    small = compose(TINY + ["fsdp.bucket_size=9000"])
    assert [g.params for g in parameter_groups(small, 2)[:2]] == [128 * 64 + 32 * 64, 2 * 64]
    assert bucket_size(compose(TINY + ["fsdp.num_buckets=4"]), 2, 1000) == 250
    no_overlap = compose(TINY + ["fsdp.sharding_strategy=optim", "fsdp.overlap_grad_reduce=false",
                                 "fsdp.prefetch_first_param_group=false"])
    assert bucket_size(no_overlap, 2, 1000) is None
    assert len(parameter_groups(no_overlap, 2)) == 1  # no units, no buckets: the whole model


def test_bucket_size_and_num_buckets_together_are_refused():
    with pytest.raises(ConfigError, match=r"fsdp.bucket_size=100 and fsdp.num_buckets=2 both"):
        compose(TINY + ["fsdp.bucket_size=100", "fsdp.num_buckets=2"])


@pytest.fixture(scope="module")
def llama_units():
    """Llama 3 8B on one node of 8 H100s with megatron-core's default communication unit (the
    recipe sets 8e8 elements): the embeddings, the final norm with the output layer, then 32
    layers of 218,112,000 elements."""
    from launcher.estimate.predict import cluster_of

    cfg = compose(["+recipe=llama3_8b", "cluster.gpu=h100_sxm", "runtime.nproc_per_node=8",
                   "fsdp.suggested_communication_unit_size=null"])
    return cfg, units_of(cfg, cluster_of(cfg), "bf16")


@pytest.mark.parametrize("version, layers", [
    ("0.19.2", 5e8 / 218_112_000),  # the floor: a unit of 1e9, a window of about 2.3 layers
    ("0.20.0", 1),  # the cap: a unit of twice the mean layer, a window of one layer
    ("0.20.0rc1+1a2b3c4", 1),  # a build of Megatron-LM's main
])
def test_megatron_cores_version_decides_the_prefetch_window(llama_units, version, layers):
    from launcher.estimate.predict import prefetch_elements

    cfg, units = llama_units
    assert prefetch_elements(cfg, units, version) / units[2].params == pytest.approx(layers)


def test_the_installed_megatron_core_decides_and_0_19_2_bounds_the_unit_from_below(llama_units):
    """The dry run reads the megatron-core that pyproject.toml pins, 0.19.2, and takes its floor:
    half of 1e9 elements."""
    import tomllib
    from pathlib import Path

    from launcher.estimate.communication_unit import caps_unit, megatron_core_version
    from launcher.estimate.predict import prefetch_elements

    pins = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert f"megatron-core=={megatron_core_version()}" in pins["project"]["dependencies"]
    assert megatron_core_version() == "0.19.2" and not caps_unit(megatron_core_version())
    cfg, units = llama_units
    assert prefetch_elements(cfg, units) == 500_000_000


def test_a_set_communication_unit_is_used_as_it_is_by_every_version():
    from launcher.estimate.predict import prefetch_elements

    cfg = compose(TINY + ["fsdp.suggested_communication_unit_size=100001"])
    units = units_of(cfg, Cluster(ROUND, 2, 1), "bf16")
    assert {prefetch_elements(cfg, units, v) for v in ("0.19.2", "0.20.0")} == {50_000}


def test_a_hook_prefetches_as_megatron_fsdps_all_gather_params():
    """The budget counts only the buckets a hook adds beyond its own, so it adds at least one;
    the double buffer holds two layers at most and prefetches nothing from a bucket outside
    them (param_and_grad_buffer.py all_gather_params, megatron-core 0.19.2)."""
    from launcher.estimate.predict import Unit, window

    def unit(params, resident=False):
        return Unit("u", params, 0.0, 0.0, 0.0, 0.0, resident)

    units = [unit(10, True), unit(100), unit(100), unit(100), unit(100)]
    assert window(units, 1, 1, 50) == [1, 2]  # a budget under one layer still adds one
    assert window(units, 1, 1, 150) == [1, 2, 3]  # 100 added < 150: one more
    assert window(units, 4, -1, 150) == [4, 3, 2]  # backward, the same budget
    assert window(units, 3, -1, 1e9) == [3, 2, 1]  # never the bucket outside the layers
    assert window(units, 1, 1, 1e9, double_buffer=True) == [1, 2]  # two layers at most
    assert window(units, 0, 1, 1e9) == [0, 1, 2, 3, 4]
    assert window(units, 0, 1, 1e9, double_buffer=True) == [0]  # no prefetch from outside
