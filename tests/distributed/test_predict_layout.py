"""The time model's buckets are Megatron-FSDP's: the dry run's parameter groups
(launcher.estimate.param_groups.parameter_groups, arithmetic on the config) against the groups of the real
engine built from the same config on one CPU rank, for the CPU twins of the GPT-2, Llama-3 and
MoE recipes, with Megatron-LM's default bucket size and with one that splits the parameters
outside the layers; and, with fsdp units, the all-gather prefetch window (half the communication
unit the installed megatron-core infers: launcher.estimate.communication_unit)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import compose
from launcher.config import ShardingStrategy, load_hardware
from launcher.estimate.param_groups import parameter_groups
from launcher.estimate.predict import prefetch_elements, units_of
from launcher.estimate.topology import Cluster
from launcher.run.spawn import free_port

SCRIPT = Path(__file__).with_name("fsdp_groups.py")
TWINS = {
    "gpt2": ["+recipe=gpt", "model=tiny", "runtime.device=cpu"],
    "llama3": ["+recipe=llama3_8b_tiny_cpu", "runtime.nproc_per_node=1"],
    "moe": ["+recipe=moe_small_tiny_cpu", "runtime.nproc_per_node=1",
            "parallel.expert_model_parallel_size=1"],
    # 1,000 elements a bucket: the word embeddings, then the final norm with the output layer
    "llama3 split": ["+recipe=llama3_8b_tiny_cpu", "runtime.nproc_per_node=1",
                     "fsdp.bucket_size=1000"],
    "moe split, no units": ["+recipe=moe_small_tiny_cpu", "runtime.nproc_per_node=1",
                            "parallel.expert_model_parallel_size=1", "fsdp.bucket_size=5000",
                            "fsdp.sharding_strategy=optim_grads"],
}


@pytest.mark.parametrize("twin", list(TWINS))
def test_the_predicted_groups_are_the_engines(twin):
    built = subprocess.run([sys.executable, str(SCRIPT), str(free_port()), *TWINS[twin]],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    prefetch, groups = built.stdout.strip().splitlines()[-2:]
    engine = [{"params": g["params"], "experts": g["experts"]} for g in json.loads(groups)]
    cfg = compose(TWINS[twin])
    predicted = [{"params": g.params, "experts": g.experts} for g in parameter_groups(cfg, 1)]
    assert predicted == engine
    if cfg.fsdp.sharding_strategy == ShardingStrategy.optim_grads_params:  # else one unit
        units = units_of(cfg, Cluster(load_hardware("cpu_2core"), 1, 1), cfg.train.matmul_dtype)
        assert json.loads(prefetch)["ag_prefetch"] == prefetch_elements(cfg, units)
