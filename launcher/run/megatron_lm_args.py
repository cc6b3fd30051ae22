"""The `args` a Megatron-LM checkpoint holds: written into the launcher's checkpoints so that
Megatron-LM's load_checkpoint finds what it reads back, and read from Megatron-LM's to check their
model and world against a run (megatron/training/checkpointing.py: load_checkpoint,
check_checkpoint_args)."""

import os
from typing import Optional

from launcher.config import Config, ConfigError
from launcher.preflight.fusions import Fusions
from launcher.preflight.resume import MARKER, ranks


def megatron_args(cfg: Config, fusions: Fusions, on_cpu: bool, step: int):
    """The `args` Megatron-LM saves: its own parser's reading of the flags the launcher prints
    for this run (launcher.preflight.megatron_lm), with what its training loop counts and
    validate_args derives that its load reads back (megatron/training/checkpointing.py
    load_checkpoint, check_checkpoint_args)."""
    import argparse

    import torch
    from megatron.training.arguments import add_megatron_arguments

    from launcher.preflight.megatron_lm import flags

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    args = parser.parse_args(flags(cfg, fusions, fusions.spec, on_cpu))
    p, world = cfg.parallel, torch.distributed.get_world_size()
    args.world_size, args.rank = world, 0
    args.data_parallel_size = world // (p.tensor_model_parallel_size
                                        * p.pipeline_model_parallel_size
                                        * p.context_parallel_size)
    args.padded_vocab_size = cfg.model.padded_vocab_size(p.tensor_model_parallel_size)
    args.iteration = step
    args.consumed_train_samples = step * cfg.train.global_batch_size
    args.skipped_train_samples = 0
    evals = step // cfg.train.eval_interval if cfg.train.eval_interval else 0
    args.consumed_valid_samples = evals * cfg.train.eval_iters * cfg.train.global_batch_size
    return args


def flops_per_step(cfg: Config) -> float:
    """FLOPs a step (the launcher's formula), as num_floating_point_operations_so_far adds them."""
    from launcher.estimate import flops

    padded = cfg.model.padded_vocab_size(cfg.parallel.tensor_model_parallel_size)
    return flops.flops_per_step(cfg.model, cfg.train.global_batch_size, padded)


MODEL_ARGS = (("num_layers", "num_layers"), ("hidden_size", "hidden_size"),
              ("num_attention_heads", "num_attention_heads"), ("ffn_hidden_size", "ffn_size"),
              ("kv_channels", "head_channels"), ("seq_length", "seq_length"))
"""Megatron-LM's args against the launcher's model section: a Megatron-LM checkpoint of
another model is refused naming the first that differs."""


def check_megatron_lm_args(path: Optional[str], cfg: Config, world_size: int) -> None:
    """In the launch process, before any rank starts: a Megatron-LM checkpoint's `args` (read
    without a process group) against this run, the same model and the same world, else a
    one-line ConfigError naming what differs. A launcher checkpoint (launcher.json) was checked
    by launcher.preflight.resume."""
    if not path or os.path.exists(os.path.join(path, MARKER)):
        return
    saved = saved_args(path)
    ours = {"world_size": world_size,
            "padded_vocab_size": cfg.model.padded_vocab_size(
                cfg.parallel.tensor_model_parallel_size),
            "num_experts": cfg.model.moe.num_experts,
            **{theirs: getattr(cfg.model, mine) for theirs, mine in MODEL_ARGS}}
    for name, value in ours.items():
        held = getattr(saved, name, None)
        if (value or held) and held != value:
            if name == "world_size":
                differs = f"on {ranks(held)}, and this run has {ranks(value)}"
            else:
                what = "a padded vocabulary of" if name == "padded_vocab_size" else \
                    f"--{name.replace('_', '-')}"
                differs = f"with {what} {held}, and this run has {value}"
            raise ConfigError(f"train.checkpoint.resume: {path} was saved by Megatron-LM "
                              f"{differs}; resume it with a run of the same model and world")


def saved_args(path: str):
    """The `args` a checkpoint holds, read without a process group (megatron's modules, which
    unpickling them imports, say nothing on the console: the launch process prints one line)."""
    import contextlib
    import io
    import logging
    import warnings

    import torch.distributed.checkpoint as dcp

    state = {"args": None}
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            dcp.load(state_dict=state, checkpoint_id=path, no_dist=True)
    finally:
        logging.disable(logging.NOTSET)
    return state["args"]
