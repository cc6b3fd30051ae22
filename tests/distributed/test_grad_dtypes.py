"""One gradient dtype: what the dry run's time model and memory table assume
(launcher.estimate.memory.gradient_dtypes) against the real Megatron-FSDP the build hands the same
config to, on one CPU rank: each parameter group's main-gradient buffer and the dtype its
reduce-scatter moves. bf16 weights keep and reduce bf16 gradients unless fsdp.main_grads_dtype
or fsdp.grad_comm_dtype say otherwise; Megatron-LM's grad_reduce_in_fp32 (which the build sets,
as Megatron-LM does) does not reach Megatron-FSDP in megatron-core 0.19.2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import compose
from launcher.estimate.memory import gradient_dtypes
from launcher.run.spawn import free_port

SCRIPT = Path(__file__).with_name("fsdp_groups.py")
LLAMA = ["+recipe=llama3_8b_tiny_cpu", "runtime.nproc_per_node=1"]


@pytest.mark.parametrize("overrides", [[], ["fsdp.main_grads_dtype=fp32"],
                                       ["fsdp.grad_comm_dtype=fp32"]],
                         ids=["auto", "main-fp32", "comm-fp32"])
def test_the_estimates_gradient_dtypes_are_the_engines(overrides):
    built = subprocess.run([sys.executable, str(SCRIPT), str(free_port()), *LLAMA, *overrides],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    engine = [{"main_grads": g["main_grads"], "comm": g["comm"]}
              for g in json.loads(built.stdout.strip().splitlines()[-1])]
    dtypes = gradient_dtypes(compose([*LLAMA, *overrides]))
    assert engine == [{"main_grads": dtypes.main.value, "comm": dtypes.comm.value}] * len(engine)
    assert len(engine) >= 2  # the embeddings and the layers
