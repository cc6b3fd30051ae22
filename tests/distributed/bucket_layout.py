"""Prints, as JSON, Megatron-FSDP's parameter groups of a full-size recipe on both sides, built
on the meta device (no weights in memory) in a world of WORLD ranks that torch's fake process
group stands for (collectives do nothing; group sizes are real):
- launcher: the GPT the launcher builds (launcher.run.build.gpt_model) and the DDP config it
  hands Megatron-FSDP (build.ddp_config, then build.resolve_bucket_size);
- megatron_lm: the GPT Megatron-LM builds from the flags the launcher prints (parse_args,
  validate_args, the tokenizer's padded vocabulary, gpt_config_from_args, GPTModelBuilder, in
  Float16Module with --bf16) and the DDP config get_model hands Megatron-FSDP
  (get_megatron_ddp_config, then resolve_ddp_bucket_size; megatron/training/training.py).
Each side's groups are megatron-core's own grouping of that model (megatron_fsdp's
_get_parameter_groups, with the bucketing policy MegatronFSDP builds from the DDP config):
[{"params": numel, "experts": bool}] in the engine's order, and each side's whole DDP config as
handed to Megatron-FSDP ({field: repr}).
Used by tests/distributed/test_bucket_layout.py: `python bucket_layout.py CASES`, CASES a JSON
list of [world, [override, ...]]; one JSON line per case.
"""

import json
import os
import sys
import types

os.environ["CUDA_VISIBLE_DEVICES"] = ""

from launcher.run import cpu_compat  # noqa: E402

cpu_compat.activate()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

from launcher.cli import compose  # noqa: E402
from launcher.config import ShardingStrategy  # noqa: E402
from launcher.run import build, rank_setup
from launcher.preflight import megatron_lm  # noqa: E402


def groups_of(module, ddp) -> list:
    """megatron-core's grouping of `module` under `ddp`, as MegatronFSDP asks for it (the mcore
    adapter's FSDP units: TransformerLayer, MoETransformerLayer, MambaLayer under
    optim_grads_params, none otherwise)."""
    from megatron.core.distributed.fsdp.mcore_fsdp_adapter import (
        MambaLayer, MoETransformerLayer, TransformerLayer,
    )
    from megatron.core.distributed.fsdp.src.megatron_fsdp.param_and_grad_buffer import (
        BucketingPolicy, _get_parameter_groups,
    )

    strategy = ddp.data_parallel_sharding_strategy
    units = ([TransformerLayer, MoETransformerLayer, MambaLayer]
             if strategy == ShardingStrategy.optim_grads_params.value else [])
    policy = BucketingPolicy(suggested_bucket_size=ddp.bucket_size, fsdp_unit_modules=units,
                             data_parallel_sharding_strategy=strategy)
    groups = _get_parameter_groups(module, policy, {})[0]
    return [{"params": sum(p.numel() for p in g.params), "experts": g.is_expert_param}
            for g in groups]


def launcher_side(cfg) -> dict:
    fusions = build.run_fusions(cfg, on_cpu=True)
    config = build.transformer_config(cfg.model, cfg.parallel, cfg.cuda_graph, cfg.train,
                                      fusions, on_cpu=True)
    with torch.device("meta"):
        gpt = build.gpt_model(cfg.model, cfg.parallel, config)
    ddp = build.ddp_config(cfg.fsdp, cfg.cuda_graph, cfg.train, on_cpu=True)
    build.resolve_bucket_size(ddp, gpt)
    return {"ddp": as_text(ddp), "groups": groups_of(gpt, ddp)}


def as_text(ddp) -> dict:
    import dataclasses

    return {f.name: repr(getattr(ddp, f.name)) for f in dataclasses.fields(ddp)}


def megatron_lm_side(cfg, world: int) -> dict:
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
    from megatron.core.transformer.module import Float16Module
    from megatron.training.argument_utils import gpt_config_from_args
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.models.gpt import GPTModelBuilder
    from megatron.training.training import get_megatron_ddp_config, resolve_ddp_bucket_size

    flags = megatron_lm.flags(cfg, build.run_fusions(cfg, on_cpu=True),
                              build.layer_spec(cfg.model), on_cpu=True)
    os.environ.update(WORLD_SIZE=str(world), RANK="0")
    sys.argv = ["pretrain_gpt.py", *flags]
    args = parse_args()
    validate_args(args)
    build_tokenizer(args)  # sets args.padded_vocab_size, as pretrain's initialisation does
    pg_collection = ProcessGroupCollection.use_mpu_process_groups()
    model_config = gpt_config_from_args(args)
    with torch.device("meta"):
        gpt = GPTModelBuilder(model_config).build_model(pg_collection)
    if args.bf16:
        gpt = Float16Module(model_config.transformer, gpt)
    ddp = get_megatron_ddp_config(args)
    ddp.bucket_size = resolve_ddp_bucket_size(ddp, pg_collection.dp_cp, ddp.overlap_grad_reduce,
                                              sum(p.nelement() for p in gpt.parameters()))
    return {"ddp": as_text(ddp), "groups": groups_of(gpt, ddp)}


def one_case(world: int, overrides: list) -> dict:
    from megatron.core import parallel_state

    cfg = compose(overrides)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    p = cfg.parallel
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=p.tensor_model_parallel_size,
        pipeline_model_parallel_size=p.pipeline_model_parallel_size,
        context_parallel_size=p.context_parallel_size,
        expert_model_parallel_size=p.expert_model_parallel_size,
        num_distributed_optimizer_instances=cfg.fsdp.num_distributed_optimizer_instances,
        create_gloo_process_groups=False)  # gloo cannot run over the fake store
    rank_setup.seed_rngs(cfg.train.seed, graph_safe_rng=False)
    try:
        return {"launcher": launcher_side(cfg), "megatron_lm": megatron_lm_side(cfg, world)}
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def main() -> None:
    # validate_args asks the device's architecture with Megatron-FSDP: the Hopper the recipes
    # name (as tests/integration/test_megatron_lm_configs.py); both sides see the same
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(
        major=9, minor=0, name="sm_90", total_memory=80 << 30, multi_processor_count=132)
    for world, overrides in json.loads(sys.argv[1]):
        print(json.dumps(one_case(world, overrides)), flush=True)


if __name__ == "__main__":
    main()
