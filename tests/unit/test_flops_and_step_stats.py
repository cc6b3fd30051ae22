"""Unit tests for launcher.estimate.flops and launcher.run.step_stats. Expected values are worked out by hand in the comments."""

import math

import pytest

from launcher.config import Activation, ModelConfig
from launcher.estimate.flops import PEAK_FLOPS, flops_per_step, mfu, peak_flops, tflops_per_gpu, \
    tokens_per_s_per_gpu
from launcher.run import step_stats
from launcher.run.step_stats import percentile, step_time_stats

# Tiny config: B=2, s=4, h=8, L=1, ffn=32, heads=2, groups=2, kv=4, V=16.
TINY = dict(seq_length=4, hidden_size=8, num_layers=1, ffn_hidden_size=32, num_attention_heads=2,
            num_query_groups=2, kv_channels=4)


def flops(swiglu=False, batch=2, vocab=16, **sizes):
    """flops_per_step of the model section TINY describes, with `sizes` changed."""
    activation = Activation.swiglu if swiglu else Activation.gelu
    return flops_per_step(ModelConfig(**dict(TINY, **sizes), activation=activation), batch, vocab)


# ---------------------------------------------------------------- flops_per_step


def test_flops_tiny_no_swiglu():
    # q = kv*heads = 4*2 = 8; k = v = kv*groups = 4*2 = 8; F = 2
    # MLP:    3*2*h*ffn*F*L = 6*8*32*2*1 = 3072
    # attn:   L*6*(h*(q+k+v) + q*s/2*2 + q*h) = 6*(8*24 + 8*4/2*2 + 8*8)
    #       = 6*(192 + 32 + 64) = 6*288 = 1728
    # logits: 6*h*V = 6*8*16 = 768
    # per token: 3072 + 1728 + 768 = 5568; B*s = 8 -> 8*5568 = 44544
    assert flops() == 44544.0


def test_flops_tiny_swiglu():
    # F = 3: MLP = 6*8*32*3 = 4608; attn 1728 and logits 768 unchanged
    # per token: 4608 + 1728 + 768 = 7104; *8 = 56832
    assert flops(swiglu=True) == 56832.0


def test_flops_swiglu_adds_exactly_half_the_mlp():
    # SwiGLU: F goes 2 -> 3, so only the MLP term grows, by 6*h*ffn*L*B*s = 6*8*32*1*8 = 12288
    # 56832 - 44544 = 12288
    diff = flops(swiglu=True) - flops()
    assert diff == 12288.0


def test_flops_gqa():
    # groups=1 < heads=2: q = 8, k = v = 4*1 = 4
    # attn: 6*(8*(8+4+4) + 8*4/2*2 + 8*8) = 6*(128 + 32 + 64) = 6*224 = 1344
    # no swiglu: (3072 + 1344 + 768) * 8 = 5184*8 = 41472
    # swiglu:    (4608 + 1344 + 768) * 8 = 6720*8 = 53760
    assert flops(num_query_groups=1) == 41472.0
    assert flops(swiglu=True, num_query_groups=1) == 53760.0


def test_flops_kv_channels_not_hidden_over_heads():
    # kv=8 with heads=2 (q = 16 != h = 8), groups=2: k = v = 16
    # attn: 6*(8*(16+16+16) + 16*4/2*2 + 16*8) = 6*(384 + 64 + 128) = 6*576 = 3456
    # no swiglu: (3072 + 3456 + 768) * 8 = 7296*8 = 58368
    assert flops(kv_channels=8) == 58368.0


def test_flops_layers_scale_mlp_and_attention_not_logits():
    # L=2: MLP 2*3072 = 6144, attn 2*1728 = 3456, logits 768 once
    # per token 6144 + 3456 + 768 = 10368; *8 = 82944
    assert flops(num_layers=2) == 82944.0


def test_flops_causal_attention_is_halved():
    # s=8 instead of 4 (B*s = 16). Only the core-attention term depends on s inside the bracket:
    # q*s/2*2 = 8*8 = 64 (a non-causal count would be 2*q*s = 128)
    # attn: 6*(192 + 64 + 64) = 6*320 = 1920
    # per token 3072 + 1920 + 768 = 5760; *16 = 92160
    assert flops(seq_length=8) == 92160.0


def test_flops_matches_megatron_12x_form_on_llama_like_config():
    # Megatron's older closed form, rewritten with the causal halving:
    # 12*B*s*L*h^2 * ( (q/h)*(1 + g/n + s/(2h)) + (ffn/h)*(F/2) + V/(2*L*h) )
    # which is the same polynomial as the implementation, written differently.
    B, s, h, L, ffn, n, g, kv, V = 512, 4096, 4096, 32, 11008, 32, 8, 128, 32000
    q = kv * n
    F = 3
    expected = (
        12 * B * s * L * h * h
        * ((q / h) * (1 + g / n + s / (2 * h)) + (ffn / h) * (F / 2) + V / (2 * L * h))
    )
    got = flops(True, B, V, seq_length=s, hidden_size=h, num_layers=L, ffn_hidden_size=ffn,
                num_attention_heads=n, num_query_groups=g, kv_channels=kv)
    assert got == pytest.approx(expected, rel=1e-12)
    # Independent check, "6*N*T + attention": N = matmul parameters, T = B*s tokens per step.
    # N = L*(h*(q+2k) + q*h + F*h*ffn) + h*V, with q = 4096, k = kv*g = 1024
    #   = 32*(4096*6144 + 4096*4096 + 3*4096*11008) + 4096*32000
    #   = 32*(25165824 + 16777216 + 135266304) + 131072000
    #   = 32*177209344 + 131072000 = 5670699008 + 131072000 = 5801771008
    # T = 512*4096 = 2097152
    # causal attention: 6*L*q*s per token (q*s/2*2 = q*s multiply-adds, times 3*2)
    # total = 6*T*(N + L*q*s) = 6*2097152*(5801771008 + 32*4096*4096)
    #       = 6*2097152*(5801771008 + 536870912) = 6*2097152*6338641920
    #       = 79758573478871040 (~7.98e16)
    assert got == 79758573478871040.0


def test_flops_returns_float():
    assert isinstance(flops(), float)


# ---------------------------------------------------------------- throughput


def test_tokens_per_s_per_gpu():
    # 8192 tokens / (2 s * 4 GPUs) = 1024
    assert tokens_per_s_per_gpu(8192, 2.0, 4) == 1024.0


def test_tflops_per_gpu():
    # 8e15 FLOPs / (2 s * 1e12 * 4) = 1000 TFLOP/s
    assert tflops_per_gpu(8e15, 2.0, 4) == pytest.approx(1000.0)
    # tiny config: 44544 / (0.001 * 1e12 * 2) = 2.2272e-5
    assert tflops_per_gpu(flops(), 0.001, 2) == pytest.approx(2.2272e-5)


@pytest.mark.parametrize("fn", [tokens_per_s_per_gpu, tflops_per_gpu])
def test_throughput_rejects_bad_time_or_world(fn):
    with pytest.raises(ValueError):
        fn(100, 0.0, 1)
    with pytest.raises(ValueError):
        fn(100, 1.0, 0)


# ---------------------------------------------------------------- peak table


def test_peak_h100_sxm():
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989.5e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "fp16") == 989.5e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "fp8") == 1979e12


def test_peak_h200():
    assert peak_flops("NVIDIA H200", "bf16") == 989.5e12
    assert peak_flops("NVIDIA H200", "fp8") == 1979e12


def test_peak_h100_pcie_does_not_get_sxm_peak():
    got = peak_flops("NVIDIA H100 PCIe", "bf16")
    assert got != 989.5e12
    assert got == 756e12


def test_peak_variants_without_entry_are_none():
    # NVL parts have their own peaks, not in the table: no fallback to the SXM numbers.
    assert peak_flops("NVIDIA H100 NVL", "bf16") is None
    assert peak_flops("NVIDIA H200 NVL", "bf16") is None
    # Whole-token match: "B200" must not match GB200, "H200" must not match GH200.
    assert peak_flops("NVIDIA GB200", "bf16") is None
    assert peak_flops("NVIDIA GH200 480GB", "bf16") is None


def test_peak_a100_and_b200():
    assert peak_flops("NVIDIA A100-SXM4-80GB", "bf16") == 312e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "fp16") == 312e12
    assert peak_flops("NVIDIA A100-PCIE-40GB", "bf16") == 312e12
    assert peak_flops("NVIDIA A100 80GB PCIe", "bf16") == 312e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "fp8") is None  # A100 has no fp8
    assert peak_flops("NVIDIA B200", "bf16") == 2.25e15


def test_peak_unknown_gpu_is_none():
    assert peak_flops("NVIDIA GeForce RTX 4090", "bf16") is None
    assert peak_flops("Tesla V100-SXM2-16GB", "fp16") is None


def test_peak_cpu_is_none():
    assert peak_flops(None, "bf16") is None
    assert peak_flops("cpu", "bf16") is None
    assert peak_flops("", "bf16") is None


def test_peak_unknown_precision_is_none():
    assert peak_flops("NVIDIA H100 80GB HBM3", "fp4") is None
    assert peak_flops("NVIDIA H100 80GB HBM3", "int8") is None
    assert peak_flops("NVIDIA H100 80GB HBM3", "fp32") is None


def test_peak_precision_case_and_aliases():
    assert peak_flops("NVIDIA H100 80GB HBM3", "BF16") == 989.5e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "bfloat16") == 989.5e12


def test_peak_table_entries_are_positive_and_keyed_by_name_and_precision():
    assert PEAK_FLOPS[("H200", "bf16")] == 989.5e12
    for (name, prec), value in PEAK_FLOPS.items():
        assert isinstance(name, str) and prec in {"bf16", "fp16", "fp8"}
        assert value is None and name in NOT_KNOWN or value > 0


NOT_KNOWN = ("H100 NVL", "H200 NVL", "GH200")

# Every H100 and H200 name torch.cuda.get_device_name() reports (../shared/FACTS.md), with its
# datasheet's dense bf16 peak, or None where it is not known for sure.
TORCH_NAMES = {"NVIDIA H100 80GB HBM3": 989.5e12, "NVIDIA H100 PCIe": 756e12,
               "NVIDIA H100 NVL": None, "NVIDIA H200": 989.5e12, "NVIDIA H200 NVL": None,
               "NVIDIA GH200 480GB": None}


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_every_hopper_name_torch_reports_is_in_the_table(name):
    assert peak_flops(name, "bf16") == TORCH_NAMES[name]
    # in the table by name (no fallback found it): the longest key that matches is its own
    keys = [k for (k, prec) in PEAK_FLOPS if prec == "bf16" and k.lower() in name.lower()]
    assert max(keys, key=len).lower() in name.lower()


# ---------------------------------------------------------------- mfu


def test_mfu_value():
    # 494.75e12 / 989.5e12 = 0.5
    assert mfu(494.75e12, 989.5e12) == pytest.approx(0.5)


def test_mfu_none_when_peak_unknown():
    assert mfu(494.75e12, None) is None
    assert mfu(494.75e12, peak_flops("cpu", "bf16")) is None


def test_mfu_rejects_nonpositive_peak():
    with pytest.raises(ValueError):
        mfu(1.0, 0.0)


def test_mfu_end_to_end():
    # 8 GPUs, 2 s/step, 1.5832e16 FLOPs/step -> 1.5832e16 / (2*8) = 9.895e14 FLOP/s/GPU
    # = the H100 SXM bf16 peak, so MFU = 1.0; tflops_per_gpu = 989.5
    achieved = 1.5832e16 / (2.0 * 8)
    assert tflops_per_gpu(1.5832e16, 2.0, 8) == pytest.approx(989.5)
    assert mfu(achieved, peak_flops("NVIDIA H100 80GB HBM3", "bf16")) == pytest.approx(1.0)


# ---------------------------------------------------------------- percentile / stats


def test_percentile_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0]
    # q=50: pos = 3*0.5 = 1.5 -> 2 + (3-2)*0.5 = 2.5
    assert percentile(xs, 50) == pytest.approx(2.5)
    # q=90: pos = 3*0.9 = 2.7 -> 3 + (4-3)*0.7 = 3.7
    assert percentile(xs, 90) == pytest.approx(3.7)
    # ends
    assert percentile(xs, 0) == 1.0
    assert percentile(xs, 100) == 4.0
    # [10, 20], q=25: pos = 0.25 -> 10 + 10*0.25 = 12.5
    assert percentile([10, 20], 25) == pytest.approx(12.5)


def test_percentile_sorts_input():
    assert percentile([4.0, 1.0, 3.0, 2.0], 90) == pytest.approx(3.7)


def test_percentile_single_value():
    assert percentile([5.0], 0) == 5.0
    assert percentile([5.0], 73) == 5.0
    assert percentile([5.0], 100) == 5.0


def test_percentile_empty_raises():
    with pytest.raises(ValueError):
        percentile([], 50)


def test_percentile_bad_q_or_nan_raises():
    with pytest.raises(ValueError):
        percentile([1.0, 2.0], 101)
    with pytest.raises(ValueError):
        percentile([1.0, 2.0], -1)
    with pytest.raises(ValueError):
        percentile([1.0, math.nan], 50)


def test_step_time_stats():
    ts = [1.0, 2.0, 3.0, 4.0, 10.0]
    # p50: pos = 4*0.5 = 2 -> 3.0
    # p90: pos = 4*0.9 = 3.6 -> 4 + (10-4)*0.6 = 7.6
    # mean: 20/5 = 4.0
    stats = step_time_stats(ts)
    assert set(stats) == {"p50", "p90", "mean"}
    assert stats["p50"] == pytest.approx(3.0)
    assert stats["p90"] == pytest.approx(7.6)
    assert stats["mean"] == pytest.approx(4.0)


def test_step_time_stats_accepts_generator():
    stats = step_time_stats(t for t in [2.0, 4.0])
    # p50: pos 0.5 -> 3.0; p90: pos 0.9 -> 2 + 2*0.9 = 3.8; mean 3.0
    assert stats == pytest.approx({"p50": 3.0, "p90": 3.8, "mean": 3.0})


def test_step_time_stats_empty_raises():
    with pytest.raises(ValueError):
        step_time_stats([])


def test_remaining_s_is_the_steps_left_at_the_mean_step_time_so_far():
    # mean of 1.0, 0.5, 0.6 s = 0.7 s; 10 steps left: 7 s
    assert step_stats.remaining_s([1.0, 0.5, 0.6], 10) == pytest.approx(7.0)
    assert step_stats.remaining_s([0.3], 0) == 0
    with pytest.raises(ValueError, match="no steps"):
        step_stats.remaining_s([], 3)


@pytest.mark.parametrize("n,ranks", [(6, (1, 6)), (10, (2, 9)), (18, (5, 14)), (20, (6, 15)),
                                     (50, (18, 33))])
def test_the_medians_interval_is_the_order_statistics_of_the_binomial_table(n, ranks):
    """The distribution-free 95% interval of a median: the ranks of the binomial tables (e.g.
    Conover, Practical Nonparametric Statistics, table A3): x_(6) to x_(15) of 20 values."""
    values = [float(v) for v in range(n, 0, -1)]  # unsorted on purpose
    assert step_stats.median_interval(values) == tuple(float(r) for r in ranks)


def test_under_6_values_the_median_has_no_95_interval():
    assert step_stats.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
