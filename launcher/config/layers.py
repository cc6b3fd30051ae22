"""What a transformer layer holds beyond attention and a dense MLP, and what it recomputes: the
model's `moe` and `recompute` subsections (megatron-core TransformerConfig's moe_* and recompute_*
fields). Each section's own rules live in its `__post_init__`; rules that need the model's layer
count live in `check_layers`, called by ModelConfig.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from launcher.config.choices import (
    RecomputeGranularity, RecomputeMethod, RecomputeModule, RouterScore, TokenDispatcher,
)
from launcher.config.error import ConfigError, positive, size_or_null


@dataclass
class MoeConfig:
    """A mixture of experts in place of the dense MLP (megatron-core MoELayer). With the local
    layer spec the experts are megatron-core's SequentialMLP: one MLP per local expert, run one
    after another (no grouped GEMM, no permute or router fusions; Transformer Engine has them)."""

    num_experts: Optional[int] = None
    """Experts per MoE layer (num_moe_experts); null: every layer has a dense MLP."""
    router_topk: int = 2
    """Experts each token is routed to (moe_router_topk)."""
    ffn_hidden_size: Optional[int] = None
    """Width of each routed expert's MLP (moe_ffn_hidden_size); null: model.ffn_hidden_size."""
    shared_expert_ffn_hidden_size: Optional[int] = None
    """Width of the shared expert every token passes through (moe_shared_expert_intermediate_size,
    DeepSeek/Qwen style); null: no shared expert."""
    layer_freq: List[int] = field(default_factory=list)
    """Which layers are MoE, one 0 (dense MLP) or 1 (MoE) per layer, as Megatron-LM's list form of
    --moe-layer-freq (DeepSeek-V3: three dense layers first); empty: every layer is MoE."""
    aux_loss_coeff: float = 0.01
    """Weight of the load-balancing loss (moe_aux_loss_coeff, moe_router_load_balancing_type
    aux_loss). The loss is logged as train/moe_aux_loss before this weight, as Megatron-LM logs
    it (1 when the experts are balanced). 0 turns the loss off (and its logging)."""
    token_dispatcher: TokenDispatcher = TokenDispatcher.alltoall
    """How tokens reach their experts across expert-parallel ranks: alltoall | allgather
    (moe_token_dispatcher_type)."""
    router_score_function: RouterScore = RouterScore.softmax
    """softmax (Mixtral, Qwen) | sigmoid (DeepSeek-V3) (moe_router_score_function)."""
    grouped_gemm: bool = False
    """Run the local experts as one grouped GEMM (moe_grouped_gemm); needs Transformer Engine's
    layer spec: the local spec's SequentialMLP would ignore it, so it is refused there."""

    def __post_init__(self):
        size_or_null("model.moe.num_experts", self.num_experts)
        size_or_null("model.moe.ffn_hidden_size", self.ffn_hidden_size)
        size_or_null("model.moe.shared_expert_ffn_hidden_size", self.shared_expert_ffn_hidden_size)
        positive("model.moe.router_topk", self.router_topk)
        if self.aux_loss_coeff < 0:
            raise ConfigError(f"model.moe.aux_loss_coeff={self.aux_loss_coeff} must be >= 0; "
                              "set 0 (no load-balancing loss) or a small weight like 0.01")
        if self.num_experts is None:
            return
        if self.router_topk > self.num_experts:
            raise ConfigError(
                f"model.moe.router_topk={self.router_topk} routes each token to more experts than "
                f"model.moe.num_experts={self.num_experts} has (megatron-core's router takes the "
                "top k of them); set model.moe.router_topk to at most the expert count")
        if self.router_topk == 1 and RouterScore(self.router_score_function) == RouterScore.softmax:
            raise ConfigError(
                "model.moe.router_topk=1 with model.moe.router_score_function=softmax gives the "
                "router a zero gradient (a softmax over one score; megatron-core's "
                "TransformerConfig refuses it without pre-softmax); set model.moe.router_topk=2 "
                "or more, or model.moe.router_score_function=sigmoid")
        bad = [v for v in self.layer_freq if v not in (0, 1)]
        if bad:
            raise ConfigError(f"model.moe.layer_freq holds {bad[0]}; each entry is 0 (dense MLP) "
                              "or 1 (MoE), one per layer; fix the list or set it to []")
        if self.layer_freq and not any(self.layer_freq):
            raise ConfigError("model.moe.layer_freq has no MoE layer (all 0) while "
                              f"model.moe.num_experts={self.num_experts}; put a 1 where a layer "
                              "is MoE, or set model.moe.num_experts=null")

    @property
    def enabled(self) -> bool:
        return self.num_experts is not None

    def pattern(self, num_layers: int) -> List[int]:
        """One 0/1 per layer: 1 where the layer is MoE."""
        if not self.enabled:
            return [0] * num_layers
        return list(self.layer_freq) or [1] * num_layers

    def check_layers(self, num_layers: int) -> None:
        if not self.enabled:  # its keys act on nothing: config.effect refuses them
            return
        if self.layer_freq and len(self.layer_freq) != num_layers:
            raise ConfigError(
                f"model.moe.layer_freq has {len(self.layer_freq)} entries and model.num_layers="
                f"{num_layers} (megatron-core asserts one per layer, transformer_config.py); give "
                "one 0/1 per layer, or [] for every layer MoE")


@dataclass
class RecomputeConfig:
    """Activation recomputation (megatron-core recompute_granularity, recompute_method,
    recompute_num_layers, recompute_modules): saves activation memory for a second forward in the
    backward pass."""

    granularity: Optional[RecomputeGranularity] = None
    """null: nothing recomputed; selective: the modules below; full: whole layers (the method
    and num_layers below say which)."""
    method: Optional[RecomputeMethod] = None
    """full only: uniform (recompute every chunk of num_layers layers, keeping each chunk's
    input) | block (recompute the first num_layers layers, keep the rest)."""
    num_layers: Optional[int] = None
    """full only: layers per recomputed chunk (uniform) or layers recomputed (block)."""
    modules: List[RecomputeModule] = field(default_factory=lambda: [RecomputeModule.core_attn])
    """selective only: core_attn | layernorm | mlp | moe | shared_experts (megatron's names;
    core_attn by default, as megatron)."""

    def __post_init__(self):
        size_or_null("model.recompute.num_layers", self.num_layers)
        granularity = self.granularity and RecomputeGranularity(self.granularity)
        if granularity == RecomputeGranularity.full:
            if self.method is None or self.num_layers is None:
                raise ConfigError(
                    "model.recompute.granularity=full needs model.recompute.method (uniform or "
                    "block) and model.recompute.num_layers (megatron-core's TransformerConfig "
                    "refuses it without them); set both")
            return
        if granularity == RecomputeGranularity.selective and not self.modules:
            raise ConfigError("model.recompute.granularity=selective with model.recompute."
                              "modules=[] recomputes nothing; name the modules (e.g. "
                              "[core_attn]) or set model.recompute.granularity=null")

    def check_layers(self, num_layers: int, moe: MoeConfig) -> None:
        if self.num_layers is not None and self.num_layers > num_layers:
            raise ConfigError(
                f"model.recompute.num_layers={self.num_layers} must be between 1 and "
                f"model.num_layers={num_layers} (megatron-core's TransformerConfig); set "
                "model.recompute.num_layers to at most the layer count")
        if self.granularity != RecomputeGranularity.selective:
            return
        needs = {RecomputeModule.moe: moe.enabled,
                 RecomputeModule.shared_experts: moe.shared_expert_ffn_hidden_size is not None,
                 RecomputeModule.mlp: not all(moe.pattern(num_layers))}
        for module in map(RecomputeModule, self.modules):
            if module in needs and not needs[module]:
                raise ConfigError(
                    f"model.recompute.modules holds {module.value}, which this model has not "
                    f"(no {module.value.replace('_', ' ')} layer); remove it from the list")
