"""The wheels the GPU check carries: only what the lent machine's image lacks, and few enough to
travel with the checkout in one device call (64 MiB in all)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "gpu" / "wheels.py")
gpu_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_wheels)


def test_what_the_image_has_is_not_carried_and_the_rest_is():
    found = gpu_wheels.carried(gpu_wheels.image_packages())
    for kept in ("torch", "numpy", "tensorboard", "matplotlib", "tokenizers", "einops", "pyyaml",
                 "protobuf", "requests", "triton", "nvidia-nccl-cu13"):
        assert kept not in found
    for needed in ("mfsdp-launcher", "megatron-core", "hydra-core", "omegaconf",
                   "antlr4-python3-runtime", "wandb", "pydantic", "pydantic-core", "submitit",
                   "hydra-submitit-launcher"):
        assert needed in found
    assert found["megatron-core"] == "0.19.2" and found["wandb"] == "0.31.0"


def test_the_wheels_fit_one_device_call():
    found = gpu_wheels.carried(gpu_wheels.image_packages())
    size = gpu_wheels.estimated_bytes(found)
    assert 10 * 2**20 < size <= gpu_wheels.LIMIT_BYTES == 48 * 2**20, f"{size / 2**20:.1f} MiB"
