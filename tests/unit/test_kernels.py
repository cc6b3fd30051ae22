"""The GPU's kernel classes in the dry run's time model (launcher/estimate/kernels.py, predict.py):
each class by hand on round figures, the band from the rates' low to high ends, the topology of
the cluster's keys, and what the dry run and a sweep's plan print from it."""

import dataclasses
import math

import pytest

from launcher.cli import compose
from launcher.config import Hardware
from launcher.estimate.kernels import (
    Gemm, attention_share, gemm_s, kernels_per_layer, layer_gemms, memory_bound_bytes,
    wave_efficiency,
)
from launcher.estimate.predict import predict, predict_band
from launcher.estimate.topology import Cluster
from launcher.estimate.prediction_text import describe_prediction, short
from launcher.sweep.console import predicted_order
from launcher.sweep.plan import Cell

# Round figures with every kernel class: 100 TFLOP/s bf16 and 200 fp8 at half of it in a large
# GEMM, 10 SMs, 1,000 GB/s of HBM at 0.5 to 1, attention at 0.25 (short) to 0.5 (long), NVLink's
# 100 GB/s at 0.5 to 1, each NIC's 10 at 0.25 to 0.75
GPU = Hardware(
    name="round GPU", memory_gib=80, tflops={"bf16": 100.0, "fp8": 200.0}, hbm_gbps=1000.0,
    intra_node_gbps=100.0, inter_node_gbps=10.0, latency_us=0.0, nvlink_domain=8,
    gpus_per_node=8, step_host_us=0.0, async_host=True, sms=10,
    gemm_fraction={"bf16": [0.5, 0.5], "fp8": [0.25, 0.75]},
    attention_fraction={1024: [0.25, 0.25], 4096: [0.5, 0.5]}, hbm_fraction=(0.5, 1.0),
    bus_fraction=(0.5, 1.0), nic_fraction=(0.25, 0.75), launch_us=(10.0, 20.0),
    host_link_gbps=(10.0, 30.0), published_mfu={"bf16": 0.5})
TINY = ["+recipe=gpt", "model=tiny", "train.global_batch_size=8", "train.micro_batch_size=2"]


def test_a_gemm_s_tiles_run_in_waves_of_the_sms():
    # tiles of 128 x 256: 10 of them fill the 10 SMs once; 11 leave 9 idle in a second wave
    assert wave_efficiency(Gemm(128 * 10, 256, 4096), 10) == 1
    assert wave_efficiency(Gemm(128 * 11, 256, 4096), 10) == pytest.approx(11 / 20)
    assert wave_efficiency(Gemm(128, 256, 64, count=5), 10) == pytest.approx(5 / 10)


def test_a_gemm_at_its_rate_or_its_bytes_whichever_is_longer():
    big = Gemm(128 * 10, 256 * 10, 8192)  # 10 waves exactly
    assert gemm_s(big, GPU, "bf16", 0.5) == pytest.approx(big.flops / (100e12 * 0.5))
    # fp8's band: a quarter of the peak at the low end, three quarters at the high end
    assert gemm_s(big, GPU, "fp8", 0.0) == pytest.approx(big.flops / (200e12 * 0.25))
    assert gemm_s(big, GPU, "fp8", 1.0) == pytest.approx(big.flops / (200e12 * 0.75))
    thin = Gemm(128 * 10, 256, 1)  # K = 1: its operands' bytes take longer than its FLOPs
    moved = (1280 * 1 + 1 * 256 + 1280 * 256) * 2
    assert gemm_s(thin, GPU, "bf16", 0.0) == pytest.approx(moved / (1000e9 * 0.5))


def test_attention_is_interpolated_in_the_log_of_the_sequence():
    assert attention_share(GPU, 512, 0.5) == 0.25  # held below the shortest length
    assert attention_share(GPU, 2048, 0.5) == pytest.approx(0.375)  # halfway in log2
    assert attention_share(GPU, 65536, 0.5) == 0.5


def test_a_layers_gemms_and_bytes_by_hand():
    cfg = compose(TINY)  # hidden 64, 4 heads of 16, GELU MLP of 256, sequence 32
    tokens = 64
    assert layer_gemms(cfg, 0, tokens) == [Gemm(64, 192, 64), Gemm(64, 64, 64),
                                          Gemm(64, 256, 64), Gemm(64, 64, 256)]
    # norms 2 x 2h, residual adds 2 x 3h, GELU 2 ffn; no rope, no dropout in the tiny model
    elements = 4 * 64 + 6 * 64 + 2 * 256
    assert memory_bound_bytes(cfg, 0, tokens, False) == elements * 2 * tokens
    # a dropout after attention and after the MLP: 2 x 2.5 h (in, out and its mask)
    dropped = compose(TINY + ["model.hidden_dropout=0.1"])
    assert memory_bound_bytes(dropped, 0, tokens, False) == (elements + 5 * 64) * 2 * tokens
    # FP8 casts each GEMM input: h, q, h, ffn elements read in bf16 and written in fp8
    assert memory_bound_bytes(cfg, 0, tokens, True) - memory_bound_bytes(cfg, 0, tokens, False) \
        == (64 + 64 + 64 + 256) * 3 * tokens
    assert kernels_per_layer(0, False) == (11, 22) and kernels_per_layer(1, True) == (21, 42)


def test_the_band_runs_from_every_rate_low_to_every_rate_high():
    cfg = compose(TINY)
    cluster = Cluster(GPU, 2, 1)
    slow, fast = predict_band(cfg, cluster)
    middle = predict(cfg, cluster)
    assert slow.timeline.step_s > middle.timeline.step_s > fast.timeline.step_s
    assert slow.tokens_per_s_per_gpu < middle.tokens_per_s_per_gpu < fast.tokens_per_s_per_gpu


def test_a_node_of_fewer_gpus_than_its_nvlink_leaves_by_the_nics():
    """2 nodes of 4 DGX GPUs: the 8 ranks span two NVLink domains; 16 nodes of 4 in one NVL72
    rack stay in its domain."""
    dgx = Cluster(GPU, 4, 2)
    assert dgx.nvlink_ranks == 4
    # across: the 4 ranks' NICs together (4 x 10 GB/s), at the NIC fraction's middle (0.5)
    assert dgx.collective_s(8e9, 8) == pytest.approx(7 / 8 * 8e9 / (40e9 * 0.5))
    # inside a node: NVLink at the bus fraction's middle (0.75)
    assert dgx.collective_s(8e9, 4) == pytest.approx(3 / 4 * 8e9 / (100e9 * 0.75))
    rack = dataclasses.replace(GPU, nvlink_domain=72, gpus_per_node=4)
    assert Cluster(rack, 4, 16).nvlink_ranks == 72
    assert Cluster(rack, 4, 16).collective_s(8e9, 64) == pytest.approx(
        63 / 64 * 8e9 / (100e9 * 0.75))
    # 32 NICs' 320 GB/s x 0.5 above NVLink's 100 x 0.75: NVLink bounds the ring
    fast = dataclasses.replace(GPU, inter_node_gbps=40.0)
    assert Cluster(fast, 8, 4).collective_s(8e9, 32) == pytest.approx(31 / 32 * 8e9 / 75e9)


def test_a_cuda_graph_removes_the_launches():
    """The tiny model's kernels are far shorter than their launches: eager, the host sets the
    layer's time; a full-iteration graph replays the kernels alone."""
    eager = predict(compose(TINY + ["fsdp.prefetch_first_param_group=false"]), Cluster(GPU, 2, 1))
    graph = predict(compose(TINY + ["fsdp.prefetch_first_param_group=false",
                                    "cuda_graph.impl=full_iteration"]), Cluster(GPU, 2, 1))
    layer = eager.units[1]
    assert layer.forward_s == pytest.approx(11 * 15e-6)  # 11 launches at the band's middle
    assert graph.units[1].forward_s < layer.forward_s / 10


def test_the_dry_run_prints_the_band_and_says_when_it_is_above_every_published_run():
    cfg = compose(["+recipe=llama3_8b", "cluster.gpu=h100_sxm", "runtime.nproc_per_node=8"])
    lines = describe_prediction(cfg)
    said = [line for line in lines if "tokens/s/GPU" in line][0]
    assert " (" in said.split("tokens/s/GPU")[0]  # 12,345 (11,000-13,000) tokens/s/GPU
    hw = cfg.cluster.hardware()
    p = predict(cfg, Cluster(hw, 8, 1))
    above = [line for line in lines if "above every published figure" in line]
    assert bool(above) == (p.mfu > hw.published_mfu["bf16"])


def test_a_sweep_plan_does_not_rank_cells_within_the_band():
    def cell(ident, steps):
        return Cell(ident, ident, {}, [], True, predicted_steps=steps)

    lines = predicted_order([cell("a", [11.0, 10.0, 9.0]), cell("b", [11.5, 10.5, 9.5]),
                             cell("c", [30.0, 25.0, 20.0])])
    assert lines == ["[sweep] predicted fastest: a (a), 10 s/step; indistinguishable from it "
                     "within the prediction's band: b (b); slower beyond the band: c (c)"]
    assert predicted_order([cell("a", [11.0, 10.0, 9.0])]) == []


def test_a_sweep_cells_predicted_column_holds_its_band():
    cfg = compose(["+recipe=llama3_8b", "cluster.gpu=h100_sxm", "runtime.nproc_per_node=8"])
    text, steps = short(cfg)
    assert steps[0] > steps[1] > steps[2] and f"{steps[1]:.3g} s/step (" in text
    assert math.isfinite(sum(steps))


def test_an_offloaded_layer_takes_the_longer_of_its_compute_and_its_copy_each_way():
    """model.cpu_offloading_num_layers: the first layers' activations (the memory estimate's)
    cross the host link each way, beside the next layer's compute; the others are as before,
    and the memory estimate keeps one offloaded layer's activations, not all of them."""
    from launcher.estimate.memory import layer_activation_bytes, memory_spec
    from launcher.estimate.predict import units_of

    slow_link = dataclasses.replace(GPU, launch_us=(0.0, 0.0), host_link_gbps=(1e-3, 3e-3))
    cluster = Cluster(slow_link, 2, 1, end=0.5)
    layers = TINY + ["model.num_layers=3"]
    plain, offloaded = compose(layers), compose(layers + ["model.cpu_offloading_num_layers=2"])
    before = {u.name: u for u in units_of(plain, cluster, "bf16")}
    after = {u.name: u for u in units_of(offloaded, cluster, "bf16")}
    copy = layer_activation_bytes(offloaded, memory_spec(offloaded)) / 2e6  # 2 GB/s x 1e-3
    for name in ("layer 0", "layer 1"):
        assert after[name].forward_s == pytest.approx(max(before[name].forward_s, copy))
        assert after[name].backward_s == pytest.approx(max(before[name].backward_s, copy))
        assert after[name].forward_s > before[name].forward_s  # the copy is the longer here
    assert after["layer 2"] == before["layer 2"]
    p_plain, p_offloaded = predict(plain, cluster), predict(offloaded, cluster)
    assert p_offloaded.tokens_per_s_per_gpu < p_plain.tokens_per_s_per_gpu
    assert p_offloaded.memory_gib < p_plain.memory_gib
