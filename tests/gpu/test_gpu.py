"""GPU tier: skipped without CUDA. On a GPU machine: `.venv/bin/python -m pytest tests/gpu -m gpu`."""

import pytest
import torch

from conftest import read_run

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("prefetch,graph", [("true", "none"), ("false", "none"),
                                            ("false", "full_iteration")])
def test_gpu_cell(launch, prefetch, graph):
    proc, run_dir = launch("model=tiny", "train.steps=10", "runtime.device=cuda",
                           f"fsdp.prefetch_first_param_group={prefetch}", f"cuda_graph={graph}",
                           "logging.wandb.mode=disabled")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary, _ = read_run(run_dir)
    assert summary["backend"] == "nccl"
    assert summary["metrics"]["cuda_graph_captured"] is (graph != "none")
    assert summary["metrics"]["first_group_prefetches"] == (10 if prefetch == "true" else 0)
