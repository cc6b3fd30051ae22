"""A run's settings as Megatron-LM's `pretrain_gpt.py` flags (megatron-core 0.19.2's
megatron/training/arguments.py): `launch ... runtime.print_megatron_lm=true` prints them, and the
parity tests hand them to megatron.training's own parser and builders (tests/integration/
test_megatron_lm_parity.py). No torch here.

Flags that Megatron-LM's defaults already give are left out, except the model's shape, the batch,
the schedule and the parallel sizes, which are always written. Where the launcher cannot be said
in flags, `notes` says how it travels (the switch has no flag in Megatron-LM), or how the two
differ (the launcher's mock data is not Megatron-LM's).
"""

import os
import shlex
from typing import List

from launcher.config import (
    Activation, Config, DataKind, Fp8Config, FsdpDtype, LayerSpec, Normalization, OuterSharding,
    PositionEmbedding, Precision,
)
from launcher.preflight.fusions import Fusions, Kernels, no_effect
from launcher.preflight.resume import PATTERN

# fusion key: the flag that turns it off in Megatron-LM (bias_activation: by activation)
NO_FUSION = {"masked_softmax": "--no-masked-softmax-fusion",
             "bias_dropout": "--no-bias-dropout-fusion", "rope": "--no-rope-fusion",
             "gradient_accumulation": "--no-gradient-accumulation-fusion",
             "persist_layer_norm": "--no-persist-layer-norm"}


def flags(cfg: Config, fusions: Fusions, spec: LayerSpec, on_cpu: bool) -> List[str]:
    """`cfg` (vocabulary resolved by the pre-flight's with_vocab) as Megatron-LM's flags."""
    out = (model_flags(cfg, fusions, spec) + parallel_flags(cfg) + train_flags(cfg)
           + data_flags(cfg))
    if on_cpu:  # the CPU path of bench/megatron_lm_loop.py: gloo has no PREMUL_SUM
        out += ["--distributed-backend", "gloo", "--use-cpu-initialization",
                "--no-gradient-reduce-div-fusion"]
    return [str(f) for f in out]


def model_flags(cfg: Config, fusions: Fusions, spec: LayerSpec) -> list:
    m = cfg.model
    out = ["--num-layers", m.num_layers, "--hidden-size", m.hidden_size,
           "--num-attention-heads", m.num_attention_heads, "--ffn-hidden-size", m.ffn_size,
           "--kv-channels", m.head_channels, "--seq-length", m.seq_length,
           "--max-position-embeddings", m.seq_length,
           "--transformer-impl", "transformer_engine" if spec == LayerSpec.transformer_engine
           else "local",
           "--hidden-dropout", m.hidden_dropout, "--attention-dropout", m.attention_dropout,
           "--init-method-std", m.init_method_std, "--norm-epsilon", m.norm_epsilon]
    if m.normalization != Normalization.LayerNorm:
        out += ["--normalization", m.normalization.value]
    if m.num_query_groups:
        out += ["--group-query-attention", "--num-query-groups", m.num_query_groups]
    if m.activation == Activation.swiglu:
        out.append("--swiglu")
    if m.untie_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    if not m.add_bias_linear:
        out.append("--disable-bias-linear")
    if m.qk_layernorm:
        out.append("--qk-layernorm")
    if m.attention_softmax_in_fp32:
        out.append("--attention-softmax-in-fp32")
    out += position_flags(cfg) + fusion_flags(cfg, fusions) + moe_flags(cfg) + recompute_flags(cfg)
    if m.cpu_offloading_num_layers:
        out += ["--cpu-offloading-num-layers", m.cpu_offloading_num_layers]
    return out


def position_flags(cfg: Config) -> list:
    m = cfg.model
    if m.position_embedding != PositionEmbedding.rope:
        return []
    out = ["--position-embedding-type", "rope"]
    if m.rotary_base is not None:
        out += ["--rotary-base", m.rotary_base]
    if m.rotary_percent is not None:
        out += ["--rotary-percent", m.rotary_percent]
    if m.rope_scaling:
        out.append("--use-rope-scaling")
    if m.rope_scaling_factor is not None:
        out += ["--rope-scaling-factor", m.rope_scaling_factor]
    return out


def fusion_flags(cfg: Config, fusions: Fusions) -> list:
    """The --no-... flag of each fusion the run leaves off (Megatron-LM has them all on)."""
    idle = {key for key in NO_FUSION if no_effect(key, cfg.model)}  # Megatron-LM sets them off
    out = [flag for key, flag in NO_FUSION.items() if not getattr(fusions, key) and key not in idle]
    if not fusions.bias_activation and not no_effect("bias_activation", cfg.model):
        swiglu = cfg.model.activation == Activation.swiglu
        out.append("--no-bias-swiglu-fusion" if swiglu else "--no-bias-gelu-fusion")
    return out


def moe_flags(cfg: Config) -> list:
    m, moe = cfg.model, cfg.model.moe
    if not moe.enabled:
        return []
    out = ["--num-experts", moe.num_experts, "--moe-router-topk", moe.router_topk,
           "--moe-ffn-hidden-size", m.expert_ffn_size,
           "--moe-layer-freq", str(moe.pattern(m.num_layers)).replace(" ", ""),
           "--moe-aux-loss-coeff", moe.aux_loss_coeff,
           "--moe-router-load-balancing-type", "aux_loss" if moe.aux_loss_coeff else "none",
           "--moe-token-dispatcher-type", moe.token_dispatcher.value,
           "--moe-router-score-function", moe.router_score_function.value]
    if moe.shared_expert_ffn_hidden_size:
        out += ["--moe-shared-expert-intermediate-size", moe.shared_expert_ffn_hidden_size]
    if moe.grouped_gemm:
        out.append("--moe-grouped-gemm")
    return out


def recompute_flags(cfg: Config) -> list:
    r = cfg.model.recompute
    if r.granularity is None:
        return []
    out = ["--recompute-granularity", r.granularity.value]
    if r.method is not None:
        out += ["--recompute-method", r.method.value]
    if r.num_layers is not None:
        out += ["--recompute-num-layers", r.num_layers]
    if r.modules:
        out += ["--recompute-modules", *[m.value for m in r.modules]]
    return out


def parallel_flags(cfg: Config) -> list:
    p, f, g = cfg.parallel, cfg.fsdp, cfg.cuda_graph
    out = ["--tensor-model-parallel-size", p.tensor_model_parallel_size,
           "--pipeline-model-parallel-size", p.pipeline_model_parallel_size,
           "--context-parallel-size", p.context_parallel_size,
           "--expert-model-parallel-size", p.expert_model_parallel_size,
           "--use-megatron-fsdp", "--use-distributed-optimizer", "--ckpt-format", "fsdp_dtensor",
           "--data-parallel-sharding-strategy", f.sharding_strategy.value]
    if f.overlap_grad_reduce:
        out.append("--overlap-grad-reduce")
    if f.overlap_param_gather:
        out.append("--overlap-param-gather")
    if f.double_buffer:
        out.append("--fsdp-double-buffer")
    if f.nccl_ub:
        out.append("--use-nccl-ub")
    if f.bucket_size is not None:
        out += ["--ddp-bucket-size", f.bucket_size]
    if f.num_buckets is not None:
        out += ["--ddp-num-buckets", f.num_buckets]
    if f.suggested_communication_unit_size is not None:
        out += ["--suggested-communication-unit-size", f.suggested_communication_unit_size]
    if f.main_params_dtype != FsdpDtype.fp32:
        out += ["--megatron-fsdp-main-params-dtype", f.main_params_dtype.value]
    for key, value in (("main-grads", f.main_grads_dtype), ("grad-comm", f.grad_comm_dtype)):
        if value != FsdpDtype.auto:
            out += [f"--megatron-fsdp-{key}-dtype", value.value]
    if f.num_distributed_optimizer_instances > 1:
        out += ["--num-distributed-optimizer-instances", f.num_distributed_optimizer_instances]
    if f.outer_dp_sharding_strategy != OuterSharding.no_shard:
        out += ["--outer-dp-sharding-strategy", f.outer_dp_sharding_strategy.value]
    if g.enabled:
        out += ["--cuda-graph-impl", g.impl.value, "--cuda-graph-warmup-steps", g.warmup_steps]
        if g.modules:
            out += ["--cuda-graph-modules", *[m.value for m in g.modules]]
    return out


def train_flags(cfg: Config) -> list:
    t = cfg.train
    out = ["--micro-batch-size", t.micro_batch_size, "--global-batch-size", t.global_batch_size,
           "--train-iters", t.steps, "--lr", t.lr, "--min-lr", t.min_lr,
           "--lr-decay-style", t.lr_schedule.value, "--lr-warmup-iters", t.lr_warmup_steps,
           # the launcher's scheduler needs warmup < decay, as megatron's (launcher.run.build)
           "--lr-decay-iters", max(t.steps, t.lr_warmup_steps + 1),
           "--weight-decay", t.weight_decay, "--clip-grad", t.grad_clip, "--seed", t.seed,
           "--eval-interval", t.eval_interval or t.steps, "--eval-iters",
           t.eval_iters if t.eval_interval else 0, "--log-interval", cfg.logging.interval]
    if t.precision == Precision.bf16:
        out.append("--bf16")
        if t.grad_reduce_in_bf16:
            out.append("--grad-reduce-in-bf16")
    if not t.nan_grad_check(cfg.cuda_graph.enabled):
        out.append("--no-check-for-nan-in-loss-and-grad")
    return out + fp8_flags(t.fp8) + checkpoint_flags(cfg)


def checkpoint_flags(cfg: Config) -> list:
    """train.checkpoint as --save/--save-interval and --load (the same layout both ways:
    launcher.preflight.resume); a resume path to one iter_NNNNNNN folder is its parent with
    --ckpt-step. Where train.checkpoint.dir is unset the run's own folder holds them, which is
    only known at launch: set it for the command to name it."""
    ck, out = cfg.train.checkpoint, []
    if ck.dir and ck.interval:
        out += ["--save", ck.dir, "--save-interval", ck.interval]
    if ck.resume == "auto" and ck.dir:
        out += ["--load", ck.dir]
    elif ck.resume not in (None, "auto"):
        folder = ck.resume.rstrip("/")
        step = PATTERN.fullmatch(os.path.basename(folder))
        out += (["--load", os.path.dirname(folder), "--ckpt-step", int(step.group(1))] if step
                else ["--load", folder])
    return out


def fp8_flags(fp8: Fp8Config) -> list:
    """train.fp8 as --fp8-format, --fp8-recipe (written even at its default, delayed: the recipe
    is what a reader of an FP8 command looks for) and --fp8-param-gather."""
    if not fp8.enabled:
        return []
    out = ["--fp8-format", fp8.format.value, "--fp8-recipe", fp8.recipe.value]
    if fp8.param_gather:
        out.append("--fp8-param-gather")
    return out


def data_flags(cfg: Config) -> list:
    """The data, tokenized already: NullTokenizer has the model's vocabulary (megatron-core
    0.19.2's takes --vocab-size as the whole vocabulary, its end of document the last id;
    core/tokenizers/text/libraries/null_tokenizer.py) and Megatron-LM pads it as the launcher
    does."""
    out = ["--tokenizer-type", "NullTokenizer", "--vocab-size", cfg.model.vocab_size]
    if cfg.data.kind == DataKind.indexed:
        return out + ["--data-path", *cfg.data.path.split(), "--split", cfg.data.split]
    return out + ["--mock-data"]


def notes(cfg: Config, fusions: Fusions, on_cpu: bool, kernels: Kernels) -> List[str]:
    """What the flags cannot say, and every flag chosen because of the machine it is printed for
    rather than the run's settings."""
    out = machine_notes(cfg, fusions, on_cpu, kernels)
    switch, graphs = cfg.fsdp.prefetch_first_param_group, cfg.cuda_graph.enabled
    if not switch and not graphs:
        out.append(
            "fsdp.prefetch_first_param_group=false: pretrain_gpt.py has no flag for megatron-core"
            "'s fsdp_all_gather_in_start_param_sync (default true; megatron.training sets it false "
            "only under --cuda-graph-impl full_iteration). Run bench/megatron_lm_loop.py of this "
            "repository with these flags and --prefetch-first-param-group false: it sets the field "
            "the way get_megatron_ddp_config reads every DDP field, from args.")
    if cfg.data.kind == DataKind.mock:
        out.append("data=mock: the launcher's mock sequences are not Megatron-LM's --mock-data "
                   "(MockGPTDataset); the same text trains alike only with data=indexed.")
    return out


def machine_notes(cfg: Config, fusions: Fusions, on_cpu: bool, kernels: Kernels) -> List[str]:
    """Which machine the command is for, and each flag that comes from it."""
    if on_cpu:
        out = ["for a CPU: --distributed-backend gloo --use-cpu-initialization "
               "--no-gradient-reduce-div-fusion (gloo has no PREMUL_SUM); runtime.device=cuda "
               "or cluster.gpu=NAME prints a GPU cluster's command"]
    elif kernels == Kernels.ngc():
        out = ["for a GPU cluster with NVIDIA's PyTorch container (Transformer Engine, Apex "
               "and its CUDA extensions; cluster.kernels=ngc): cluster.kernels=installed prints "
               "the command for what is installed here"
               + (f" (no {Kernels.here().lacks()})" if Kernels.here().lacks() else "")]
    else:
        out = ["for GPUs with what is installed here (cluster.kernels=installed)"
               + (f": no {kernels.lacks()}" if kernels.lacks() else "")]
    if cfg.model.layer_spec == LayerSpec.auto and fusions.spec == LayerSpec.local:
        out.append("--transformer-impl local: model.layer_spec=auto and no Transformer Engine "
                   "for this command; model.layer_spec=transformer_engine where it is installed")
    for key, why in fusions.off:
        flag = NO_FUSION.get(key) or ("--no-bias-swiglu-fusion"
                                      if cfg.model.activation == Activation.swiglu
                                      else "--no-bias-gelu-fusion")
        out.append(f"{flag}: {why}")
    return out


def command(cfg: Config, fusions: Fusions, on_cpu: bool, kernels: Kernels,
            per_node: int, nodes: int) -> str:
    """The shell command: torchrun over pretrain_gpt.py, one flag per line, and the notes."""
    args = flags(cfg, fusions, fusions.spec, on_cpu)
    lines, current = [], []
    for arg in args:
        if arg.startswith("--") and current:
            lines.append(" ".join(shlex.quote(a) for a in current))
            current = []
        current.append(arg)
    lines.append(" ".join(shlex.quote(a) for a in current))
    # several nodes: torchrun on each, with its rendezvous flags (--rdzv-endpoint, --rdzv-id)
    head = ("torchrun " + (f"--nnodes {nodes} " if nodes > 1 else "")
            + f"--nproc-per-node {per_node} pretrain_gpt.py")
    text = " \\\n    ".join([head] + lines)
    return "\n".join([f"# {note}" for note in notes(cfg, fusions, on_cpu, kernels)] + [text])


def for_config(cfg: Config, world, gpu: bool) -> str:
    """`runtime.print_megatron_lm=true`: the run as Megatron-LM's command line in `world` (the
    pre-flight's): a GPU cluster's where `gpu` (launcher.run.device.targets_gpu: runtime.device=cuda,
    a GPU's cluster.gpu, or a GPU found here; with the kernels cluster.kernels says it has), else
    this CPU's."""
    from launcher.preflight import fusions
    from launcher.preflight.support import layer_spec, target_kernels

    kernels = target_kernels(cfg, gpu)
    resolved = fusions.resolve(cfg.model, layer_spec(cfg.model, kernels), cfg.train.precision,
                               not gpu, kernels)
    return command(cfg, resolved, not gpu, kernels, world.per_node, world.nodes)
