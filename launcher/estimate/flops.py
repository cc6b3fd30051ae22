"""Throughput arithmetic: model FLOPs per step, tokens/s/GPU, TFLOP/s/GPU, MFU.

Pure Python, no torch: numbers in, numbers out. The launcher measures step times and reads the
device name (``torch.cuda.get_device_name()``) itself and passes them in.

The FLOP count is Megatron-LM's own (``num_floating_point_operations`` -> ``transformer_flops`` in
megatron/training/training.py) for the GPTs the launcher builds, dense or MoE: no multi-token
prediction, no multi-latent attention, no attention output gate, no linear-attention layers.
Using the same formula means our TFLOP/s and MFU can be compared directly with the numbers
Megatron-LM logs.

The peak table lists dense (no structured sparsity) tensor-core peaks from NVIDIA's datasheets.
An unknown GPU, a CPU or an unknown precision gives ``None``, never a guessed or fallback peak,
so an MFU is either computed against the right peak or not reported at all.
"""

from __future__ import annotations

import re
from typing import Optional

from launcher.config import Activation, ModelConfig

__all__ = [
    "PEAK_FLOPS",
    "flops_per_step",
    "mfu",
    "peak_flops",
    "tflops_per_gpu",
    "tokens_per_s_per_gpu",
]


def flops_per_step(model: ModelConfig, global_batch: int, padded_vocab: int) -> float:
    """Model FLOPs (forward + backward) for one optimizer step of the GPT `model` describes.

    This is Megatron-LM's ``num_floating_point_operations()`` (megatron/training/training.py) for
    a GPT with dense and MoE layers and no multi-token prediction, no MLA, no attention output
    gate, no linear attention (the launcher builds none of them); unpacked sequences (BSHD).

    Notation: B = global_batch (sequences per step), s = seq_length, h = hidden, L = num_layers,
    ffn = ffn_hidden_size, V = padded_vocab, q = kv_channels * heads (query projection width),
    k = v = kv_channels * query groups (key / value widths; GQA when groups < heads). For MoE:
    L_moe of the L layers are MoE (model.moe.layer_freq), each token runs through top-k routed
    experts of width ffn_e and the shared expert of width ffn_s (0 without one); the other
    L - L_moe layers have the dense MLP.

    Factors, as in Megatron-LM:
    - 3: every GEMM runs three times per step: forward, backward dgrad, backward wgrad
      (``forward_backward_expansion_factor``).
    - 2: a GEMM of an (m x n) with an (n x k) matrix is 2*m*n*k FLOPs, a multiply and an add
      (``fma_expansion_factor``).
    - F = 3 with SwiGLU, 2 without (``ffn_expansion_factor``): the MLP is h->ffn and ffn->h
      (2 GEMMs of h*ffn), and SwiGLU makes the first one h->2*ffn, which gives 3 of them.

    Per token:
    - MLPs:           3*2 * h*F * (ffn*(L - L_moe) + (ffn_e*topk + ffn_s)*L_moe)
    - QKV projection: 3*2 * h*(q+k+v) per layer
    - core attention: 3*2 * q*s/2*2 per layer. QK^T and (QK^T)V are each q*s multiply-adds per
      token, and a causal mask halves them (s/2). Older Megatron versions used ``s/h`` without
      the halving, so their attention term is larger.
    - out projection: 3*2 * q*h per layer
    - logits, once:   3*2 * h*V (tied or untied embeddings alike)

    The router's GEMM (h x experts), norms, softmax, activations, rotary embeddings, the loss and
    optimizer math are not counted (Megatron-LM leaves them out too). Recomputation adds work a
    GPU does but no model FLOPs (Megatron-LM counts none either). Returns a float because s/2
    can be fractional.
    """
    m = model
    B, s, h, L, V = global_batch, m.seq_length, m.hidden_size, m.num_layers, padded_vocab
    q = m.head_channels * m.num_attention_heads
    k = v = m.head_channels * m.query_groups
    F = 3 if m.activation == Activation.swiglu else 2
    moe_layers = sum(m.moe.pattern(L))
    routed = m.expert_ffn_size * m.moe.router_topk + (m.moe.shared_expert_ffn_hidden_size or 0)
    mlp = 3 * 2 * h * F * (m.ffn_size * (L - moe_layers) + routed * moe_layers)
    attention = L * 3 * 2 * (h * (q + k + v) + q * s / 2 * 2 + q * h)
    logits = 3 * 2 * h * V
    return float(B * s * (mlp + attention + logits))


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def tokens_per_s_per_gpu(tokens_per_step: float, step_time_s: float, world_size: int) -> float:
    """Training throughput per GPU: tokens_per_step / (step_time_s * world_size).

    tokens_per_step is the tokens the whole job processes in one optimizer step
    (global_batch * seq_length). Dividing by the step's wall time gives the job's tokens/s, and
    dividing by world_size (all ranks, whatever the TP/PP/CP/DP split) gives the per-GPU rate.
    Raises ValueError for step_time_s <= 0 or world_size <= 0.
    """
    _check_positive("step_time_s", step_time_s)
    _check_positive("world_size", world_size)
    return tokens_per_step / (step_time_s * world_size)


def tflops_per_gpu(flops_per_step: float, step_time_s: float, world_size: int) -> float:
    """Achieved model TFLOP/s per GPU: flops_per_step / (step_time_s * 1e12 * world_size).

    flops_per_step is the whole job's model FLOPs per step (see ``flops_per_step``). Dividing by
    the step time gives FLOP/s for the job, by world_size gives it per GPU, and by 1e12 turns it
    into TFLOP/s. This is the "throughput per GPU (TFLOP/s/GPU)" Megatron-LM logs. Raises
    ValueError for step_time_s <= 0 or world_size <= 0.
    """
    _check_positive("step_time_s", step_time_s)
    _check_positive("world_size", world_size)
    return flops_per_step / (step_time_s * 1e12 * world_size)


# Dense (no sparsity) tensor-core peak FLOP/s, keyed by (device-name substring, precision).
# Values are NVIDIA datasheet figures: the datasheets print sparsity numbers, and dense is half.
# Keys are matched against torch.cuda.get_device_name() strings by ``peak_flops``; see its
# docstring for the matching rules that keep e.g. "H100 PCIe" off the SXM entry.
PEAK_FLOPS: dict[tuple[str, str], Optional[float]] = {
    # H100 SXM5 ("NVIDIA H100 80GB HBM3"): 132 SMs; bf16/fp16 989.5 TF, fp8 1979 TF.
    ("H100 80GB HBM3", "bf16"): 989.5e12,
    ("H100 80GB HBM3", "fp16"): 989.5e12,
    ("H100 80GB HBM3", "fp8"): 1979e12,
    ("H100 SXM", "bf16"): 989.5e12,
    ("H100 SXM", "fp16"): 989.5e12,
    ("H100 SXM", "fp8"): 1979e12,
    # H100 PCIe ("NVIDIA H100 PCIe"): 114 SMs, lower clocks; bf16/fp16 756 TF, fp8 1513 TF.
    ("H100 PCIe", "bf16"): 756e12,
    ("H100 PCIe", "fp16"): 756e12,
    ("H100 PCIe", "fp8"): 1513e12,
    # H200 SXM ("NVIDIA H200"): the H100 SXM compute die with more HBM, so the same peaks.
    ("H200", "bf16"): 989.5e12,
    ("H200", "fp16"): 989.5e12,
    ("H200", "fp8"): 1979e12,
    # Named by torch too, and deliberately null: "NVIDIA H100 NVL", "NVIDIA H200 NVL" (lower
    # clocks and power than SXM; NVIDIA has printed their figures per card and per NVLink pair)
    # and "NVIDIA GH200 480GB" (a Grace Hopper module): their dense per-GPU peaks are not known
    # here for sure, and a neighbouring part's peak would make a wrong MFU.
    **{(name, precision): None for name in ("H100 NVL", "H200 NVL", "GH200")
       for precision in ("bf16", "fp16", "fp8")},
    # A100 SXM4 and PCIe ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB",
    # "NVIDIA A100 80GB PCIe"): bf16/fp16 312 TF on both form factors; no fp8.
    ("A100", "bf16"): 312e12,
    ("A100", "fp16"): 312e12,
    ("A100-PCIE", "bf16"): 312e12,
    ("A100-PCIE", "fp16"): 312e12,
    ("A100 80GB PCIe", "bf16"): 312e12,
    ("A100 80GB PCIe", "fp16"): 312e12,
    # B200 ("NVIDIA B200"), HGX B200 per GPU: bf16/fp16 2.25 PF, fp8 4.5 PF.
    ("B200", "bf16"): 2.25e15,
    ("B200", "fp16"): 2.25e15,
    ("B200", "fp8"): 4.5e15,
}

# Form-factor words that mark a variant with its own (lower) peak. A key matches a device name
# that has one of these words only if the key itself has that word.
_VARIANT_MARKERS = ("pcie", "nvl")

_PRECISION_ALIASES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
}


def _key_matches(key: str, name: str) -> bool:
    """Whether table key ``key`` names the GPU in ``name``. Both are lower-cased.

    The key has to appear as whole tokens: no letter or digit right before or after it, so
    "b200" does not match "gb200" and "h200" does not match "gh200". Any variant marker in the
    name ("pcie", "nvl") also has to be in the key, so "h200" does not match "h200 nvl".
    """
    pattern = r"(?<![a-z0-9])" + re.escape(key) + r"(?![a-z0-9])"
    if re.search(pattern, name) is None:
        return False
    for marker in _VARIANT_MARKERS:
        if re.search(r"(?<![a-z0-9])" + marker + r"(?![a-z0-9])", name) and marker not in key:
            return False
    return True


def peak_flops(device_name: Optional[str], precision: str) -> Optional[float]:
    """Dense peak FLOP/s of one GPU at ``precision``, or None when it is not known.

    device_name is what ``torch.cuda.get_device_name()`` returns (e.g. "NVIDIA H100 80GB HBM3",
    "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA B200"). precision is "bf16", "fp16" or "fp8"
    (case-insensitive; "bfloat16", "float16" and "half" are accepted as aliases).

    Lookup: the name is lower-cased and compared with every ``PEAK_FLOPS`` key for that precision
    (see ``_key_matches``: whole-token match, and a PCIe/NVL name only matches a key that says
    so). If several keys match, the longest (most specific) one wins. There is no fallback:
    None for device_name None, "" or "cpu", for a GPU not in the table (including a GPU with a
    variant marker the table has no entry for, such as "NVIDIA H200 NVL"), for a precision the
    GPU has no entry for (e.g. fp8 on an A100), and for an unknown precision.
    """
    if device_name is None or not isinstance(precision, str):
        return None
    name = device_name.strip().lower()
    if not name or name == "cpu" or name.startswith("cpu"):
        return None
    prec = _PRECISION_ALIASES.get(precision.strip().lower())
    if prec is None:
        return None
    best_key: Optional[str] = None
    best_value: Optional[float] = None
    for (key, key_prec), value in PEAK_FLOPS.items():
        if key_prec != prec:
            continue
        lowered = key.lower()
        if _key_matches(lowered, name) and (best_key is None or len(lowered) > len(best_key)):
            best_key, best_value = lowered, value
    return best_value


def mfu(achieved_flops_per_s_per_gpu: float, peak: Optional[float]) -> Optional[float]:
    """Model FLOPs utilization: achieved_flops_per_s_per_gpu / peak, a fraction (0.4 = 40%).

    achieved_flops_per_s_per_gpu is in FLOP/s (not TFLOP/s): flops_per_step / (step_time *
    world_size), the same unit as ``peak_flops``. Returns None when peak is None (unknown GPU,
    CPU or precision), so no MFU is made up. Raises ValueError for peak <= 0.
    """
    if peak is None:
        return None
    _check_positive("peak", peak)
    return achieved_flops_per_s_per_gpu / peak
