"""launcher/config/hf.py, torch-free: a Hugging Face config.json as the model section and back,
each refusal in one line naming the field; the pre-flight's check of train.init_hf."""

import json

import pytest

from launcher.config import ConfigError
from launcher.config.hf import check_model, hf_config, model_section

pytestmark = pytest.mark.unit

LLAMA = dict(model_type="llama", vocab_size=256, hidden_size=64, intermediate_size=176,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             hidden_act="silu", rms_norm_eps=1e-5, tie_word_embeddings=False,
             attention_bias=False, mlp_bias=False, max_position_embeddings=128,
             rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
QWEN = dict(LLAMA, model_type="qwen3_moe", num_local_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
            mlp_only_layers=[], use_sliding_window=False)


def folder(tmp_path, config: dict, **changes):
    (tmp_path / "config.json").write_text(json.dumps(dict(config, **changes)))
    return str(tmp_path)


def test_a_llama_is_the_llama_section(tmp_path):
    section = model_section(folder(tmp_path, LLAMA))
    assert section["num_query_groups"] == 2 and section["kv_channels"] == 16
    assert section["rotary_base"] == 500000 and section["untie_embeddings"] is True
    assert section["moe"] == {"num_experts": None} and not section["qk_layernorm"]


def test_qwen3_moe_experts_and_their_layer_pattern(tmp_path):
    section = model_section(folder(tmp_path, QWEN, mlp_only_layers=[0]))
    assert section["qk_layernorm"] and section["moe"]["num_experts"] == 4
    assert section["moe"]["layer_freq"] == [0, 1] and section["moe"]["router_topk"] == 2
    assert model_section(folder(tmp_path, QWEN, decoder_sparse_step=2))["moe"]["layer_freq"] \
        == [0, 1]


def test_llama3_rope_scaling_is_megatrons(tmp_path):
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}
    section = model_section(folder(tmp_path, LLAMA, rope_parameters=rope))
    assert section["rope_scaling"] and section["rope_scaling_factor"] == 32.0
    with pytest.raises(ConfigError, match="high_freq_factor=4.0"):
        model_section(folder(tmp_path, LLAMA, rope_parameters=dict(rope, high_freq_factor=2.0)))


@pytest.mark.parametrize("config, change, match", [
    (LLAMA, {"model_type": "gpt2"}, "model_type=gpt2 is not supported"),
    (LLAMA, {"hidden_act": "gelu"}, "hidden_act=\"gelu\""),
    (LLAMA, {"attention_bias": True}, "attention_bias=true"),
    (LLAMA, {"mlp_bias": True}, "mlp_bias=true"),
    (QWEN, {"use_sliding_window": True}, "use_sliding_window=true"),
    (QWEN, {"norm_topk_prob": False}, "norm_topk_prob=false"),
    (LLAMA, {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type=yarn"),
    (LLAMA, {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4 + 0.5}},
     "rope_theta=10000.5"),
])
def test_what_megatron_cannot_express_is_refused(tmp_path, config, change, match):
    with pytest.raises(ConfigError, match=match):
        model_section(folder(tmp_path, config, **change))


def test_a_missing_config_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="config.json does not exist"):
        model_section(str(tmp_path))


def as_model(section: dict) -> dict:
    return dict(section, moe=dict(section["moe"]))


@pytest.mark.parametrize("key, value", [("vocab_size", 512), ("num_attention_heads", 8),
                                        ("untie_embeddings", False)])
def test_a_run_of_another_shape_is_refused_naming_the_key(tmp_path, key, value):
    hf_dir = folder(tmp_path, LLAMA)
    model = as_model(model_section(hf_dir))
    check_model(model, hf_dir, 32)
    with pytest.raises(ConfigError, match=f"model.{key}="):
        check_model(dict(model, **{key: value}), hf_dir, 32)
    with pytest.raises(ConfigError, match="max_position_embeddings=128"):
        check_model(model, hf_dir, 256)


def test_training_choices_may_differ(tmp_path):
    hf_dir = folder(tmp_path, LLAMA)
    check_model(dict(as_model(model_section(hf_dir)), hidden_dropout=0.1), hf_dir, 32)


def test_the_section_goes_back_to_the_same_config(tmp_path):
    for config in (LLAMA, QWEN):
        section = model_section(folder(tmp_path, config))
        back = hf_config(dict(section, seq_length=128))
        again = model_section(folder(tmp_path, back))
        assert again == section


def test_export_refuses_what_neither_family_holds(tmp_path):
    section = dict(model_section(folder(tmp_path, LLAMA)), seq_length=32,
                   normalization="LayerNorm")
    with pytest.raises(ConfigError, match="model.normalization=LayerNorm"):
        hf_config(section)


def test_the_preflight_names_the_extra_when_safetensors_is_missing(tmp_path, monkeypatch):
    import importlib.util

    from conftest import make_config
    from launcher.preflight import hf

    cfg = make_config("+recipe=llama3_8b_tiny_cpu", f"train.init_hf={tmp_path}")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "safetensors" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install '\.\[hf\]'"):
        hf.check_init_hf(cfg)


def test_launch_hf_import_refuses_in_one_line(tmp_path, capsys):
    from launcher.hf_cli import main

    hf_dir = folder(tmp_path, LLAMA, hidden_act="gelu")
    assert main(["import", hf_dir, "--recipe", "r", "--config-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config.json: hidden_act=\"gelu\"") and err.count("\n") == 1
    assert not (tmp_path / "c").exists()


def test_launch_hf_import_writes_a_recipe_delta(tmp_path):
    import yaml

    from launcher.hf_cli import main

    hf_dir = folder(tmp_path, QWEN)
    assert main(["import", hf_dir, "--recipe", "q", "--config-dir", str(tmp_path / "c")]) == 0
    text = (tmp_path / "c" / "recipe" / "q.yaml").read_text()
    assert text.startswith("# @package _global_\n")
    recipe = yaml.safe_load(text)
    assert recipe["defaults"] == ["moe_small_tiny_cpu", "_self_"]
    assert recipe["train"]["init_hf"] == str(tmp_path.resolve())
    assert recipe["model"] == model_section(hf_dir)
