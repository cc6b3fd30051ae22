"""Each model-parallel size either runs with Megatron-FSDP on 2 CPU ranks and trains the 1-rank
model, or is refused in one line before any rank starts."""

import importlib.util

import pytest

from conftest import read_run, run_launch

pytestmark = pytest.mark.distributed

# vocab 256: padded to a multiple of 128 x tp, so tp=1 and tp=2 build the same model
COMMON = ["+recipe=tiny_cpu", "train.steps=8", "model.vocab_size=256",
          "logging.wandb.mode=disabled"]


def test_tensor_parallel_2_matches_one_rank(tmp_path):
    runs = {}
    for name, extra in (("one", []), ("tp2", ["runtime.nproc_per_node=2",
                                              "parallel.tensor_model_parallel_size=2"])):
        proc, run_dir = run_launch(tmp_path / name, *COMMON, *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = read_run(run_dir)
    (_, one), (summary, tp2) = runs["one"], runs["tp2"]
    assert summary["status"] == "ok" and summary["world_size"] == 2
    assert summary["config"]["parallel"]["tensor_model_parallel_size"] == 2
    assert [s["step"] for s in tp2] == [s["step"] for s in one]
    for a, b in zip(one, tp2):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3)
    assert tp2[-1]["loss"] < tp2[0]["loss"]


@pytest.mark.parametrize("override,message", [
    ("parallel.pipeline_model_parallel_size=2",
     "error: parallel.pipeline_model_parallel_size=2 cannot run with Megatron-FSDP: megatron-core "
     "0.19.2 builds its device mesh from data x tensor parallel ranks only (mcore_fsdp_adapter.py),"
     " so pipeline stages cannot be sharded; set parallel.pipeline_model_parallel_size=1 and use "
     "data or tensor parallelism"),
    ("parallel.context_parallel_size=2",
     "error: parallel.context_parallel_size=2 needs Transformer Engine attention "
     "(TEDotProductAttention) and Transformer Engine is not installed; install Transformer Engine "
     "or set parallel.context_parallel_size=1"),
])
@pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is not None,
                    reason="Transformer Engine is installed: context parallelism can build")
def test_refused_parallel_size_exits_2_before_any_rank(tmp_path, override, message):
    proc, run_dir = run_launch(tmp_path, *COMMON, "runtime.nproc_per_node=2", override)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [message]
    assert "Traceback" not in proc.stderr and "[launch]" not in proc.stdout  # no rank started
    assert not (run_dir / "summary.json").exists()
