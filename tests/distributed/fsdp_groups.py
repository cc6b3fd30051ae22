"""Prints, as JSON, the parameter groups of the real Megatron-FSDP that `launch OVERRIDES` builds
on one CPU rank: [{"params": numel, "experts": bool}] in the engine's order. Used by
tests/distributed/test_predict_layout.py; run as `python fsdp_groups.py OVERRIDE...`."""

import json
import os
import sys

os.environ["CUDA_VISIBLE_DEVICES"] = ""

from launcher.run import cpu_compat, gloo  # noqa: E402

cpu_compat.activate()
gloo.use_one_worker_per_group()

import torch  # noqa: E402

from launcher.cli import compose  # noqa: E402
from launcher.run import build  # noqa: E402


def main() -> None:
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}",
                                         rank=0, world_size=1)
    cfg = compose(sys.argv[2:])
    build.init_parallel(cfg.parallel, cfg.fsdp.num_distributed_optimizer_instances,
                        cfg.train.seed, 600, graph_safe_rng=False)
    model, _, _ = build.build_all(cfg, on_cpu=True)
    groups = [{"params": sum(p.numel() for p in group.params), "experts": group.is_expert_param}
              for group in model.param_and_grad_buffer.parameter_groups]
    print(json.dumps(groups))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
