"""A GPU layer's time by kernel class, for the dry run's time model (launcher/estimate/predict.py):
each class at its own rate for the GPU kind and dtype, from the hardware file's figures, each a
[low, high] band over public measurements (hardware/NAME.yaml's `sources` name them).

- GEMMs, by shape: 2 M N K FLOPs at the dtype's peak x gemm_fraction, slowed by wave
  quantization (output tiles of TILE run in waves of `sms`; a partly filled last wave idles
  the rest), and never faster than their operands cross HBM. Forward, each weight's GEMM;
  backward, its two (the input's gradient and the weight's), of the same FLOPs.
- Core attention: Megatron-LM's causal attention FLOPs at the bf16 peak x attention_fraction
  for the sequence length (FP8 recipes keep attention in bf16).
- Memory-bound kernels: the bytes the norms, rope, the activation, the residual adds, a dropout
  and FP8's casts (with their amax) move, at hbm_gbps x hbm_fraction; the backward moves twice
  the forward's.
- The host: every kernel takes launch_us to issue in eager PyTorch; a layer runs for the longer
  of its kernels and their launches, and a full-iteration CUDA graph replays it without them.
Torch-free: arithmetic on the config and the hardware file.
"""

import math
from dataclasses import dataclass
from typing import List, Tuple

from launcher.config import Activation, Config, PositionEmbedding
from launcher.config.cluster import Hardware

TILE = (128, 256)
"""A GEMM's output tile, M x N: CUTLASS's default for Hopper's bf16 and FP8 warp-specialized
kernels (cutlass/include/cutlass/gemm/collective/builders/sm90_gmma_builder.inl, the 128x256
tiles in its examples/48_hopper_warp_specialized_gemm)."""


def at(band, end: float) -> float:
    """A band's value `end` of the way from its low (0) to its high (1) end."""
    low, high = band
    return low + (high - low) * end


@dataclass(frozen=True)
class Gemm:
    m: int
    n: int
    k: int
    count: int = 1
    """Alike GEMMs (a layer's local experts)."""

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count


def wave_efficiency(gemm: Gemm, sms: int) -> float:
    """The share of the SMs' time the GEMM's tiles fill, over all its waves."""
    tiles = math.ceil(gemm.m / TILE[0]) * math.ceil(gemm.n / TILE[1]) * gemm.count
    return tiles / (math.ceil(tiles / sms) * sms)


def gemm_s(gemm: Gemm, hw: Hardware, dtype: str, end: float) -> float:
    """One GEMM (forward), its backward's two of the same FLOPs take 2x (see layer_s)."""
    rate = hw.tflops[dtype] * 1e12 * at(hw.gemm_fraction[dtype], end)
    compute = gemm.flops / (rate * wave_efficiency(gemm, hw.sms))
    element = 1 if dtype == "fp8" else 2
    moved = (gemm.m * gemm.k + gemm.k * gemm.n + gemm.m * gemm.n) * element * gemm.count
    return max(compute, moved / hbm_rate(hw, end))


def hbm_rate(hw: Hardware, end: float) -> float:
    return hw.hbm_gbps * 1e9 * at(hw.hbm_fraction, end)


def host_link_rate(hw: Hardware, end: float) -> float:
    """Bytes/s one way between a GPU and its host's memory (what CPU offloading moves at)."""
    return at(hw.host_link_gbps, end) * 1e9


def layer_gemms(cfg: Config, moe: int, tokens: int) -> List[Gemm]:
    """The forward GEMMs of one layer for `tokens` tokens on one rank: QKV, the projection, the
    MLP's two (a mixture of experts: each local expert's, on its share of the routed tokens, and a
    shared expert's)."""
    m, tp = cfg.model, cfg.parallel.tensor_model_parallel_size
    h, q, kv = m.hidden_size, m.head_channels * m.num_attention_heads, m.head_channels * m.query_groups
    gated = 2 if m.activation == Activation.swiglu else 1
    # tensor parallelism splits QKV's and fc1's outputs, the projection's and fc2's inputs
    gemms = [Gemm(tokens, (q + 2 * kv) // tp, h), Gemm(tokens, h, q // tp)]
    if moe:
        ep = cfg.parallel.expert_model_parallel_size
        local = max(1, m.moe.num_experts // ep)
        routed = max(1, tokens * m.moe.router_topk * ep // m.moe.num_experts)
        ffn = m.expert_ffn_size // tp
        gemms += [Gemm(routed, gated * ffn, h, local), Gemm(routed, h, ffn, local)]
        shared = (m.moe.shared_expert_ffn_hidden_size or 0) // tp
        if shared:
            gemms += [Gemm(tokens, gated * shared, h), Gemm(tokens, h, shared)]
    else:
        ffn = m.ffn_size // tp
        gemms += [Gemm(tokens, gated * ffn, h), Gemm(tokens, h, ffn)]
    return gemms


def attention_flops(cfg: Config, tokens: int) -> float:
    """Forward and backward FLOPs of the core attention, as Megatron-LM counts them (causal:
    half the scores; launcher/estimate/flops.py)."""
    m = cfg.model
    heads = m.num_attention_heads // cfg.parallel.tensor_model_parallel_size
    return 3 * 2 * m.head_channels * heads * m.seq_length * tokens


def attention_share(hw: Hardware, seq: int, end: float) -> float:
    """attention_fraction at `seq`, interpolated in log(seq) between the file's lengths (held
    at its shortest and longest)."""
    table = sorted((int(s), band) for s, band in hw.attention_fraction.items())
    if seq <= table[0][0]:
        return at(table[0][1], end)
    for (s0, b0), (s1, b1) in zip(table, table[1:]):
        if seq <= s1:
            w = math.log(seq / s0) / math.log(s1 / s0)
            return at(b0, end) * (1 - w) + at(b1, end) * w
    return at(table[-1][1], end)


def memory_bound_bytes(cfg: Config, moe: int, tokens: int, fp8: bool) -> float:
    """Bytes one layer's forward moves outside its GEMMs and attention, in bf16: two norms (read
    and write h each), rope (q and k), two residual adds (two reads, one write of h), the
    activation (SwiGLU reads 2 ffn and writes ffn; GELU reads and writes ffn), a dropout where
    there is one (two of h, and its mask), and with FP8 each GEMM input's cast (bf16 read, FP8
    written)."""
    m = cfg.model
    h, q, kv = m.hidden_size, m.head_channels * m.num_attention_heads, m.head_channels * m.query_groups
    width = (m.expert_ffn_size * m.moe.router_topk + (m.moe.shared_expert_ffn_hidden_size or 0)
             if moe else m.ffn_size)
    act = 3 * width if m.activation == Activation.swiglu else 2 * width
    tp = cfg.parallel.tensor_model_parallel_size
    rope = 2 * (q + kv) if PositionEmbedding(m.position_embedding) == PositionEmbedding.rope else 0
    # with tensor parallelism (no sequence parallelism, as the launcher runs it), every rank
    # runs the norms, adds and dropouts on the whole sequence, rope and the activation on 1/tp
    # of the heads and the MLP
    hidden = 2 * 2 * h + 2 * 3 * h + (2 * 2.5 * h if m.hidden_dropout > 0 else 0)
    nbytes = (hidden + (rope + act) / tp) * 2.0
    if fp8:  # the inputs of QKV, the projection and the MLP's two GEMMs: 2 bytes in, 1 out
        nbytes += (h + q / tp + h + width / tp) * 3.0
    return nbytes * tokens


def kernels_per_layer(moe: int, fp8: bool) -> Tuple[int, int]:
    """(forward, backward) kernels of one layer, as Megatron-core's Transformer Engine layer
    issues them: norm, QKV, rope, attention, projection, residual add, norm, the MLP's GEMMs and
    activation, residual add (11; an MoE layer adds the router, its top-k and the permutes, 6),
    FP8's casts (4); the backward about twice."""
    forward = 11 + (6 if moe else 0) + (4 if fp8 else 0)
    return forward, 2 * forward


@dataclass(frozen=True)
class LayerTime:
    """One layer's forward and backward for one microbatch on the GPU, and its host time."""

    forward_s: float
    backward_s: float
    host_forward_s: float
    host_backward_s: float


def layer_s(cfg: Config, hw: Hardware, moe: int, dtype: str, end: float) -> LayerTime:
    """One layer, one microbatch, every rate `end` of the way from its band's low to high."""
    tokens = cfg.train.micro_batch_size * cfg.model.seq_length
    gemms = sum(gemm_s(g, hw, dtype, end) for g in layer_gemms(cfg, moe, tokens))
    attention = attention_flops(cfg, tokens) / (
        hw.tflops["bf16"] * 1e12 * attention_share(hw, cfg.model.seq_length, end))
    fp8 = dtype == "fp8"
    memory = memory_bound_bytes(cfg, moe, tokens, fp8) / hbm_rate(hw, end)
    forward = gemms + attention / 3 + memory
    backward = 2 * gemms + attention * 2 / 3 + 2 * memory
    launches_f, launches_b = kernels_per_layer(moe, fp8)
    launch = at(hw.launch_us, 1 - end) * 1e-6  # the fast end launches fastest
    return LayerTime(forward, backward, launches_f * launch, launches_b * launch)
