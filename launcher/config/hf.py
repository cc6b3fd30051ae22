"""A Hugging Face model's `config.json` as the launcher's model section, and back (torch-free).

Two families: `llama` (Llama-3 and its kin) and `qwen3_moe`. `model_section` reads the file and
returns the keys of the model section it decides, or refuses, in one ConfigError line naming
the Hugging Face field, whatever megatron-core's local spec cannot express; `check_model` holds
a run's model section to the file (train.init_hf); `hf_config` writes a model section back as
a `config.json`. The facts follow Megatron-Bridge's Llama and Qwen3-MoE bridges
(src/megatron/bridge/models/llama/llama_bridge.py, models/qwen/qwen3_moe_bridge.py).
"""

import json
from pathlib import Path

from launcher.config.error import ConfigError
from launcher.config.values import dotted

FAMILIES = ("llama", "qwen3_moe")
# megatron-core's Llama-3.1 rope scaling (rotary_pos_embedding.py _apply_scaling) fixes all but
# the factor: a config.json with other values cannot be expressed
LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
INSTALL = "pip install '.[hf]'"
# training choices config.json suggests, not the weights' shape: a run may set its own
TRAINING_KEYS = ("hidden_dropout", "attention_dropout", "init_method_std", "moe.aux_loss_coeff")


def read_config(hf_dir: str) -> dict:
    path = Path(hf_dir, "config.json")
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist; point at a Hugging Face model folder "
                          "(config.json and *.safetensors)") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is unreadable ({err}); point at a Hugging Face model "
                          "folder") from None


def model_section(hf_dir: str) -> dict:
    """The model section (launcher keys, `moe` nested) `hf_dir/config.json` decides."""
    hf = read_config(hf_dir)
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise ConfigError(f"{hf_dir}/config.json: model_type={family} is not supported; the "
                          f"launcher imports {', '.join(FAMILIES)}")
    refuse(hf, "hidden_act", lambda v: v == "silu", "silu (swiglu)")
    refuse(hf, "attention_bias", lambda v: not v, "false (megatron's local spec has no "
           "bias on the attention alone)")
    refuse(hf, "mlp_bias", lambda v: not v, "false")
    refuse(hf, "use_sliding_window", lambda v: not v, "false (sliding windows need "
           "Transformer Engine attention)")
    heads = hf["num_attention_heads"]
    section = dict(
        num_layers=hf["num_hidden_layers"], hidden_size=hf["hidden_size"],
        num_attention_heads=heads, num_query_groups=hf.get("num_key_value_heads") or heads,
        ffn_hidden_size=hf["intermediate_size"], vocab_size=hf["vocab_size"],
        kv_channels=hf.get("head_dim") or hf["hidden_size"] // heads,
        activation="swiglu", normalization="RMSNorm", position_embedding="rope",
        untie_embeddings=not hf.get("tie_word_embeddings", False), add_bias_linear=False,
        qk_layernorm=family == "qwen3_moe", hidden_dropout=0.0,
        attention_dropout=float(hf.get("attention_dropout", 0.0)),
        init_method_std=float(hf.get("initializer_range", 0.02)),
        norm_epsilon=float(hf["rms_norm_eps"]), rotary_percent=None,
        **rope_keys(hf), moe=moe_keys(hf) if family == "qwen3_moe" else {"num_experts": None},
    )
    return section


def refuse(hf: dict, field: str, ok, want: str) -> None:
    if field in hf and not ok(hf[field]):
        raise ConfigError(f"config.json: {field}={json.dumps(hf[field])} cannot be expressed by "
                          f"megatron-core's local spec; the launcher imports {field}={want}")


def rope_keys(hf: dict) -> dict:
    """rotary_base and Llama-3.1's rope scaling, from transformers 5's rope_parameters (or the
    older rope_theta / rope_scaling fields)."""
    rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    if float(theta) != int(theta):
        raise ConfigError(f"config.json: rope_theta={theta} is not a whole number, which "
                          "model.rotary_base must be")
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return dict(rotary_base=int(theta), rope_scaling=False, rope_scaling_factor=None)
    if kind != "llama3":
        raise ConfigError(f"config.json: rope_type={kind} is not supported; megatron-core "
                          "expresses default and llama3 rope only")
    for key, want in LLAMA3_ROPE.items():
        if float(rope.get(key, want)) != want:
            raise ConfigError(f"config.json: rope {key}={rope[key]} cannot be expressed; "
                              f"megatron-core's llama3 rope scaling fixes {key}={want}")
    return dict(rotary_base=int(theta), rope_scaling=True,
                rope_scaling_factor=float(rope.get("factor", 8.0)))


def moe_keys(hf: dict) -> dict:
    """Qwen3-MoE's experts as model.moe: its layer pattern from decoder_sparse_step and
    mlp_only_layers (as transformers' Qwen3MoeDecoderLayer chooses), no shared expert."""
    if not hf.get("norm_topk_prob", False):
        raise ConfigError("config.json: norm_topk_prob=false cannot be expressed; megatron-core's "
                          "softmax router (without pre-softmax, which the launcher does not "
                          "expose) renormalises the top-k weights, as norm_topk_prob=true")
    step, dense = hf.get("decoder_sparse_step", 1), set(hf.get("mlp_only_layers") or [])
    layers = hf["num_hidden_layers"]
    pattern = [int(i not in dense and (i + 1) % step == 0) for i in range(layers)]
    experts = hf.get("num_experts", hf.get("num_local_experts"))  # transformers 5 saves the latter
    return dict(num_experts=experts, router_topk=hf["num_experts_per_tok"],
                ffn_hidden_size=hf["moe_intermediate_size"], shared_expert_ffn_hidden_size=None,
                layer_freq=[] if all(pattern) else pattern, router_score_function="softmax",
                aux_loss_coeff=float(hf.get("router_aux_loss_coef", 0.001)))


def check_model(model: dict, hf_dir: str, seq_length: int) -> None:
    """A run's model section (asdict, enums as values) against `hf_dir`'s config.json: the first
    key that differs is refused, naming both, before any rank starts."""
    hf, want = read_config(hf_dir), model_section(hf_dir)
    for key, value in dotted(want).items():
        if key in TRAINING_KEYS:
            continue
        have = dotted(model).get(key)
        if have != value:
            raise ConfigError(f"train.init_hf: {hf_dir}/config.json gives model.{key}={value}, "
                              f"this run has model.{key}={have}; set model.{key}={value} (or "
                              "import the model again: launch-hf import)")
    limit = hf.get("max_position_embeddings")
    if limit and seq_length > limit:
        raise ConfigError(f"model.seq_length={seq_length} is beyond {hf_dir}'s "
                          f"max_position_embeddings={limit}; set model.seq_length <= {limit}")


def hf_config(model: dict) -> dict:
    """A model section (as a checkpoint's launcher.json holds it) as a Hugging Face config.json:
    qwen3_moe with experts, else llama; what neither can hold is refused naming the key."""
    moe = model.get("moe") or {}
    family = "qwen3_moe" if moe.get("num_experts") else "llama"
    wants = dict(activation="swiglu", normalization="RMSNorm", position_embedding="rope",
                 add_bias_linear=False, qk_layernorm=family == "qwen3_moe", rotary_percent=None)
    if moe.get("shared_expert_ffn_hidden_size"):
        wants["moe.shared_expert_ffn_hidden_size"] = None
    for key, want in wants.items():
        have = dotted(model).get(key)
        if have != want:
            raise ConfigError(f"model.{key}={have} has no {family} config.json field; "
                              f"the export writes {family} models with model.{key}={want}")
    heads, rope = model["num_attention_heads"], {"rope_type": "default"}
    rope["rope_theta"] = float(model.get("rotary_base") or 10000)
    if model.get("rope_scaling"):
        rope.update(rope_type="llama3", factor=model.get("rope_scaling_factor") or 8.0,
                    **LLAMA3_ROPE)
    config = dict(
        model_type=family, architectures=["LlamaForCausalLM" if family == "llama"
                                          else "Qwen3MoeForCausalLM"],
        num_hidden_layers=model["num_layers"], hidden_size=model["hidden_size"],
        num_attention_heads=heads, num_key_value_heads=model.get("num_query_groups") or heads,
        head_dim=model.get("kv_channels") or model["hidden_size"] // heads,
        intermediate_size=model.get("ffn_hidden_size") or 4 * model["hidden_size"],
        vocab_size=model["vocab_size"], hidden_act="silu", attention_bias=False,
        tie_word_embeddings=not model["untie_embeddings"], rms_norm_eps=model["norm_epsilon"],
        initializer_range=model["init_method_std"], rope_parameters=rope,
        attention_dropout=model["attention_dropout"], max_position_embeddings=model["seq_length"],
    )
    if family == "qwen3_moe":
        pattern = moe.get("layer_freq") or [1] * model["num_layers"]
        config.update(num_experts=moe["num_experts"], num_experts_per_tok=moe["router_topk"],
                      moe_intermediate_size=moe.get("ffn_hidden_size")
                      or config["intermediate_size"], norm_topk_prob=True, decoder_sparse_step=1,
                      mlp_only_layers=[i for i, v in enumerate(pattern) if not v],
                      router_aux_loss_coef=moe.get("aux_loss_coeff", 0.0),
                      use_sliding_window=False)
    else:
        config["mlp_bias"] = False
    return config
