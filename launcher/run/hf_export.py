"""`launch-hf export`: a launcher checkpoint as a Hugging Face model folder (config.json and
model.safetensors) that transformers' AutoModelForCausalLM.from_pretrained loads.

The checkpoint is read offline, in this one process, with no process group: DCP's no-dist load of
its `model.*` entries into whole tensors (Megatron-FSDP's shards, every rank's, put together), then
launcher.run.hf_weights maps them back. Its `launcher.json` says which model it holds.
"""

import json
from pathlib import Path

import torch

from launcher.config import ConfigError, ModelConfig
from launcher.config.hf import INSTALL, hf_config
from launcher.preflight.resume import MARKER  # launcher.json
from launcher.run.hf_weights import to_hf


def find_checkpoint(path: str) -> Path:
    """`path` if it is a checkpoint, else the newest complete one in it (by the step its
    launcher.json holds, whatever the folders are called)."""
    folder = Path(path)
    if (folder / MARKER).is_file():
        return folder
    found = [p for p in folder.glob("*") if folder.is_dir()
             and (p / MARKER).is_file() and (p / ".metadata").is_file()]
    if not found:
        raise ConfigError(f"{path} is not a launcher checkpoint and holds none (no {MARKER}); "
                          "point at a checkpoint folder or the train.checkpoint.dir holding it")
    return max(found, key=lambda p: json.loads((p / MARKER).read_text())["step"])


def model_config(section: dict) -> ModelConfig:
    from omegaconf import OmegaConf

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), section))


def read_model_state(checkpoint: Path) -> dict:
    """Every `model.*` tensor of the DCP checkpoint, whole, keyed as the GPT names them."""
    import torch.distributed.checkpoint as dcp

    reader = dcp.FileSystemReader(str(checkpoint))
    entries = {k: m for k, m in reader.read_metadata().state_dict_metadata.items()
               if k.startswith("model.") and hasattr(m, "size")}
    state = {k: torch.empty(m.size, dtype=m.properties.dtype) for k, m in entries.items()}
    dcp.load(state, storage_reader=reader, no_dist=True)
    out = {}
    for key, tensor in state.items():
        if key.endswith(".weight_v"):
            continue
        if key.endswith(".weight_w"):  # megatron's swiglu split (handle_swiglu_in_state_dict)
            tensor = torch.cat([tensor, state[key[: -len("_w")] + "_v"]])
            key = key[: -len("_w")]
        out[key.removeprefix("model.").removeprefix("module.")] = tensor  # Float16Module's level
    return out


def export(checkpoint: str, out: str) -> Path:
    """Writes out/config.json and out/model.safetensors; returns the checkpoint read."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise ConfigError(f"launch-hf export writes safetensors, which is not installed; run "
                          f"{INSTALL}") from None
    found = find_checkpoint(checkpoint)
    section = json.loads((found / MARKER).read_text())["model"]
    config = hf_config(section)
    tensors = to_hf(read_model_state(found), model_config(section))
    dtype = {t.dtype for t in tensors.values()}.pop()
    config["dtype"] = str(dtype).removeprefix("torch.")
    Path(out).mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(Path(out, "model.safetensors")), metadata={"format": "pt"})
    Path(out, "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return found
