"""The schema's sections for what is built: the GPT (model), its parallel sizes (parallel), its
Megatron-FSDP wrapping (fsdp) and its CUDA graphs (cuda_graph), one dataclass per config group,
mirrored by conf/<group>/*.yaml. Each section's own rules live in its `__post_init__`;
no rule ever rewrites a setting. The root and the rules across sections are in schema.py.
"""

from dataclasses import dataclass, field
from typing import List, Optional

from launcher.config.choices import (
    PER_LAYER_GRAPHS, Activation, CudaGraphImpl, CudaGraphModule, FsdpDtype, LayerSpec,
    Normalization, OuterSharding, PositionEmbedding, RecomputeGranularity, ShardingStrategy,
)
from launcher.config.fusions import FusionsConfig
from launcher.config.layers import MoeConfig, RecomputeConfig

from launcher.config.error import ConfigError, positive, size_or_null


@dataclass
class ModelConfig:
    """The GPT architecture (megatron-core TransformerConfig + GPTModel): GPT-2 style by default
    (learned positions, tied embeddings, biases, LayerNorm, GELU); Llama style with rope,
    untie_embeddings, add_bias_linear=false, RMSNorm and swiglu; a mixture of experts with moe."""

    num_layers: int = 2
    """Transformer layers."""
    hidden_size: int = 64
    """Model width."""
    num_attention_heads: int = 4
    """Attention heads."""
    num_query_groups: Optional[int] = None
    """Key/value heads for grouped-query attention; null means one per head."""
    ffn_hidden_size: Optional[int] = None
    """MLP width; null means 4 x hidden_size."""
    seq_length: int = 32
    """Tokens per sample."""
    vocab_size: Optional[int] = None
    """Vocabulary size (padded up to a multiple of 128 x tensor-parallel size, as Megatron-LM
    does); null: the tokenizer's vocabulary from PREFIX.json with data=indexed, and
    model.mock_vocab_size with mock data."""
    mock_vocab_size: int = 128
    """The vocabulary of mock data when model.vocab_size is null."""
    activation: Activation = Activation.gelu
    """MLP activation: gelu, or swiglu (gated linear unit with SiLU)."""
    normalization: Normalization = Normalization.LayerNorm
    """LayerNorm or RMSNorm."""
    position_embedding: PositionEmbedding = PositionEmbedding.learned_absolute
    """learned_absolute (GPT-2) | rope (rotary, Llama) (GPTModel position_embedding_type)."""
    rotary_base: Optional[int] = None
    """Rotary base (Llama 3: 500000); null: megatron's 10000. rope only."""
    rotary_percent: Optional[float] = None
    """Fraction of each head's channels that rotate, in (0, 1]; null: all of them. rope only."""
    rope_scaling: bool = False
    """Llama-3.1 frequency scaling of rope for long context (GPTModel rope_scaling)."""
    rope_scaling_factor: Optional[float] = None
    """The factor of model.rope_scaling; null: megatron's 8.0. Needs model.rope_scaling=true."""
    untie_embeddings: bool = False
    """An output layer of its own instead of the word embeddings' transpose
    (share_embeddings_and_output_weights=False, Megatron-LM --untie-embeddings-and-output-weights;
    Llama). false: tied, as GPT-2 and Megatron-LM's default."""
    add_bias_linear: bool = True
    """Biases on every linear layer (GPT-2); Llama has none."""
    qk_layernorm: bool = False
    """Normalise queries and keys per head before attention (Qwen-3, OLMo-2)."""
    kv_channels: Optional[int] = None
    """Channels per attention head; null: hidden_size / num_attention_heads."""
    hidden_dropout: float = 0.1
    """Dropout after attention and after the MLP (hidden_dropout); 0.1, as Megatron-LM's
    --hidden-dropout. Megatron-Bridge's Llama and DeepSeek recipes set 0."""
    attention_dropout: float = 0.1
    """Dropout of the attention probabilities (attention_dropout); 0.1, as Megatron-LM's
    --attention-dropout."""
    init_method_std: float = 0.02
    """Standard deviation of the weights' normal init (init_method_std); 0.02, as Megatron-LM's
    --init-method-std. Megatron-Bridge's Llama 3 8B: 0.01, 70B: 0.008944, DeepSeek-V3: 0.006."""
    norm_epsilon: float = 1e-5
    """Epsilon of LayerNorm/RMSNorm (layernorm_epsilon); 1e-5, as Megatron-LM's --norm-epsilon."""
    attention_softmax_in_fp32: bool = False
    """Compute the attention softmax in fp32 when the model runs in bf16
    (attention_softmax_in_fp32); false, as Megatron-LM without --attention-softmax-in-fp32."""
    fusions: FusionsConfig = field(default_factory=FusionsConfig)
    """Fused kernels (see model.fusions.*): Megatron-LM's defaults where installed."""
    moe: MoeConfig = field(default_factory=MoeConfig)
    """Mixture of experts (see model.moe.*)."""
    recompute: RecomputeConfig = field(default_factory=RecomputeConfig)
    """Activation recomputation (see model.recompute.*)."""
    cpu_offloading_num_layers: int = 0
    """Layers whose activations go to the host's memory in the forward pass and come back for
    the backward, the first ones (TransformerConfig cpu_offloading with cpu_offloading_num_layers,
    Megatron-LM --cpu-offloading-num-layers, Megatron-Bridge's Llama-3 70B and 405B presets);
    0: none. Needs Transformer Engine, fewer than model.num_layers and no recomputation
    (megatron-core refuses each)."""
    layer_spec: LayerSpec = LayerSpec.auto
    """megatron-core's layer spec: transformer_engine (its TE modules), local (torch modules, what
    builds without Transformer Engine), or auto: transformer_engine where Transformer Engine is
    installed, else local (as Megatron-LM's --transformer-impl defaults to TE)."""

    def __post_init__(self):
        for key in ("num_layers", "hidden_size", "num_attention_heads", "seq_length",
                    "mock_vocab_size"):
            positive(f"model.{key}", getattr(self, key))
        for key in ("vocab_size", "ffn_hidden_size", "num_query_groups", "kv_channels",
                    "rotary_base"):
            size_or_null(f"model.{key}", getattr(self, key))
        for key in ("vocab_size", "mock_vocab_size"):
            if getattr(self, key) == 1:  # every target is token 0: the loss is 0 from step 1
                raise ConfigError(f"model.{key}=1 leaves nothing to predict (one token); "
                                  f"set model.{key} to 2 or more")
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"model.hidden_size={self.hidden_size} is not divisible by "
                f"model.num_attention_heads={self.num_attention_heads}; "
                "pick sizes where heads divide hidden_size, or set model.kv_channels"
            )
        groups = self.num_query_groups
        if groups is not None and self.num_attention_heads % groups:
            raise ConfigError(
                f"model.num_query_groups={groups} must divide "
                f"model.num_attention_heads={self.num_attention_heads}; set a divisor or null"
            )
        for key in ("init_method_std", "norm_epsilon"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be > 0; set a small "
                                  "positive number")
        for key in ("hidden_dropout", "attention_dropout"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"model.{key}={getattr(self, key)} must lie in [0, 1); set a "
                                  "probability like 0.1, or 0 for none")
        self._check_rope()
        self._check_offloading()
        self.moe.check_layers(self.num_layers)
        self.recompute.check_layers(self.num_layers, self.moe)

    def _check_offloading(self) -> None:
        """megatron-core's TransformerConfig rules for cpu_offloading (transformer_config.py)."""
        n = self.cpu_offloading_num_layers
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < self.num_layers:
            raise ConfigError(
                f"model.cpu_offloading_num_layers={n} must be a whole number from 0 to "
                f"model.num_layers-1={self.num_layers - 1} (megatron-core offloads fewer layers "
                "than the model has); set it in that range, or 0 for none")
        if n and self.recompute.granularity is not None:
            raise ConfigError(
                f"model.cpu_offloading_num_layers={n} cannot be combined with "
                f"model.recompute.granularity={RecomputeGranularity(self.recompute.granularity).value}"
                " (megatron-core refuses CPU offloading with recomputation); set "
                "model.recompute.granularity=null, or model.cpu_offloading_num_layers=0")

    def _check_rope(self) -> None:
        rope = PositionEmbedding(self.position_embedding) == PositionEmbedding.rope
        if self.rope_scaling_factor is not None and not self.rope_scaling_factor > 0:
            raise ConfigError(f"model.rope_scaling_factor={self.rope_scaling_factor} must be "
                              "> 0; set a positive factor (Llama 3.1: 8) or null")
        percent = self.rotary_percent
        if percent is not None and not 0 < percent <= 1:
            raise ConfigError(f"model.rotary_percent={percent} must be in (0, 1]; set a "
                              "fraction like 0.5, or null for 1")
        rotating = int(self.head_channels * (percent or 1.0))
        if rope and rotating % 2:
            raise ConfigError(
                f"model.position_embedding=rope rotates channel pairs, and {rotating} channels "
                f"per head rotate (kv_channels {self.head_channels} x rotary_percent "
                f"{percent or 1.0}); pick sizes that give an even number")

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def ffn_size(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def head_channels(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def expert_ffn_size(self) -> int:
        return self.moe.ffn_hidden_size or self.ffn_size

    def padded_vocab_size(self, tensor_parallel_size: int) -> int:
        if self.vocab_size is None:
            raise ValueError("model.vocab_size is resolved (launcher.preflight.check.with_vocab) before it is used")
        multiple = 128 * tensor_parallel_size
        return -(-self.vocab_size // multiple) * multiple


@dataclass
class ParallelConfig:
    """Model-parallel sizes; data-parallel size is derived: world / (tp x pp x cp)."""

    tensor_model_parallel_size: int = 1
    """Tensor-parallel size."""
    pipeline_model_parallel_size: int = 1
    """Pipeline-parallel size."""
    context_parallel_size: int = 1
    """Context-parallel size."""
    expert_model_parallel_size: int = 1
    """Expert-parallel size: each MoE layer's experts are split over this many data-parallel
    ranks, and tokens travel to them (model.moe.token_dispatcher)."""

    def __post_init__(self):
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                    "context_parallel_size", "expert_model_parallel_size"):
            positive(f"parallel.{key}", getattr(self, key))
        pp = self.pipeline_model_parallel_size
        if pp > 1:
            raise ConfigError(
                f"parallel.pipeline_model_parallel_size={pp} cannot run with Megatron-FSDP: "
                "megatron-core 0.19.2 builds its device mesh from data x tensor parallel ranks "
                "only (mcore_fsdp_adapter.py), so pipeline stages cannot be sharded; set "
                "parallel.pipeline_model_parallel_size=1 and use data or tensor parallelism")

    @property
    def model_parallel_size(self) -> int:
        return (self.tensor_model_parallel_size * self.pipeline_model_parallel_size
                * self.context_parallel_size)


@dataclass
class FsdpConfig:
    """Megatron-FSDP (megatron-core DistributedDataParallelConfig with use_megatron_fsdp=True)."""

    sharding_strategy: ShardingStrategy = ShardingStrategy.optim_grads_params
    """What is sharded across data-parallel ranks: no_shard | optim | optim_grads | optim_grads_params."""
    prefetch_first_param_group: bool = True
    """All-gather the first parameter group in start_param_sync, before the forward loop
    (megatron-core fsdp_all_gather_in_start_param_sync)."""
    overlap_grad_reduce: bool = True
    """Overlap gradient reduce-scatter with backward."""
    overlap_param_gather: bool = True
    """Overlap parameter all-gather with forward."""
    double_buffer: bool = False
    """Persistent double buffers for the gathered parameters of two FSDP units
    (fsdp_double_buffer); needs optim_grads_params (other strategies gather no FSDP units)."""
    bucket_size: Optional[int] = None
    """Elements per bucket of the parameters outside the FSDP units (Megatron-LM's
    --ddp-bucket-size): decides the first parameter group, the bucket that holds the word
    embeddings (what else fits under the size joins them: position embeddings, the final norm,
    an untied output layer); a transformer layer is always one group. null, as Megatron-LM's
    get_model resolves it: max(4e7, 1e6 x the data-parallel size) with
    fsdp.overlap_grad_reduce (Llama-3 8B: the embeddings alone), else one bucket."""
    num_buckets: Optional[int] = None
    """Megatron-LM's --ddp-num-buckets: the bucket size is the model's parameters (this rank's)
    divided by this; null: fsdp.bucket_size decides. Only one of the two may be set."""
    suggested_communication_unit_size: Optional[int] = None
    """Elements M-FSDP communicates at once: an all-gather prefetches the next buckets until
    half of this much is on its way, and the reduce-scatter queue holds this much. null, as
    Megatron-LM: megatron-core's default, twice the mean layer bounded by 1e9 elements: at least
    1e9 in 0.19.2 (every bucket of most models is prefetched with the first), at most 1e9 on
    Megatron-LM's main."""
    nccl_ub: bool = False
    """NCCL user-buffer registration of the FSDP buffers (GPU only; needs fsdp.double_buffer=true,
    which Megatron-LM turns on silently and the launcher asks for instead). Registration is
    megatron-core's automatic one (each allocation re-registers the pool); Megatron-LM instead
    registers by hand after the first step (fsdp_manual_registration), from its own loop."""
    main_params_dtype: FsdpDtype = FsdpDtype.fp32
    """Dtype of the main (optimizer) weights (megatron_fsdp_main_params_dtype); auto: the model's
    own weights serve. fp32, as Megatron-LM."""
    main_grads_dtype: FsdpDtype = FsdpDtype.auto
    """Dtype of the main gradient buffer (megatron_fsdp_main_grads_dtype); auto: the model
    parameters' dtype, as Megatron-LM."""
    grad_comm_dtype: FsdpDtype = FsdpDtype.auto
    """Dtype of the gradient reduce-scatter (megatron_fsdp_grad_comm_dtype); auto: the main
    gradients' dtype, as Megatron-LM."""
    num_distributed_optimizer_instances: int = 1
    """HSDP: split the data-parallel ranks into this many groups; sharding_strategy applies
    inside a group, outer_dp_sharding_strategy across them (megatron-core's hybrid sharding,
    DeepSeek-V3's recipe: 4). 1: plain FSDP over every data-parallel rank."""
    outer_dp_sharding_strategy: OuterSharding = OuterSharding.no_shard
    """HSDP across the groups: no_shard (each group holds a full replica) | optim (the optimizer
    state is sharded across groups too; needs optim_grads_params inside)."""

    def __post_init__(self):
        for key in ("bucket_size", "num_buckets", "suggested_communication_unit_size"):
            size_or_null(f"fsdp.{key}", getattr(self, key))
        if self.bucket_size is not None and self.num_buckets is not None:
            raise ConfigError(
                f"fsdp.bucket_size={self.bucket_size} and fsdp.num_buckets={self.num_buckets} "
                "both size the buckets (Megatron-LM refuses both flags); set one of them to null")
        strategy = ShardingStrategy(self.sharding_strategy)
        # Megatron-FSDP forces these on for the sharded strategies; refuse instead of rewriting.
        if strategy == ShardingStrategy.optim_grads_params and not self.overlap_param_gather:
            raise ConfigError(
                "fsdp.overlap_param_gather=false is not possible with "
                "fsdp.sharding_strategy=optim_grads_params (Megatron-FSDP forces it on); "
                "set fsdp.overlap_param_gather=true"
            )
        sharded_grads = (ShardingStrategy.optim_grads, ShardingStrategy.optim_grads_params)
        if strategy in sharded_grads and not self.overlap_grad_reduce:
            raise ConfigError(
                f"fsdp.overlap_grad_reduce=false is not possible with "
                f"fsdp.sharding_strategy={strategy.value} (Megatron-FSDP forces it on); "
                "set fsdp.overlap_grad_reduce=true"
            )
        if self.prefetch_first_param_group and strategy == ShardingStrategy.no_shard:
            raise ConfigError(
                "fsdp.prefetch_first_param_group=true has no effect with "
                "fsdp.sharding_strategy=no_shard (nothing is gathered); "
                "set fsdp.prefetch_first_param_group=false"
            )
        if self.prefetch_first_param_group and not self.overlap_param_gather:
            raise ConfigError(
                "fsdp.prefetch_first_param_group=true has no effect with "
                "fsdp.overlap_param_gather=false; set fsdp.prefetch_first_param_group=false "
                "or fsdp.overlap_param_gather=true"
            )
        self._check_buffers(strategy)
        self._check_hybrid(strategy)

    def _check_hybrid(self, strategy: ShardingStrategy) -> None:
        positive("fsdp.num_distributed_optimizer_instances",
                 self.num_distributed_optimizer_instances)
        outer = OuterSharding(self.outer_dp_sharding_strategy)
        if outer == OuterSharding.no_shard:
            return
        if strategy != ShardingStrategy.optim_grads_params:
            raise ConfigError(
                f"fsdp.outer_dp_sharding_strategy={outer.value} needs "
                "fsdp.sharding_strategy=optim_grads_params inside each group (Megatron-FSDP's "
                f"fully_shard.py refuses {strategy.value}); set "
                "fsdp.sharding_strategy=optim_grads_params, or fsdp.outer_dp_sharding_strategy="
                "no_shard")

    def _check_buffers(self, strategy: ShardingStrategy) -> None:
        for key in ("bucket_size", "suggested_communication_unit_size"):
            if getattr(self, key) is not None:
                positive(f"fsdp.{key}", getattr(self, key))


@dataclass
class CudaGraphConfig:
    """CUDA graphs (megatron-core TransformerConfig cuda_graph_*)."""

    impl: CudaGraphImpl = CudaGraphImpl.none
    """none | local | transformer_engine | full_iteration (cuda_graph_impl)."""
    modules: List[CudaGraphModule] = field(default_factory=list)
    """Per-layer graph scope (cuda_graph_modules); empty means the whole layer."""
    warmup_steps: int = 3
    """Eager steps before capture (cuda_graph_warmup_steps)."""

    def __post_init__(self):
        impl = CudaGraphImpl(self.impl)
        if self.warmup_steps < 0:
            raise ConfigError(
                f"cuda_graph.warmup_steps={self.warmup_steps} must be >= 0; set 0 or more"
            )
        if impl == CudaGraphImpl.full_iteration and self.modules:
            names = ",".join(CudaGraphModule(m).value for m in self.modules)
            raise ConfigError(
                f"cuda_graph.modules=[{names}] must be empty with cuda_graph.impl=full_iteration "
                "(it captures the whole iteration); set cuda_graph.modules=[]"
            )
        if impl in PER_LAYER_GRAPHS:
            raise ConfigError(
                f"cuda_graph.impl={impl.value} (per-layer graphs) is not supported with "
                "Megatron-FSDP in megatron-core yet; set cuda_graph.impl=full_iteration or none"
            )

    @property
    def enabled(self) -> bool:
        return CudaGraphImpl(self.impl) != CudaGraphImpl.none
