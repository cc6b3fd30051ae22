"""Megatron-LM's own training loop, `megatron.training.pretrain`, on a GPT: the anchor that the
launcher's throughput and losses are compared against.

A short script of the shape of Megatron-LM's `pretrain_gpt.py` (tag core_v0.19.0, whose
megatron/training/ is the one the megatron-core 0.19.2 wheel ships): a model provider, get_batch, a
loss function, a forward step and a train/valid/test datasets provider, which as in
pretrain_gpt.py builds GPTDataset over the indexed dataset of `--data-path PREFIX` (as
`launch-prepare` writes one; blended and split by `--split` in BlendedMegatronDatasetBuilder), or
with `--mock-data` Megatron-LM's `MockGPTDataset` (no files, no network). Every argument is one
of Megatron-LM's own flags, passed unchanged to its parser, plus the one flag this script adds
(`--prefetch-first-param-group`).

A tiny model on one GPU (no Transformer Engine, no Apex):

    torchrun --standalone --nproc-per-node=1 bench/megatron_lm_loop.py \\
        --num-layers 2 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 256 \\
        --seq-length 32 --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 \\
        --train-iters 5 --lr 1e-3 --bf16 --mock-data --tokenizer-type NullTokenizer \\
        --vocab-size 128 --transformer-impl local --no-persist-layer-norm \\
        --no-gradient-accumulation-fusion --no-masked-softmax-fusion \\
        --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params \\
        --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \\
        --ckpt-format fsdp_dtensor --cuda-graph-impl none --eval-iters 0 --eval-interval 1000 \\
        --log-interval 1 --log-throughput --prefetch-first-param-group true

On a machine without CUDA the same command runs on the CPU, through the project's CPU layer
(launcher/run/cpu_compat.py, activated here only when torch.cuda.is_available() is False), given
three more flags of Megatron-LM's: `--distributed-backend gloo --use-cpu-initialization
--no-gradient-reduce-div-fusion` (gloo has no PREMUL_SUM); --bf16 works there too:

    .venv/bin/torchrun --standalone --nproc-per-node=1 bench/megatron_lm_loop.py [the flags
        above] --distributed-backend gloo --use-cpu-initialization --no-gradient-reduce-div-fusion

A launcher run's own flags (real data, its model, schedule, seed and M-FSDP settings, and those
three on a CPU) are what `launch ... runtime.print_megatron_lm=true` prints; given to this script
with the run's switch, the two train loss for loss (tests/distributed/test_megatron_lm_losses.py,
docs/megatron_lm_parity.md "Loss parity").

What the script does besides calling pretrain (nothing else is changed):
- megatron.training's initialize_megatron runs `make` in megatron/core/datasets/ to build the
  dataset helpers (initialize.py, _compile_dependencies). The wheel ships them prebuilt
  (helpers_cpp.*.so) and has no Makefile, so that `make` fails and megatron exits: the script
  imports the prebuilt module and makes compile_helpers a no-op.
- megatron.training.training.train_step is wrapped to record what it returns (each iteration's
  reduced 'lm loss' and gradient norm); the return value passes through unchanged.
- On the CPU only: the CPU layer; torch.cuda.get_device_properties answers major=9 (validate_args
  asks the device architecture with Megatron-FSDP; the CPU stands in for the H200's sm_90);
  pretrain's initialize_megatron is called with allow_no_cuda=True (it asserts CUDA otherwise);
  every gloo group gets one worker thread, as the launcher's CPU ranks (launcher/run/gloo.py: a
  heap race in torch 2.11's gloo, docs/crashes.md; no number changes); and the CPU generator's
  state is kept across two steps of pretrain that draw from it, which is what a GPU run sees
  (keeping_cpu_rng says why): megatron's JIT warm-up, set_jit_fusion_options, whose
  torch.rand(..., device="cuda") inputs come from the CPU generator under the CPU layer and would
  shift the weights built next, and building the data iterators, where each iter(DataLoader)
  draws a seed from it and would shift every dropout mask.

Flags needed without Transformer Engine and Apex, and why (megatron-core 0.19.2):
- `--transformer-impl local`: the default is transformer_engine (arguments.py).
- `--no-persist-layer-norm`: without Apex the local spec's norm is WrappedTorchNorm, which asserts
  `not config.persist_layer_norm` (megatron/core/transformer/torch_norm.py); the flag defaults on.
- `--no-gradient-accumulation-fusion`: ColumnParallelLinear raises when it is on and Apex's
  fused_weight_gradient_mlp_cuda is missing (megatron/core/tensor_parallel/layers.py).
- `--no-masked-softmax-fusion`: with bf16/fp16 FusedScaleMaskSoftmax.is_kernel_available imports
  the `scaled_masked_softmax_cuda` extension (megatron/core/fusions/fused_softmax.py).
Flags megatron.training itself requires here:
- `--ckpt-format fsdp_dtensor`: validate_args asserts it with --use-megatron-fsdp, even without
  --save (arguments.py). No checkpoint is written: pretrain saves only when --save is given.
- `--eval-iters 0` keeps validation and test off (do_valid/do_test need eval_iters > 0), and
  `--eval-interval N` (any N) must still be given: get_train_valid_test_num_samples divides by it
  (training.py; its default None raises a TypeError).
- No --tensorboard-dir and no --wandb-project: no writers are created (global_vars.py).
Not needed: --position-embedding-type (learned_absolute is the default), --disable-bias-linear (a
model choice: the bias-GeLU and bias-dropout-add fusions are torch.compile/jit, not TE or Apex),
--attention-backend (auto; the local spec uses megatron's own DotProductAttention), --no-save.

The switch: `--prefetch-first-param-group {true,false}` sets megatron-core's
`DistributedDataParallelConfig.fsdp_all_gather_in_start_param_sync` (Megatron-LM 0.19.2 has no flag
for it; see add_switch for the way it travels). Left out, megatron decides (True by default;
megatron.training sets it False under --cuda-graph-impl full_iteration), and the script prints the
value in force either way. Refused (one line, exit 2; torchrun then exits 1): `true` with
--cuda-graph-impl full_iteration, which megatron.training would silently turn False, and the flag
without --use-megatron-fsdp, where it does nothing. Also refused: neither --mock-data nor
--data-path.

Output: megatron's own log, then, as the last line on rank 0's stdout, one JSON line
{"iteration_times_s": [...], "tflops_per_gpu": [...], "loss": [...], "grad_norm": [...],
"tokens_per_iteration": B*s, "world_size": N}. `loss` and `grad_norm`, one per iteration at full
precision, are what train_step returned: the 'lm loss' it reduced (the global batch's summed token
losses over its token count, all-reduced over data-parallel ranks) and the optimizer step's
gradient norm (megatron reduces it through a float32 tensor, so it carries float32 precision).
The times and TFLOP/s are the "elapsed time per iteration (ms)" and "throughput per GPU
(TFLOP/s/GPU)" that megatron.training's training_log printed for each iteration (pass
--log-interval 1 and --log-throughput; without the latter tflops_per_gpu holds nulls). It prints
them with one decimal (0.1 ms, 0.1 TFLOP/s). Mind what it measures: training_log does not reset
its interval timer or iteration counter after iteration 1 (`is_first_iteration`), so its
iteration-2 figure is the mean of iterations 1 and 2.
"""

import argparse
import os
import re
import sys
import types
from functools import partial

import torch

ON_CPU = not torch.cuda.is_available()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ON_CPU:
    # The CPU layer must be active before megatron is imported (it is never used with CUDA).
    from launcher.run import cpu_compat, gloo

    cpu_compat.activate()
    # torch 2.11's gloo races when a group's two worker threads finish together (heap corruption:
    # docs/crashes.md); one worker per group, as the launcher's CPU ranks, changes no number
    gloo.use_one_worker_per_group()
    # validate_args asks get_device_arch_version() (torch.cuda.get_device_properties) with
    # Megatron-FSDP; the CPU stands in for the Hopper GPU (sm_90) that the anchor targets.
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(
        major=9, minor=0, name="CPU standing in for sm_90", total_memory=0, multi_processor_count=1)

import json  # noqa: E402

from megatron.core import mpu  # noqa: E402
from megatron.core.datasets.blended_megatron_dataset_builder import (  # noqa: E402
    BlendedMegatronDatasetBuilder,
)
from megatron.core.datasets.gpt_dataset import (  # noqa: E402
    GPTDataset,
    GPTDatasetConfig,
    MockGPTDataset,
)
from megatron.core.enums import ModelType  # noqa: E402
from megatron.core.parallel_state import get_context_parallel_group  # noqa: E402
from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer  # noqa: E402
from megatron.core.utils import (  # noqa: E402
    get_attr_wrapped_model,
    get_batch_on_this_cp_rank,
    get_batch_on_this_tp_rank,
)
from megatron.training import get_args, get_timers, pretrain  # noqa: E402
from megatron.training import initialize as mlm_initialize  # noqa: E402
from megatron.training import checkpointing as mlm_checkpointing  # noqa: E402
from megatron.training import training as mlm_training  # noqa: E402
from megatron.training.argument_utils import (  # noqa: E402
    gpt_config_from_args,
    pretrain_cfg_container_from_args,
)
from megatron.training.arguments import parse_and_validate_args  # noqa: E402
from megatron.training.utils import (  # noqa: E402
    get_blend_and_blend_per_split,
    is_first_or_last_pipeline_stage,
)

BATCH_KEYS = ("attention_mask", "labels", "loss_mask", "position_ids", "tokens")
PREFIX = "megatron_lm_loop"


def _true_or_false(text):
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def add_switch(parser):
    """parse_and_validate_args's extra_args_provider: the one flag this script adds.

    How it reaches the DDP config, the way megatron.training reads every DDP field: its dest is
    the DistributedDataParallelConfig field's own name, and megatron.training.training.
    get_megatron_ddp_config(args) copies each `args` attribute named like a field of
    DistributedDataParallelConfig (`for f in dataclasses.fields(...): if hasattr(args, f.name)`).
    pretrain_cfg_container_from_args calls it to build cfg.ddp, with which pretrain's model
    builder wraps the model in Megatron-FSDP. default=SUPPRESS leaves the attribute out when the
    flag is not given, so that megatron's own default and its own rewriting apply then.
    """
    group = parser.add_argument_group(title=PREFIX)
    group.add_argument(
        "--prefetch-first-param-group", dest="fsdp_all_gather_in_start_param_sync",
        type=_true_or_false, metavar="{true,false}", default=argparse.SUPPRESS,
        help="DistributedDataParallelConfig.fsdp_all_gather_in_start_param_sync: issue the first "
             "parameter bucket's all-gather in start_param_sync (Megatron-FSDP with overlapped "
             "param gather). Default: megatron's.")
    return parser


def model_provider(args):
    """The model, as Megatron-LM 0.19's pretrain_gpt.py gives it to pretrain: a GPTModelConfig
    built from the flags (gpt_config_from_args), whose builder picks the layer spec
    (get_gpt_layer_local_spec with --transformer-impl local) and wraps the GPTModel in
    Float16Module and Megatron-FSDP with cfg.ddp."""
    return gpt_config_from_args(args)


def get_batch(data_iterator, vp_stage=None):
    """One micro-batch, on this TP rank and CP rank (pretrain_gpt.py's, without SFT/packing)."""
    args = get_args()
    if not is_first_or_last_pipeline_stage(vp_stage):
        return {key: None for key in BATCH_KEYS}
    batch = {}
    if mpu.get_tensor_model_parallel_rank() == 0:
        batch = next(data_iterator)
        batch = {key: (batch[key].cuda(non_blocking=True) if batch.get(key) is not None else None)
                 for key in BATCH_KEYS}
    batch = get_batch_on_this_tp_rank(
        batch, has_cu_seqlens=False, is_hybrid_cp=False,
        create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
        broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
        broadcast_group=mpu.get_tensor_model_parallel_group(),
        cp_size=args.context_parallel_size, tp_rank=mpu.get_tensor_model_parallel_rank(),
        micro_batch_size=args.micro_batch_size, seq_length=args.seq_length,
        mtp_on_this_rank=False, pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        is_pipeline_first_stage=mpu.is_pipeline_first_stage(),
        is_pipeline_last_stage=mpu.is_pipeline_last_stage())
    return get_batch_on_this_cp_rank(batch, is_hybrid_cp=False,
                                     cp_group=get_context_parallel_group())


def loss_func(loss_mask, output_tensor):
    """Summed masked token loss, its token count, and the report pretrain logs as 'lm loss'."""
    losses = output_tensor.view(-1).float()
    loss_mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * loss_mask)
    num_tokens = loss_mask.sum().clone().detach().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.clone().detach().view(1),
                                                     num_tokens.view(1)])}


def forward_step(data_iterator, model):
    """Forward step: batch, model (which returns per-token losses given labels), loss function."""
    timers = get_timers()
    timers("batch-generator", log_level=2).start()
    batch = get_batch(data_iterator, get_attr_wrapped_model(model, "vp_stage"))
    timers("batch-generator").stop()
    output_tensor = model(batch["tokens"], batch["position_ids"], batch["attention_mask"],
                          labels=batch["labels"], loss_mask=batch["loss_mask"])
    return output_tensor, partial(loss_func, batch["loss_mask"])


def core_gpt_dataset_config_from_args(args):
    """The dataset config, as pretrain_gpt.py's core_gpt_dataset_config_from_args builds it
    (without its FIM and per-dataset-sequences options, which these runs leave off)."""
    blend, blend_per_split = get_blend_and_blend_per_split(args)
    return GPTDatasetConfig(
        random_seed=args.seed, sequence_length=args.seq_length, blend=blend,
        blend_per_split=blend_per_split, split=args.split,
        multiple_validation_sets=args.multiple_validation_sets,
        full_validation=args.full_validation,
        num_dataset_builder_threads=args.num_dataset_builder_threads,
        path_to_cache=args.data_cache_path, mmap_bin_files=args.mmap_bin_files,
        tokenizer=build_tokenizer(args), reset_position_ids=args.reset_position_ids,
        reset_attention_mask=args.reset_attention_mask, eod_mask_loss=args.eod_mask_loss,
        create_attention_mask=args.create_attention_mask_in_dataloader,
        object_storage_cache_path=args.object_storage_cache_path,
        mid_level_dataset_surplus=args.mid_level_dataset_surplus,
        allow_ambiguous_pad_tokens=args.allow_ambiguous_pad_tokens,
        fast_cache_load=args.dataloader_fast_cache_load,
        defer_npy_index_mmap=args.dataloader_defer_npy_index_mmap,
        context_parallel_size=args.context_parallel_size,
        data_parallel_size=args.data_parallel_size,
        sequence_parallel_size=args.tensor_model_parallel_size * args.sequence_parallel,
        hybrid_context_parallel=args.hybrid_context_parallel,
        inter_document_masking=args.dataloader_inter_document_masking)


def train_valid_test_datasets_provider(train_val_test_num_samples, vp_stage=None):
    """pretrain_gpt.py's: GPTDataset over --data-path (blended and split by
    BlendedMegatronDatasetBuilder), or MockGPTDataset with --mock-data; built on TP rank 0 of the
    first and last pipeline stages."""
    args = get_args()
    dataset_type = MockGPTDataset if args.mock_data else GPTDataset

    def built_on_this_rank():
        return (mpu.get_tensor_model_parallel_rank() == 0
                and is_first_or_last_pipeline_stage(vp_stage))

    return BlendedMegatronDatasetBuilder(
        dataset_type, train_val_test_num_samples, built_on_this_rank,
        core_gpt_dataset_config_from_args(args)).build()


train_valid_test_datasets_provider.is_distributed = True  # as pretrain_gpt.py sets it


class _StepRecord:
    """Stands in for megatron.training.training.train_step, which train() looks up there on each
    iteration: calls it, passes its return value through unchanged, and keeps each iteration's
    'lm loss' (what train_step reduced: the global batch's summed token losses over its token
    count, all-reduced over data-parallel ranks) and gradient norm (the optimizer step's, maxed
    over model-parallel ranks), at full precision, where training_log prints 6 digits."""

    def __init__(self, train_step):
        self.train_step, self.losses, self.grad_norms = train_step, [], []

    def __call__(self, *args, **kwargs):
        returned = self.train_step(*args, **kwargs)
        loss_reduced, grad_norm = returned[0], returned[5]
        loss = loss_reduced.get("lm loss") if loss_reduced else None  # last pipeline stage
        self.losses.append(None if loss is None else float(loss))
        self.grad_norms.append(None if grad_norm is None else float(grad_norm))
        return returned


def keeping_cpu_rng(function):
    """`function` (one of megatron.training.training's steps of pretrain) with the CPU generator's
    state kept across it: on a CPU only, for the two steps of pretrain that draw from the CPU
    generator where a GPU run draws from another generator or from one that nothing else uses.

    The CPU layer runs every kernel on the CPU, so the CPU generator is the one that initialises
    the weights (--use-cpu-initialization) and draws every dropout mask; on a GPU the dropout masks
    come from the CUDA generator and megatron's RNG tracker. Two of pretrain's steps draw from it:
    - set_jit_fusion_options, after seeding and before the model is built: its warm-up draws its
      inputs with torch.rand(..., device="cuda") and runs a dropout on them. On a GPU those draws
      come from the CUDA generator and do not shift the weights built next (a GPU build draws TP
      layers from megatron's RNG tracker, position embeddings from the CPU generator); under the
      CPU layer they come from the CPU generator, and the weights would be others. A launcher run
      on a GPU runs the same warm-up itself (launcher/run/build.py warm_up_fusions), so the CUDA
      generator is where Megatron-LM's is; on a CPU it skips it.
    - build_train_valid_test_data_iterators, after the model is built: each iter(DataLoader)
      draws its workers' base seed from the CPU generator (torch's _BaseDataLoaderIter). On a GPU
      no dropout mask comes from that generator; on a CPU every later mask would be shifted. The
      launcher reads its samples by index, with no DataLoader.
    Restoring the state after each gives a CPU run the generator that a GPU run's model build
    and dropout see."""

    def keeping(*args, **kwargs):
        state = torch.get_rng_state()
        try:
            return function(*args, **kwargs)
        finally:
            torch.set_rng_state(state)

    return keeping


def filling_missing_optimizer_state():
    """megatron.training.checkpointing's fsdp_dtensor save and load with each rank's optimizer
    state completed first, as the launcher saves (launcher/run/checkpoint.py
    fill_missing_optimizer_state): a rank whose shard of a parameter is empty keeps no Adam state
    for it, the ranks then hold different sets of DTensors, and the per-DTensor collectives of
    preprocess_state_dict_for_uneven_dtensor fall out of step and hang on 2 ranks or more
    (Megatron-LM issue #4910, open). generate_state_dict is wrapped to see the optimizer it is
    given; preprocess_fsdp_dtensor_state_dict gets the state with the empty DTensors added (a
    copy: filling the optimizer's own dict would break the load). Nothing else changes."""
    from launcher.run.checkpoint import fill_missing_optimizer_state

    seen = {}
    generate, preprocess = (mlm_checkpointing.generate_state_dict,
                            mlm_checkpointing.preprocess_fsdp_dtensor_state_dict)

    def generate_state_dict(args, model, optimizer, *rest, **kwargs):
        seen["optimizer"] = optimizer
        return generate(args, model, optimizer, *rest, **kwargs)

    def preprocess_fsdp_dtensor_state_dict(args, raw_state_dict, model):
        optimizer = seen.get("optimizer")
        if optimizer is not None and "optimizer" in raw_state_dict:
            raw_state_dict = dict(raw_state_dict, optimizer=fill_missing_optimizer_state(
                optimizer, raw_state_dict["optimizer"]))
        return preprocess(args, raw_state_dict, model)

    mlm_checkpointing.generate_state_dict = generate_state_dict
    mlm_checkpointing.preprocess_fsdp_dtensor_state_dict = preprocess_fsdp_dtensor_state_dict


class _LogTee:
    """Passes stdout through unchanged and keeps the two figures of each line megatron's
    training_log prints (print_rank_last, i.e. on the last rank): the least invasive way to take
    its own per-iteration measurement, with no change to what it runs or prints."""

    LINE = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*? elapsed time per iteration \(ms\): "
                      r"([0-9.]+) \|(?:.*? throughput per GPU \(TFLOP/s/GPU\): ([0-9.]+) \|)?")

    def __init__(self, stream):
        self.stream, self.pending, self.rows = stream, "", {}

    def write(self, text):
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            match = self.LINE.search(line)
            if match:
                tflops = float(match.group(3)) if match.group(3) is not None else None
                self.rows[int(match.group(1))] = (round(float(match.group(2)) / 1000.0, 7), tflops)
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _refuse(reason):
    print(f"{PREFIX}: refused: {reason}", file=sys.stderr, flush=True)
    sys.exit(2)


def switch_in_force(args, asked) -> str:
    """The switch's value megatron.training will use, and where it comes from."""
    effective = getattr(mlm_training.get_megatron_ddp_config(args),
                        "fsdp_all_gather_in_start_param_sync", None)
    if asked is not None:
        source = "--prefetch-first-param-group"
    elif args.cuda_graph_impl == "full_iteration" and args.use_megatron_fsdp:
        source = "set by megatron.training's get_megatron_ddp_config for full_iteration graphs"
    else:
        source = "megatron-core default"
    return f"fsdp_all_gather_in_start_param_sync={effective} ({source})"


def main():
    args = parse_and_validate_args(extra_args_provider=add_switch)
    asked = getattr(args, "fsdp_all_gather_in_start_param_sync", None)
    if asked is not None and not args.use_megatron_fsdp:
        _refuse("--prefetch-first-param-group acts only with --use-megatron-fsdp")
    if asked and args.cuda_graph_impl == "full_iteration":
        _refuse("--prefetch-first-param-group true cannot run with --cuda-graph-impl "
                "full_iteration (megatron.training's get_megatron_ddp_config would silently "
                "set it false)")
    if not args.mock_data and args.data_path is None:
        _refuse("give --mock-data, or --data-path PREFIX [--split ...] (an indexed dataset)")
    if args.rank == 0:
        print(f"{PREFIX}: {switch_in_force(args, asked)}", flush=True)

    if ON_CPU:
        # initialize_megatron asserts torch.cuda.is_available() unless allow_no_cuda; pretrain
        # passes none, so on the CPU (only there) it is called with allow_no_cuda=True.
        mlm_training.initialize_megatron = partial(mlm_initialize.initialize_megatron,
                                                   allow_no_cuda=True)
        for step in ("set_jit_fusion_options", "build_train_valid_test_data_iterators"):
            setattr(mlm_training, step, keeping_cpu_rng(getattr(mlm_training, step)))
    steps = mlm_training.train_step = _StepRecord(mlm_training.train_step)
    if args.save or args.load:
        filling_missing_optimizer_state()
    # initialize_megatron's _compile_dependencies runs `make` in megatron/core/datasets/ to build
    # helpers_cpp; the wheel ships it prebuilt and no Makefile, so that `make` fails and exits. It
    # is imported to show it loads, and the build step is skipped.
    from megatron.core.datasets import helpers_cpp  # noqa: F401
    from megatron.core.datasets import utils as dataset_utils

    dataset_utils.compile_helpers = lambda: None

    tee = _LogTee(sys.stdout)
    sys.stdout = tee
    try:
        pretrain(pretrain_cfg_container_from_args(args, model_provider(args)),
                 train_valid_test_datasets_provider, ModelType.encoder_or_decoder, forward_step)
    finally:
        sys.stdout = tee.stream

    # The last rank holds the figures (megatron prints them there); rank 0 prints the result.
    rows = [tee.rows]
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.broadcast_object_list(rows, src=torch.distributed.get_world_size() - 1)
    rows = rows[0]
    if torch.distributed.get_rank() == 0:
        iterations = sorted(rows)
        print(json.dumps({
            "iteration_times_s": [rows[i][0] for i in iterations],
            "tflops_per_gpu": [rows[i][1] for i in iterations],
            "loss": steps.losses,
            "grad_norm": steps.grad_norms,
            "tokens_per_iteration": args.global_batch_size * args.seq_length,
            "world_size": args.world_size,
        }), flush=True)


if __name__ == "__main__":
    main()
