"""`runtime.dry_run=true`: what a run would be, without importing torch or starting a rank.

Parameter count, model FLOPs and tokens per optimizer step, and an estimate of memory per GPU
for each Megatron-FSDP sharding strategy. Arithmetic only: numbers in, numbers out.

Parameters: megatron-core's GPTModel with the local layer spec (learned absolute position
embeddings, biases on every linear layer, LayerNorm with a bias or RMSNorm without, and an
output layer of its own: the launcher builds GPTModel with its default,
share_embeddings_and_output_weights=False).

Memory per GPU, as Megatron-FSDP holds it (dp = data-parallel size):
- model weights: 2 bytes/parameter in bf16, 4 in fp32; sharded by optim_grads_params;
- main (fp32) parameters: 4 bytes/parameter in bf16 (in fp32 the weights are the main ones);
- gradients (fp32 main grads): 4 bytes/parameter; sharded by optim_grads and up;
- Adam moments: 8 bytes/parameter; main parameters and moments sharded by optim and up;
- activations of one microbatch (no recomputation, unfused attention), per layer
  s*b*h*(34 + 5*a*s/h) bytes in 16-bit (Korthikanti et al. 2022, table 2), twice in fp32,
  plus the fp32 logits s*b*V*4, of which the loss keeps a copy.
A sharded strategy also holds the unsharded weights of the layers in flight; that is left out.
"""

from launcher.config import Activation, Config, Normalization, Precision, ShardingStrategy
from launcher.run.metrics import flops_per_step

MIB = 2**20


def num_parameters(cfg: Config) -> int:
    m = cfg.model
    h, ffn, s = m.hidden_size, m.ffn_size, m.seq_length
    kv = h // m.num_attention_heads
    q, k = kv * m.num_attention_heads, kv * m.query_groups
    norm = 2 * h if m.normalization == Normalization.LayerNorm else h
    gates = 2 if m.activation == Activation.swiglu else 1
    layer = (norm + h * (q + 2 * k) + (q + 2 * k) + q * h + h
             + norm + h * ffn * gates + ffn * gates + ffn * h + h)
    vocab = m.padded_vocab_size(cfg.parallel.tensor_model_parallel_size)
    return 2 * vocab * h + s * h + m.num_layers * layer + norm  # word embeddings, output layer


def memory_per_gpu(cfg: Config, dp: int) -> dict:
    """{strategy: {part: bytes}} for one GPU (model parallelism leaves the sizes undivided: the
    launcher's recipes use tp = pp = cp = 1)."""
    params = num_parameters(cfg)
    bf16 = cfg.train.precision == Precision.bf16
    parts = {"weights": params * (2 if bf16 else 4), "main_params": params * 4 if bf16 else 0,
             "gradients": params * 4, "optimizer": params * 8}
    sharded = {ShardingStrategy.no_shard: (),
               ShardingStrategy.optim: ("main_params", "optimizer"),
               ShardingStrategy.optim_grads: ("main_params", "optimizer", "gradients"),
               ShardingStrategy.optim_grads_params: ("main_params", "optimizer", "gradients",
                                                     "weights")}
    acts = activation_bytes(cfg)
    return {strategy.value: {**{p: (b / dp if p in which else b) for p, b in parts.items()},
                             "activations": acts}
            for strategy, which in sharded.items()}


def activation_bytes(cfg: Config) -> float:
    m, b = cfg.model, cfg.train.micro_batch_size
    s, h, a = m.seq_length, m.hidden_size, m.num_attention_heads
    width = 1 if cfg.train.precision == Precision.bf16 else 2
    per_layer = s * b * h * (34 + 5 * a * s / h) * width
    logits = s * b * m.padded_vocab_size(cfg.parallel.tensor_model_parallel_size) * 4 * 2
    return m.num_layers * per_layer + logits


def describe(cfg: Config, world_size: int, dp: int) -> str:
    """What `launch ... runtime.dry_run=true` prints."""
    m, t = cfg.model, cfg.train
    flops = flops_per_step(t.global_batch_size, m.seq_length, m.hidden_size, m.num_layers,
                           m.ffn_size, m.num_attention_heads, m.query_groups,
                           m.hidden_size // m.num_attention_heads,
                           m.padded_vocab_size(cfg.parallel.tensor_model_parallel_size),
                           m.activation == Activation.swiglu)
    lines = [f"[dry run] {num_parameters(cfg):,} parameters; {flops / 1e12:.4g} TFLOP and "
             f"{t.global_batch_size * m.seq_length:,} tokens per step; world {world_size}, "
             f"data-parallel {dp}, {t.precision.value}",
             "[dry run] memory per GPU (MiB): strategy, weights, main params, gradients, "
             "optimizer, activations, total"]
    for strategy, parts in memory_per_gpu(cfg, dp).items():
        mark = " <- this run" if strategy == cfg.fsdp.sharding_strategy.value else ""
        values = [parts[k] / MIB for k in ("weights", "main_params", "gradients", "optimizer",
                                           "activations")]
        lines.append(f"  {strategy:<19}" + "".join(f"{v:>10.1f}" for v in values)
                     + f"{sum(values):>10.1f}{mark}")
    lines.append("[dry run] nothing started")
    return "\n".join(lines)
