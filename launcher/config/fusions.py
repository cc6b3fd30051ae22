"""The model's `fusions` subsection: megatron-core's fused kernels (TransformerConfig's *_fusion
fields and persist_layer_norm), one key each so that a sweep can A/B them.

Megatron-LM turns every one of them on (megatron/training/arguments.py: each has a `--no-...`
flag) and TransformerConfig, which the launcher builds itself, has them all off. So null means
Megatron-LM's default: on where this installation has the kernel, off where it has not, and the
run's start line names each one left off and why (launcher/preflight/fusions.py decides, before any
rank starts). true asks for the kernel and is refused where it is missing; false turns it off.
"""

from dataclasses import dataclass, fields
from typing import Optional


@dataclass
class FusionsConfig:
    """Fused kernels (megatron-core TransformerConfig); null: Megatron-LM's default, on where
    the kernel is installed (launcher/preflight/fusions.py)."""

    masked_softmax: Optional[bool] = None
    """Scale, mask and softmax of attention scores in one kernel (masked_softmax_fusion;
    Megatron-LM --no-masked-softmax-fusion). bf16 needs Apex's scaled_masked_softmax_cuda."""
    bias_activation: Optional[bool] = None
    """Bias add and GELU/SwiGLU in one kernel (bias_activation_fusion; Megatron-LM
    --no-bias-gelu-fusion / --no-bias-swiglu-fusion): megatron's own torch.compile function."""
    bias_dropout: Optional[bool] = None
    """Bias add, dropout and residual add in one kernel (bias_dropout_fusion; Megatron-LM
    --no-bias-dropout-fusion): megatron's own torch.compile function."""
    rope: Optional[bool] = None
    """Rotary embedding applied by one kernel (apply_rope_fusion; Megatron-LM --no-rope-fusion);
    needs Transformer Engine."""
    gradient_accumulation: Optional[bool] = None
    """Weight gradients accumulated into the fp32 main gradient inside the GEMM
    (gradient_accumulation_fusion; Megatron-LM --no-gradient-accumulation-fusion); needs
    Transformer Engine's layer spec, or Apex's fused_weight_gradient_mlp_cuda for the local one."""
    persist_layer_norm: Optional[bool] = None
    """The persistent fused LayerNorm kernel (persist_layer_norm; Megatron-LM
    --no-persist-layer-norm); needs Transformer Engine's layer spec, or Apex for the local one."""

    @classmethod
    def keys(cls) -> tuple:
        return tuple(f.name for f in fields(cls))
