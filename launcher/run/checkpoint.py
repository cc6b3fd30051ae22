"""Checkpoints in Megatron-FSDP's own format, `fsdp_dtensor`, through megatron-core, in
Megatron-LM's layout: `pretrain --load DIR --ckpt-format fsdp_dtensor` resumes the launcher's, and
the launcher resumes Megatron-LM's (train.checkpoint.resume=DIR).

What Megatron-LM does for `--ckpt-format fsdp_dtensor` (megatron/training/checkpointing.py:
generate_state_dict, preprocess_fsdp_dtensor_state_dict, torch.distributed.checkpoint save/load,
then the model, optimizer and scheduler load_state_dict): every rank writes its own shards
(DCP), rank-parallel, under the same keys (args, iteration, checkpoint_version, model, optimizer,
opt_param_scheduler, rng_state, num_floating_point_operations_so_far). `args` is the run as
Megatron-LM's parser reads the flags `runtime.print_megatron_lm=true` prints, with what its loop
counts (consumed samples, world size). A checkpoint is complete or absent: the ranks write into
`<dir>/.incomplete-iter_NNNNNNN`, and rank 0 renames it to `iter_NNNNNNN` only after every rank
has finished and `launcher.json` (the step, the model section, the world) is written atomically,
then writes `latest_checkpointed_iteration.txt`, as Megatron-LM does after its save.

`Checkpoints` is a run's side of it: the folder it saves into, what it saved there and what it
resumed from. The checks that need no torch (which checkpoint to resume, is it complete and of
this model, can the folder be written) are launcher.preflight.resume's, run in the `launch`
process; a Megatron-LM checkpoint's model and world are checked from its args in the `launch`
process too, before any rank starts (launcher.run.megatron_lm_args).
"""

import os
import shutil

from typing import Callable, List, Optional

from launcher.config import Config
from launcher.files import write_text_atomic
from launcher.preflight.resume import MARKER, TRACKER, checkpoint_dir, is_legacy, iter_dir, \
    vars_of
from launcher.run.megatron_lm_args import flops_per_step

FORMAT = "fsdp_dtensor"
SCHEDULER_COUNTS = ("lr_warmup_steps", "num_steps", "lr_decay_steps", "wd_incr_steps")
"""The scheduler's counts, in samples since checkpoints took Megatron-LM's layout (in steps in
an earlier launcher's step_NNNNNNN checkpoints)."""


class Checkpoints:
    """A run's checkpoints of its model, optimizer and scheduler: the `folder` it saves into
    (train.checkpoint.dir, else the run's `checkpoints`), the checkpoints it `saved` there, and
    the one it `resumed_from`. Rank 0 says each on the console."""

    def __init__(self, cfg: Config, run_dir: str, rank: int, parts: tuple,
                 args_at: Callable[[int], object]):
        """`parts`: (model, optimizer, scheduler); `args_at(step)`: Megatron-LM's args at a step
        (megatron_args)."""
        self.cfg, self.args_at = cfg, args_at
        self.folder, self.rank = checkpoint_dir(cfg.train.checkpoint, run_dir), rank
        self.parts = parts
        self.saved: List[str] = []
        self.resumed_from: Optional[str] = None

    def save(self, step: int) -> None:
        """Collective: every rank calls it."""
        os.makedirs(self.folder, exist_ok=True)
        extra = {"args": self.args_at(step),
                 "num_floating_point_operations_so_far": step * flops_per_step(self.cfg)}
        path = save(self.folder, step, self.parts, self.cfg, extra)
        self.saved.append(path)
        if self.rank == 0:
            print(f"[launch] checkpoint: {path}", flush=True)

    def resume(self, path: Optional[str]) -> int:
        """Collective. The step `path` holds, restored (0 without a checkpoint to resume)."""
        self.resumed_from = path
        if not path:
            return 0
        step = load(path, self.parts, self.cfg.train.global_batch_size)
        if self.rank == 0:
            print(f"[launch] resumed from {path}: continuing at step {step + 1}", flush=True)
        return step


def save(folder: str, step: int, parts: tuple, cfg: Config, extra: dict) -> str:
    """Collective: every rank calls it. Returns the checkpoint's directory. `parts`: (model,
    optimizer, scheduler); `extra`: the keys
    Megatron-LM saves beside the launcher's (args, num_floating_point_operations_so_far)."""
    import torch
    import torch.distributed.checkpoint as dcp

    from launcher.files import write_json_atomic

    model, optimizer, scheduler = parts
    rank = torch.distributed.get_rank()
    final = iter_dir(folder, step)
    partial = os.path.join(folder, f".incomplete-iter_{step:07d}")
    if rank == 0:
        shutil.rmtree(partial, ignore_errors=True)  # left by a run killed while saving
        os.makedirs(partial)
    torch.distributed.barrier()
    state = prepare(dict(state_dict(model, optimizer, scheduler, step, loading=False), **extra),
                    model, optimizer)
    try:
        # DCP gathers every rank's write result: a rank that fails fails them all alike.
        dcp.save(state_dict=state, storage_writer=dcp.FileSystemWriter(partial))
        torch.distributed.barrier()  # every rank has written its shards
        if rank == 0:
            write_json_atomic(os.path.join(partial, MARKER), {
                "step": step, "format": FORMAT, "model": vars_of(cfg.model),
                "world_size": torch.distributed.get_world_size()})
            if os.path.isdir(final):  # a checkpoint of a run that went this far before
                shutil.rmtree(final)
            os.replace(partial, final)
            fsync_dir(folder)
            write_text_atomic(os.path.join(folder, TRACKER), str(step))
    except (OSError, dcp.api.CheckpointException) as err:
        raise CheckpointError(f"train.checkpoint: step {step} could not be written to {folder} "
                              f"({os_reason(err)}); free space there or set train.checkpoint.dir "
                              "to a disk with room (no partial checkpoint is visible)") from err
    torch.distributed.barrier()
    return final


class CheckpointError(RuntimeError):
    """A checkpoint that could not be written; the run stops, the last complete one stays."""


def os_reason(err: Exception) -> str:
    """The operating system's words for a failed write (DCP wraps them per rank)."""
    found = [err, *getattr(err, "failures", {}).values()]  # DCP: rank -> (exception, traceback)
    for candidate in found:
        candidate = candidate[0] if isinstance(candidate, tuple) else candidate
        for inner in (candidate, getattr(candidate, "__cause__", None),
                      getattr(candidate, "exception", None)):
            if isinstance(inner, OSError):
                return inner.strerror or str(inner)
    return str(err).strip().splitlines()[0]


def load(path: str, parts: tuple, global_batch_size: int) -> int:
    """Collective. Restores model, optimizer, scheduler and RNG; returns the saved step. An
    earlier launcher's checkpoint (step_NNNNNNN) counted the scheduler in steps: its counts are
    converted to samples, as this run's scheduler counts."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    model, optimizer, scheduler = parts
    state = state_dict(model, optimizer, scheduler, 0, loading=True)
    model_state, optimizer_state = dict(state["model"]), dict(state["optimizer"])
    state = prepare(state, model, optimizer)
    dcp.load_state_dict(state_dict=state, storage_reader=dcp.FileSystemReader(path),
                        planner=DefaultLoadPlanner(allow_partial_load=False))
    # DCP fills the fp32 main parameters in place; the engine's load_state_dict post-hook copies
    # them into the model weights (the adapter's own would add a second `module.` prefix).
    result = model.module.load_state_dict(module_paths(model.module, model_state), strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("._extra_state")]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"checkpoint {path} does not fit the model: missing {missing[:3]}, "
                           f"unexpected {result.unexpected_keys[:3]}")
    optimizer.load_state_dict(optimizer_state)
    saved = dict(state["opt_param_scheduler"])
    if is_legacy(path):
        saved.update({k: saved[k] * global_batch_size for k in SCHEDULER_COUNTS})
    kept = schedule_kept(scheduler, saved, global_batch_size)
    scheduler.load_state_dict(saved)
    if kept and torch.distributed.get_rank() == 0:
        print(f"[launch] the learning-rate schedule continues as {path} saved it: {kept}",
              flush=True)
    set_rng_state(state["rng_state"])
    return int(state["iteration"])


SCHEDULE = {"lr_decay_steps": "decay over", "lr_warmup_steps": "warmup over",
            "max_lr": "train.lr", "min_lr": "train.min_lr", "lr_decay_style": "train.lr_schedule"}


def schedule_kept(scheduler, saved: dict, global_batch_size: int) -> str:
    """What of this run's schedule the checkpoint's replaces ("" for nothing): megatron-core's
    scheduler keeps a checkpoint's values by default (use_checkpoint_opt_param_scheduler), so a
    resume that raises train.steps goes on decaying over the saved run's steps; said, not
    silent."""
    said = []
    for key, name in SCHEDULE.items():
        ours, theirs = getattr(scheduler, key), saved.get(key)
        if theirs is None or ours == theirs:
            continue
        if key.endswith("_steps"):
            said.append(f"{name} {theirs // global_batch_size} steps, not "
                        f"{ours // global_batch_size}")
        else:
            said.append(f"{name}={theirs}, not {ours}")
    return "; ".join(said)


def module_paths(engine, model_state: dict) -> dict:
    """The model state keyed as torch's load_state_dict walks the engine's modules. A bf16 GPT is
    wrapped in Float16Module, whose state_dict hands out its child's keys without its own `module.`
    level, while loading walks every level: `module.X` is saved, `module.module.X` is loaded
    (Megatron-Bridge met the same, its PRs #3397 and #3436)."""
    from megatron.core.transformer.module import Float16Module

    if not isinstance(engine.module, Float16Module):
        return model_state
    return {f"module.{key}": value for key, value in model_state.items()}


def state_dict(model, optimizer, scheduler, step: int, loading: bool) -> dict:
    """Megatron-LM's generate_state_dict for fsdp_dtensor (iteration, model, optimizer,
    scheduler, RNG, in its layout)."""
    from megatron.core import parallel_state

    metadata = {"distrib_optim_sharding_type": FORMAT, "singleton_local_shards": False,
                "chained_optim_avoid_prefix": True,
                "dp_cp_group": parallel_state.get_data_parallel_group(with_context_parallel=True)}
    state = {"checkpoint_version": 3.0, "iteration": step,
             "model": model.module.state_dict_for_save_checkpoint()}
    state["optimizer"] = optimizer.sharded_state_dict(state, is_loading=loading,
                                                      metadata=metadata)
    state["opt_param_scheduler"] = scheduler.state_dict()
    state["rng_state"] = rng_state()
    return state


def prepare(state: dict, model, optimizer) -> dict:
    """Megatron-LM's preprocess_fsdp_dtensor_state_dict (megatron/training/checkpointing.py),
    after filling the optimizer state that ranks lack (see fill_missing_optimizer_state). With
    experts, each rank's local expert keys (`local_experts.0` on every expert-parallel rank)
    become their global indices, else the ranks' experts would overwrite each other's."""
    from megatron.core.distributed.fsdp.src.megatron_fsdp.uneven_dtensor import (
        preprocess_state_dict_for_uneven_dtensor,
    )
    from megatron.core.transformer.fsdp_dtensor_checkpoint import (
        handle_experts_in_state_dict, handle_fp8_extra_state_case, handle_gdn_in_state_dict,
    )

    engine = model.module
    state = dict(state, optimizer=fill_missing_optimizer_state(optimizer, state["optimizer"]))
    handle_fp8_extra_state_case(state["model"])  # drops the `._extra_state` (None) entries
    if model.config.gated_linear_unit:
        state["model"], state["optimizer"] = split_swiglu(model, state)
    state["model"], state["optimizer"] = handle_gdn_in_state_dict(
        engine, state["model"], state["optimizer"])
    if model.config.num_moe_experts:
        state["model"] = handle_experts_in_state_dict(state["model"],
                                                      model.config.num_moe_experts)
    preprocess_state_dict_for_uneven_dtensor(state)  # collective: all_gather_object per DTensor
    return state


def split_swiglu(model, state: dict) -> tuple:
    """megatron-core's handle_swiglu_in_state_dict: linear_fc1 split into its _w and _v halves,
    in the model and the optimizer state. It finds a model key's parameter at `module.{key}` of
    the module it is given, and an optimizer key's at the key less its first `module.`: both
    resolve from the engine under a bf16 GPT's Float16Module, which adds no level to the keys
    (module_paths); an fp32 GPT has no such level, and its model keys resolve from the wrapper
    (the engine's parent) while its optimizer keys resolve from the engine."""
    from megatron.core.transformer.fsdp_dtensor_checkpoint import handle_swiglu_in_state_dict
    from megatron.core.transformer.module import Float16Module

    engine = model.module
    if isinstance(engine.module, Float16Module):
        return handle_swiglu_in_state_dict(engine, state["model"], state["optimizer"])
    model_state, _ = handle_swiglu_in_state_dict(model, state["model"], None)
    _, optimizer_state = handle_swiglu_in_state_dict(engine, {}, state["optimizer"])
    return model_state, optimizer_state


def fill_missing_optimizer_state(optimizer, optimizer_state: dict) -> dict:
    """An empty DTensor for each (parameter, Adam state) a rank has none of.

    The DistributedOptimizer keeps no Adam state for a parameter whose local shard is empty
    (M-FSDP gives it grad=None), so ranks would hold different sets of DTensors and the
    per-DTensor collectives of preprocess_state_dict_for_uneven_dtensor would fall out of step:
    a hang (Megatron-LM issue #4910, open). megatron-core applies this same fix on its
    fully_shard path (megatron_fsdp/fully_shard.py,
    preprocess_optimizer_state_dict_for_uneven_dtensor). Empty shards write no data. Returns a
    copy; the optimizer's own state dict is left as it was."""
    import torch
    from torch.distributed.tensor import DTensor

    keys = {k for st in optimizer_state["state"].values() for k, v in st.items()
            if isinstance(v, DTensor)}
    everyone = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, sorted(keys))
    keys = sorted({k for ks in everyone for k in ks})
    filled = dict(optimizer_state, state=dict(optimizer_state["state"]))
    for group in optimizer.optimizer.param_groups:
        for param in group["params"]:
            name = optimizer._param_name(param)
            if name in filled["state"] or not isinstance(param, DTensor):
                continue
            filled["state"][name] = {k: DTensor.from_local(
                torch.empty_like(param._local_tensor), device_mesh=param.device_mesh,
                placements=param.placements, shape=param.shape, stride=param.stride())
                for k in keys}
    return filled


def rng_state() -> dict:
    """Every RNG a step draws from, in Megatron-LM's fsdp_dtensor layout. The tracker's states are
    stored as tensors whether or not they are graph-safe generators (a CUDA-graph run's), so a
    checkpoint loads into a run with or without graphs (set_rng_state converts them back)."""
    import random

    import numpy as np
    import torch
    from megatron.core import parallel_state, tensor_parallel

    state = {"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
             "torch_rng_state": torch.get_rng_state(),
             "cuda_rng_state": torch.cuda.get_rng_state(),
             "rng_tracker_states": tracker_states_to_save(
                 tensor_parallel.get_cuda_rng_tracker().get_states())}
    key = (f"({parallel_state.get_pipeline_model_parallel_rank()}, "
           f"{parallel_state.get_tensor_model_parallel_rank()})")
    return {key: [state]}


def set_rng_state(saved: dict) -> None:
    """As Megatron-LM's load_checkpoint (checkpointing.py): the tracker's states converted to
    graph-safe generators when the tracker is graph-safe."""
    import random

    import numpy as np
    import torch
    from megatron.core import tensor_parallel

    state = next(iter(saved.values()))[0]
    random.setstate(state["random_rng_state"])
    np.random.set_state(state["np_rng_state"])
    torch.set_rng_state(state["torch_rng_state"])
    torch.cuda.set_rng_state(state["cuda_rng_state"])
    tracker = tensor_parallel.get_cuda_rng_tracker()
    graph_safe = tensor_parallel.is_graph_safe_cuda_rng_tracker(tracker)
    tracker.set_states(tracker_states_to_load(state["rng_tracker_states"], graph_safe))


def tracker_states_to_save(states: dict) -> dict:
    """The RNG tracker's states as tensors (graph-safe generators converted)."""
    from megatron.core import tensor_parallel

    return {name: tensor_parallel.convert_cuda_rng_state(value, to_graphable=False)
            for name, value in states.items()}


def tracker_states_to_load(states: dict, graph_safe: bool) -> dict:
    """Saved tracker states as the running tracker holds them: generators when it is graph-safe."""
    from megatron.core import tensor_parallel

    return {name: tensor_parallel.convert_cuda_rng_state(value, to_graphable=graph_safe)
            for name, value in states.items()}


def fsync_dir(folder: str) -> None:
    """The rename is durable once the directory entry is on disk."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
