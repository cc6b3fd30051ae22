"""Prints, as JSON, the all-gather prefetch size of the real Megatron-FSDP that `launch OVERRIDES`
builds on one CPU rank ({"ag_prefetch": elements}: its suggested_AG_prefetch_size), then on the
last line its parameter groups, in the engine's order: [{"params": numel, "experts": bool,
"main_grads": the main-gradient buffer's dtype, "comm": the dtype its reduce-scatter moves (the
adapter's MixedPrecisionPolicy.grad_comm_dtype, else the group's gradient dtype:
param_and_grad_buffer.py's grad_dtype_fn)}]. Used by tests/distributed/test_predict_layout.py
and test_grad_dtypes.py; run as `python fsdp_groups.py PORT OVERRIDE...`."""

import json
import os
import sys

os.environ["CUDA_VISIBLE_DEVICES"] = ""

from launcher.run import cpu_compat, gloo  # noqa: E402

cpu_compat.activate()
gloo.use_one_worker_per_group()

import torch  # noqa: E402

from launcher.cli import compose  # noqa: E402
from launcher.run import build, rank_setup  # noqa: E402

NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def main() -> None:
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}",
                                         rank=0, world_size=1)
    cfg = compose(sys.argv[2:])
    rank_setup.init_parallel(cfg.parallel, cfg.fsdp.num_distributed_optimizer_instances,
                        cfg.train.seed, 600, graph_safe_rng=False)
    model, _, _ = build.build_all(cfg, build.run_fusions(cfg, on_cpu=True), on_cpu=True)
    comm = model.mp_policy.grad_comm_dtype
    groups = [{"params": sum(p.numel() for p in group.params), "experts": group.is_expert_param,
               "main_grads": NAMES[group.main_grad_buffer.data.dtype],
               "comm": NAMES[comm or group.grad_dtype]}
              for group in model.param_and_grad_buffer.parameter_groups]
    print(json.dumps({"ag_prefetch": model.module.suggested_AG_prefetch_size}))
    print(json.dumps(groups))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
