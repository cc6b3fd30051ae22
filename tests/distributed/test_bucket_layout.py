"""Megatron-FSDP's parameter groups are Megatron-LM's, for every recipe at full size: the groups
megatron-core makes of the GPT the launcher builds, with the DDP config the launcher hands
Megatron-FSDP, against those of the GPT Megatron-LM builds from the printed flags, with the DDP
config its get_model hands it, bucket size resolved (tests/distributed/bucket_layout.py: the
meta device, torch's fake process group for the world), group by group; the two DDP configs as
handed differ only in docs/megatron_lm_parity.md's rows (the config-parity test compares them
before get_model's resolution, tests/integration/test_megatron_lm_configs.py); and the dry run's
layout (launcher.estimate.param_groups) is both.
The sharding strategies and the bucket keys (fsdp.bucket_size, fsdp.num_buckets: Megatron-LM's
--ddp-bucket-size, --ddp-num-buckets) on the recipes with experts and without."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import compose
from launcher.estimate.param_groups import parameter_groups

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).with_name("bucket_layout.py")
TABLE = Path(__file__).parents[2] / "docs" / "megatron_lm_parity.md"
# recipe and overrides: the world it is built for
CASES = {
    "gpt": 8, "gpt_1p3b_1gpu_bf16": 1, "llama3_8b": 8, "llama3_70b": 64, "moe_small": 8,
    "deepseek_v3_proxy": 128,
    "moe_small parallel.expert_model_parallel_size=8": 8,
    "moe_small fsdp.sharding_strategy=optim_grads": 8,
    "moe_small fsdp.sharding_strategy=optim": 8,
    "gpt fsdp.sharding_strategy=no_shard fsdp.prefetch_first_param_group=false": 8,
    "llama3_8b fsdp.bucket_size=600000000": 8,
    "llama3_8b fsdp.num_buckets=3": 8,
    "llama3_8b fsdp.sharding_strategy=optim fsdp.overlap_grad_reduce=false "
    "fsdp.overlap_param_gather=false fsdp.prefetch_first_param_group=false": 8,
}


def overrides(case: str) -> list:
    name, *rest = case.split()
    return [f"+recipe={name}", "cuda_graph.impl=none", *rest]


@pytest.fixture(scope="module")
def built():
    cases = [[world, overrides(case)] for case, world in CASES.items()]
    proc = subprocess.run([sys.executable, str(SCRIPT), json.dumps(cases)], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [l for l in proc.stdout.splitlines() if l.startswith('{"launcher"')]
    return dict(zip(CASES, map(json.loads, lines)))


@pytest.mark.parametrize("case", list(CASES))
def test_the_groups_are_megatron_lms_and_the_dry_runs(case, built):
    sides = built[case]
    launcher, megatron_lm = sides["launcher"], sides["megatron_lm"]
    assert launcher["ddp"]["bucket_size"] == megatron_lm["ddp"]["bucket_size"]
    listed = set(re.findall(r"^\| DistributedDataParallelConfig \| `(\w+)` \|", TABLE.read_text(),
                            flags=re.M))
    differ = {k: (v, megatron_lm["ddp"][k]) for k, v in launcher["ddp"].items()
              if v != megatron_lm["ddp"][k] and k not in listed}
    assert not differ, f"DDP fields as handed to Megatron-FSDP that differ, unlisted: {differ}"
    assert launcher["groups"] == megatron_lm["groups"]
    cfg = compose(overrides(case))
    dp_cp = CASES[case] // cfg.parallel.model_parallel_size
    predicted = [{"params": g.params, "experts": g.experts} for g in parameter_groups(cfg, dp_cp)]
    assert predicted == launcher["groups"]
