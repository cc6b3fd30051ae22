"""`make test` on a machine with CUDA: every test module imports there. Checked here by collecting
the whole suite in a fresh interpreter whose torch.cuda.is_available() reports True (patched in
that subprocess only, for the import check: nothing runs on the pretended GPU)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

COLLECT_AS_IF_CUDA = """
import sys, pytest, torch
torch.cuda.is_available = lambda: True
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"]))
"""


def test_every_test_module_imports_where_cuda_is_available():
    proc = subprocess.run([sys.executable, "-c", COLLECT_AS_IF_CUDA], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "error" not in proc.stdout.splitlines()[-1]
    assert "tests/unit/test_mapping.py::" in proc.stdout  # imports with megatron as it is
    assert "tests/gpu/test_gpu.py::test_gpu_cell" in proc.stdout
