"""Which fused kernels a run uses: `model.fusions`, resolved against this installation and the
run's device before any rank starts. Finds packages without importing them (no torch here).

Megatron-LM turns every fusion on (megatron/training/arguments.py) and fails where a kernel is
missing; the launcher keeps its default, on, where the kernel is there, and otherwise leaves it
off and says so in the run's start line. What each needs (megatron-core 0.19.2):
- masked_softmax: FusedScaleMaskSoftmax runs bf16/fp16 scores through Apex's
  `scaled_masked_softmax_cuda` (transformer/fused_softmax.py); fp32 scores never take the kernel,
  so there the flag is harmless and stays on, as in Megatron-LM.
- bias_activation, bias_dropout: megatron's own torch.compile functions (fusions/): they run
  anywhere, but compiling them takes 30 to 50 s a rank on a 2-core CPU (measured here; mostly
  inductor probing the CPU's instruction sets, each probe a fresh Python importing torch), so a
  CPU run leaves them off unless asked.
- rope: Transformer Engine's fused_apply_rotary_pos_emb (TransformerConfig refuses it without).
- gradient_accumulation: Transformer Engine's linear layers, or Apex's
  fused_weight_gradient_mlp_cuda under the local spec (tensor_parallel/layers.py raises without).
- persist_layer_norm: Transformer Engine's norm, or Apex's FusedLayerNorm under the local spec
  (the local spec's WrappedTorchNorm refuses it).
"""

import importlib.util
from dataclasses import dataclass
from typing import Optional, Tuple

from launcher.config import (
    Activation, ConfigError, FusionsConfig, LayerSpec, ModelConfig, PositionEmbedding, Precision,
)

# fusion key: megatron-core TransformerConfig's field
FIELDS = {"masked_softmax": "masked_softmax_fusion", "bias_activation": "bias_activation_fusion",
          "bias_dropout": "bias_dropout_fusion", "rope": "apply_rope_fusion",
          "gradient_accumulation": "gradient_accumulation_fusion",
          "persist_layer_norm": "persist_layer_norm"}
COMPILED = ("bias_activation", "bias_dropout")  # megatron's torch.compile functions


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


@dataclass(frozen=True)
class Kernels:
    """What this installation has for the fusions."""

    transformer_engine: bool
    apex: bool
    masked_softmax: bool
    """Apex's scaled_masked_softmax_cuda extension."""
    weight_gradient: bool
    """Apex's fused_weight_gradient_mlp_cuda extension."""

    @classmethod
    def here(cls) -> "Kernels":
        return cls(transformer_engine=_found("transformer_engine"), apex=_found("apex"),
                   masked_softmax=_found("scaled_masked_softmax_cuda"),
                   weight_gradient=_found("fused_weight_gradient_mlp_cuda"))

    @classmethod
    def ngc(cls) -> "Kernels":
        """What NVIDIA's PyTorch containers ship (Transformer Engine, Apex built with its CUDA
        extensions): what a GPU cluster running Megatron-LM has (cluster.kernels=ngc)."""
        return cls(transformer_engine=True, apex=True, masked_softmax=True, weight_gradient=True)

    def lacks(self) -> str:
        """What of Transformer Engine and Apex is missing, in words ("" for nothing)."""
        missing = [name for name, found in (("Transformer Engine", self.transformer_engine),
                                            ("Apex", self.apex)) if not found]
        return " or ".join(missing)


@dataclass(frozen=True)
class Fusions:
    """The fusions a run uses, as TransformerConfig's fields, and why each one off is off; `spec`:
    the layer spec they were resolved for (launcher.preflight.support.layer_spec), which the model is
    built with."""

    spec: LayerSpec
    masked_softmax: bool
    bias_activation: bool
    bias_dropout: bool
    rope: bool
    gradient_accumulation: bool
    persist_layer_norm: bool
    off: Tuple[Tuple[str, str], ...] = ()
    """(key, why) for each fusion left off though Megatron-LM has it on."""

    def fields(self) -> dict:
        """TransformerConfig's keyword arguments."""
        return {FIELDS[key]: getattr(self, key) for key in FIELDS}

    def start_line(self) -> str:
        """The run's start line's part: what is off and why (empty when all are on)."""
        if not self.off:
            return ""
        by_reason = {}
        for key, why in self.off:
            by_reason.setdefault(why, []).append(key)
        return "fusions off: " + "; ".join(f"{', '.join(keys)} ({why})"
                                           for why, keys in by_reason.items())


def no_effect(key: str, model: ModelConfig) -> Optional[str]:
    """Why fusion `key` has nothing to fuse in this model (Megatron-LM's validate_args then sets
    it off itself), or None."""
    if key == "rope" and model.position_embedding != PositionEmbedding.rope:
        return "model.position_embedding=learned_absolute has no rotary embedding"
    gelu = model.activation == Activation.gelu
    if key == "bias_activation" and gelu and not model.add_bias_linear:
        return "model.add_bias_linear=false leaves GELU no bias"
    return None


def missing(key: str, spec: LayerSpec, precision: Precision, on_cpu: bool,
            kernels: Kernels) -> Optional[str]:
    """Why this run cannot use fusion `key` here, or None where it can."""
    te = spec == LayerSpec.transformer_engine
    if key in COMPILED:
        return None
    if on_cpu:
        if key == "masked_softmax" and precision == Precision.fp32:
            return None
        return "CUDA only" if key != "masked_softmax" else "CUDA only in bf16"
    if key == "masked_softmax":
        ok = precision == Precision.fp32 or kernels.masked_softmax
        return None if ok else "needs Apex's scaled_masked_softmax_cuda for bf16"
    if key == "rope":
        return None if kernels.transformer_engine else "needs Transformer Engine"
    if key == "gradient_accumulation":
        ok = te or kernels.weight_gradient
        return None if ok else ("needs Transformer Engine, or Apex's "
                                "fused_weight_gradient_mlp_cuda")
    ok = te or kernels.apex  # persist_layer_norm
    return None if ok else "needs Transformer Engine, or Apex"


def resolve(model: ModelConfig, spec: LayerSpec, precision: Precision, on_cpu: bool,
            kernels: Kernels) -> Fusions:
    """model.fusions for this run: null is on where the kernel is here (a CPU leaves the compiled
    ones off: see the module's docstring), true is refused where it is missing."""
    values, off = {}, []
    for key in FusionsConfig.keys():
        asked = getattr(model.fusions, key)
        idle = no_effect(key, model)
        if asked and idle:
            raise ConfigError(f"model.fusions.{key}=true has no effect: {idle}; set "
                              f"model.fusions.{key}=null or false")
        if idle:
            values[key] = False
            continue
        why = missing(key, spec, precision, on_cpu, kernels)
        if asked and why:
            where = "on a CPU" if on_cpu else f"here (layer spec {spec.value})"
            raise ConfigError(f"model.fusions.{key}=true cannot run {where}: {why}; set "
                              f"model.fusions.{key}=null (on where installed) or false")
        if asked is None and on_cpu and key in COMPILED:
            why = ("torch.compile takes 30-50 s a rank to build them on a CPU; "
                   "model.fusions.KEY=true turns one on")
        values[key] = bool(asked) if asked is not None else why is None
        if asked is None and why:
            off.append((key, why))
    return Fusions(spec, **values, off=tuple(off))

