"""Hugging Face Llama / Qwen3-MoE weights in and out of megatron-core's GPTModel (local spec).

The mapping follows Megatron-Bridge's param mappings (src/megatron/bridge/models/conversion/
param_mapping.py: QKVMapping, GatedMLPMapping; models/llama, models/qwen): q, k and v are
interleaved per query group into linear_qkv; gate and up are stacked into linear_fc1 (swiglu);
the word embeddings and an untied lm_head are padded to megatron's padded vocabulary (zero rows)
and cut back on the way out. No rotary permutation: Hugging Face's Llama checkpoints already
use the rotate-half layout megatron's rope applies. `load` runs on each rank before the
Megatron-FSDP wrap (launcher.run.build); `to_hf` serves `launch-hf export`
(launcher.run.hf_export).
"""

import json
from pathlib import Path
from typing import Callable, Dict

import torch

from launcher.config import ModelConfig
from launcher.config.hf import INSTALL

Tensors = Dict[str, torch.Tensor]


def qkv_in(q, k, v, groups: int, head_dim: int) -> torch.Tensor:
    """[q; k; v] (Hugging Face) -> megatron's linear_qkv: per query group, its queries, its key
    and its value."""
    hidden = q.shape[-1]
    return torch.cat([q.reshape(groups, -1, hidden), k.reshape(groups, head_dim, hidden),
                      v.reshape(groups, head_dim, hidden)], dim=1).reshape(-1, hidden)


def qkv_out(qkv, groups: int, head_dim: int):
    hidden = qkv.shape[-1]
    per_group = qkv.reshape(groups, -1, hidden)
    queries = per_group.shape[1] - 2 * head_dim
    q, k, v = per_group.split([queries, head_dim, head_dim], dim=1)
    return q.reshape(-1, hidden), k.reshape(-1, hidden), v.reshape(-1, hidden)


def pad_rows(weight: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.cat([weight, weight.new_zeros(rows - weight.shape[0], weight.shape[1])])


def mlp_names(model: ModelConfig, layer: int) -> Dict[str, str]:
    """{megatron key: Hugging Face key} of one layer's MLP weights (fc1 from gate and up)."""
    hf, mg = f"model.layers.{layer}.mlp", f"decoder.layers.{layer}.mlp"
    if not model.moe.pattern(model.num_layers)[layer]:
        return {f"{mg}.linear_fc1.weight": f"{hf}.*_proj.weight",
                f"{mg}.linear_fc2.weight": f"{hf}.down_proj.weight"}
    names = {f"{mg}.router.weight": f"{hf}.gate.weight"}
    for e in range(model.moe.num_experts):
        expert, hf_expert = f"{mg}.experts.local_experts.{e}", f"{hf}.experts.{e}"
        names[f"{expert}.linear_fc1.weight"] = f"{hf_expert}.*_proj.weight"
        names[f"{expert}.linear_fc2.weight"] = f"{hf_expert}.down_proj.weight"
    return names


def names(model: ModelConfig) -> Dict[str, str]:
    """{megatron key: Hugging Face key} of every weight; qkv and fc1 name a `*` that stands for
    their parts (q/k/v, gate/up)."""
    out = {"embedding.word_embeddings.weight": "model.embed_tokens.weight",
           "decoder.final_layernorm.weight": "model.norm.weight"}
    if model.untie_embeddings:
        out["output_layer.weight"] = "lm_head.weight"
    for i in range(model.num_layers):
        hf, mg = f"model.layers.{i}", f"decoder.layers.{i}"
        out[f"{mg}.input_layernorm.weight"] = f"{hf}.input_layernorm.weight"
        out[f"{mg}.pre_mlp_layernorm.weight"] = f"{hf}.post_attention_layernorm.weight"
        out[f"{mg}.self_attention.linear_qkv.weight"] = f"{hf}.self_attn.*_proj.weight"
        out[f"{mg}.self_attention.linear_proj.weight"] = f"{hf}.self_attn.o_proj.weight"
        if model.qk_layernorm:
            out[f"{mg}.self_attention.q_layernorm.weight"] = f"{hf}.self_attn.q_norm.weight"
            out[f"{mg}.self_attention.k_layernorm.weight"] = f"{hf}.self_attn.k_norm.weight"
        out.update(mlp_names(model, i))
    return out


def to_megatron(get: Callable[[str], torch.Tensor], key: str, hf: str, model: ModelConfig,
                padded_vocab: int) -> torch.Tensor:
    """Megatron's tensor `key` from Hugging Face's `hf` (read by `get`; `*`: its parts)."""
    if key.endswith("linear_qkv.weight"):
        q, k, v = (get(hf.replace("*", part)) for part in "qkv")
        return qkv_in(q, k, v, model.query_groups, model.head_channels)
    if "*" in hf:
        return torch.cat([get(hf.replace("*", "gate")), get(hf.replace("*", "up"))])
    if key in ("embedding.word_embeddings.weight", "output_layer.weight"):
        return pad_rows(get(hf), padded_vocab)
    return get(hf)


def to_hf(state: Tensors, model: ModelConfig) -> Tensors:
    """Hugging Face's tensors from megatron's (every key of `names`, unsharded, global experts)."""
    out = {}
    for key, hf in names(model).items():
        weight = state[key]
        if key.endswith("linear_qkv.weight"):
            for part, tensor in zip("qkv", qkv_out(weight, model.query_groups,
                                                   model.head_channels)):
                out[hf.replace("*", part)] = tensor.contiguous()
        elif "*" in hf:
            gate, up = weight.chunk(2)
            out[hf.replace("*", "gate")] = gate.contiguous()
            out[hf.replace("*", "up")] = up.contiguous()
        elif key in ("embedding.word_embeddings.weight", "output_layer.weight"):
            out[hf] = weight[: model.vocab_size].contiguous()
        else:
            out[hf] = weight
    return out


def reader(folder: str) -> Callable[[str], torch.Tensor]:
    """get(name) -> that tensor of the folder's safetensors files (as saved: transformers 5
    writes Qwen3-MoE's experts one by one, whatever it fuses in memory)."""
    try:
        from safetensors import safe_open
    except ImportError:
        raise SystemExit(f"[launch] train.init_hf needs safetensors; run {INSTALL}") from None
    index = Path(folder, "model.safetensors.index.json")
    if index.is_file():
        where = {k: Path(folder, f) for k, f in json.loads(index.read_text())["weight_map"].items()}
    else:
        where = {}
        for path in sorted(Path(folder).glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as f:
                where.update({k: path for k in f.keys()})
    opened = {}

    def get(name: str) -> torch.Tensor:
        path = where[name]
        if path not in opened:
            opened[path] = safe_open(str(path), framework="pt")
        return opened[path].get_tensor(name)

    return get


def load(gpt, model: ModelConfig, folder: str, padded_vocab: int, first_expert: int) -> None:
    """Copies `folder`'s weights into the unwrapped GPT (in Float16Module or not) in place, each
    into its parameter's dtype; with expert parallelism, this rank's experts are the
    `first_expert`.. ones. Every weight of the model is filled, or the load refuses. One weight
    is read at a time: a rank holds the model and one Hugging Face tensor, not two models."""
    module = getattr(gpt, "module", gpt)  # Float16Module holds the GPT as .module
    params = {k: v for k, v in module.state_dict(keep_vars=True).items()
              if not k.endswith("_extra_state")}
    get, hf_names = reader(folder), names(model)
    with torch.no_grad():
        for key, param in params.items():
            tensor = to_megatron(get, key, hf_names[expert_global(key, first_expert)], model,
                                 padded_vocab)
            if tensor.shape != param.shape:
                raise RuntimeError(f"train.init_hf: {key} is {tuple(tensor.shape)} in {folder}, "
                                   f"{tuple(param.shape)} in the model")
            param.copy_(tensor)


def expert_global(key: str, first_expert: int) -> str:
    """`...local_experts.E...` with E this rank's local index -> the global one."""
    marker = ".local_experts."
    if marker not in key or not first_expert:
        return key
    head, tail = key.split(marker)
    index, rest = tail.split(".", 1)
    return f"{head}{marker}{int(index) + first_expert}.{rest}"
