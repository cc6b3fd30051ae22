"""A run that starts from a Hugging Face model (train.init_hf), checked before any rank: the
folder holds a config.json this run's model section matches, key by key, and safetensors files;
the parallel layout is one the weight loader splits (no tensor parallelism); safetensors is
installed (the `hf` extra)."""

import importlib.util
from dataclasses import asdict
from pathlib import Path

from launcher.config import Config, ConfigError
from launcher.config.hf import INSTALL, check_model


def check_init_hf(cfg: Config) -> None:
    folder = cfg.train.init_hf
    if folder is None:
        return
    if importlib.util.find_spec("safetensors") is None:
        raise ConfigError(f"train.init_hf={folder} reads safetensors files, and safetensors is "
                          f"not installed; run {INSTALL}")
    model = {k: getattr(v, "value", v) for k, v in asdict(cfg.model).items()}
    model["moe"] = {k: getattr(v, "value", v) for k, v in model["moe"].items()}
    check_model(model, folder, cfg.model.seq_length)
    if not list(Path(folder).glob("*.safetensors")):
        raise ConfigError(f"train.init_hf={folder} holds no *.safetensors file; point it at a "
                          "Hugging Face model folder saved with safetensors")
    tp = cfg.parallel.tensor_model_parallel_size
    if tp > 1:
        raise ConfigError(f"parallel.tensor_model_parallel_size={tp} cannot start from "
                          f"train.init_hf: the loader gives each rank whole tensors; set "
                          "parallel.tensor_model_parallel_size=1 (Megatron-FSDP shards them)")
