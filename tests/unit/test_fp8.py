"""FP8 (train.fp8): every rule, the Megatron-LM flags it prints, what this installation refuses,
and the dry run's prediction in the FP8 dtype. The mapping onto megatron-core's own config objects
is in test_mapping.py; Megatron-LM's builders on the printed flags in
tests/integration/test_megatron_lm_configs.py."""

import importlib.util

import pytest

from conftest import make_config as make
from launcher.config import ConfigError, Fp8Config, Fp8Format, Fp8Recipe
from launcher.config.effect import check_effect
from launcher.preflight import megatron_lm, support

NO_TE = importlib.util.find_spec("transformer_engine") is None
LLAMA_H100 = ["+recipe=llama3_8b", "cluster.gpu=h100_sxm"]


def test_fp8_is_off_by_default_and_the_gemms_run_in_the_precision():
    cfg = make("+recipe=gpt")
    assert not cfg.train.fp8.enabled and cfg.train.matmul_dtype == "bf16"
    assert make("+recipe=tiny_cpu").train.matmul_dtype == "fp32"
    fp8 = make("+recipe=gpt", "train.fp8.format=hybrid").train
    assert fp8.fp8.format == Fp8Format.hybrid and fp8.fp8.recipe == Fp8Recipe.delayed
    assert fp8.matmul_dtype == "fp8"


def test_fp8_needs_bf16():
    with pytest.raises(ConfigError, match=r"train.fp8.format=e4m3 runs FP8 GEMMs inside a bf16 "
                                          r"run .* and train.precision=fp32; set "
                                          r"train.precision=bf16, or train.fp8.format=null"):
        make("+recipe=tiny_cpu", "train.fp8.format=e4m3")


def test_fp8_on_the_local_layer_spec_is_refused():
    with pytest.raises(ConfigError, match=r"train.fp8.format=hybrid needs Transformer Engine's "
                                          r"layers, and model.layer_spec=local .* set "
                                          r"model.layer_spec=auto, or train.fp8.format=null"):
        make("+recipe=gpt", "train.fp8.format=hybrid", "model.layer_spec=local")


def test_delayed_scaling_with_layernorm_recompute_is_refused():
    recompute = ["model.recompute.granularity=selective", "model.recompute.modules=[layernorm]"]
    with pytest.raises(ConfigError, match=r"train.fp8.recipe=delayed cannot recompute the "
                                          r"layernorm .* set train.fp8.recipe=tensorwise"):
        make("+recipe=gpt", "train.fp8.format=hybrid", *recompute)
    make("+recipe=gpt", "train.fp8.format=hybrid", "train.fp8.recipe=tensorwise", *recompute)


@pytest.mark.parametrize("strategy", ["no_shard", "optim", "optim_grads"])
def test_fp8_param_gather_needs_sharded_compute_weights(strategy):
    with pytest.raises(ConfigError, match=rf"train.fp8.param_gather=true needs sharded compute "
                                          rf"weights, and fsdp.sharding_strategy={strategy} keeps "
                                          rf"them whole .* set fsdp.sharding_strategy="
                                          rf"optim_grads_params, or train.fp8.param_gather=false"):
        make("+recipe=gpt", "train.fp8.format=hybrid", "train.fp8.param_gather=true",
             f"fsdp.sharding_strategy={strategy}", "fsdp.prefetch_first_param_group=false",
             *(["fsdp.overlap_param_gather=false"] if strategy == "no_shard" else []))


def test_fp8_param_gather_needs_main_weights():
    with pytest.raises(ConfigError, match=r"train.fp8.param_gather=true casts the FP8 weights "
                                          r"from the main weights .* fsdp.main_params_dtype=auto "
                                          r"keeps none; set fsdp.main_params_dtype=fp32"):
        make("+recipe=gpt", "train.fp8.format=hybrid", "train.fp8.param_gather=true",
             "fsdp.main_params_dtype=auto", "train.grad_clip=0")
    cfg = make("+recipe=gpt", "train.fp8.format=hybrid", "train.fp8.param_gather=true")
    assert cfg.train.fp8.param_gather


@pytest.mark.parametrize("key", ["train.fp8.recipe=tensorwise", "train.fp8.param_gather=true"])
def test_fp8_keys_without_a_format_have_no_effect(key):
    with pytest.raises(ConfigError, match=rf"{key} has no effect with train.fp8.format=null; set "
                                          rf"train.fp8.format=e4m3 or hybrid"):
        check_effect(make("+recipe=gpt", key))


def test_the_megatron_lm_command_carries_the_fp8_flags():
    assert megatron_lm.fp8_flags(Fp8Config()) == []
    flags = megatron_lm.fp8_flags(Fp8Config(Fp8Format.e4m3, Fp8Recipe.mxfp8, True))
    assert flags == ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8", "--fp8-param-gather"]
    cfg = make("+recipe=gpt", "train.fp8.format=hybrid")
    assert megatron_lm.train_flags(cfg)[-4:] == ["--fp8-format", "hybrid", "--fp8-recipe",
                                                 "delayed"]


@pytest.mark.skipif(not NO_TE, reason="Transformer Engine is installed here")
def test_fp8_without_transformer_engine_is_refused():
    support.check_fp8_support(Fp8Config())  # no FP8: nothing to refuse
    with pytest.raises(ConfigError, match=r"train.fp8.format=hybrid needs Transformer Engine .*, "
                                          r"which is not installed; install Transformer Engine, "
                                          r"or set train.fp8.format=null"):
        support.check_fp8_support(Fp8Config(Fp8Format.hybrid))


def test_a_recipe_newer_than_the_installed_transformer_engine_is_refused(monkeypatch):
    # stands in for an installed Transformer Engine 2.1 (its package metadata)
    monkeypatch.setattr(support, "transformer_engine_installed", lambda: True)
    monkeypatch.setattr(support, "transformer_engine_version", lambda: (2, 1, 0))
    support.check_fp8_support(Fp8Config(Fp8Format.hybrid, Fp8Recipe.mxfp8))
    with pytest.raises(ConfigError, match=r"train.fp8.recipe=blockwise needs Transformer Engine "
                                          r">= 2.3 .* and 2.1.0 is installed; upgrade it, or "
                                          r"change train.fp8.recipe"):
        support.check_fp8_support(Fp8Config(Fp8Format.hybrid, Fp8Recipe.blockwise))
    with pytest.raises(ConfigError, match=r"train.fp8.param_gather=true needs Transformer Engine "
                                          r">= 2.3"):
        support.check_fp8_support(Fp8Config(Fp8Format.hybrid, param_gather=True))
    monkeypatch.setattr(support, "transformer_engine_version", lambda: None)  # a source build
    support.check_fp8_support(Fp8Config(Fp8Format.hybrid, Fp8Recipe.blockwise))


def test_the_dry_run_predicts_fp8_from_the_key():
    from launcher.cli import compose
    from launcher.estimate.predict import cluster_of, predict

    bf16, fp8 = compose(LLAMA_H100), compose(LLAMA_H100 + ["train.fp8.format=hybrid"])
    p16, p8 = predict(bf16, cluster_of(bf16)), predict(fp8, cluster_of(fp8))
    peak = cluster_of(bf16).hardware.tflops
    assert (peak["bf16"], peak["fp8"]) == (989, 1979)
    assert p16.mfu == pytest.approx(p16.tflops_per_gpu / 989)
    assert p8.mfu == pytest.approx(p8.tflops_per_gpu / 1979)  # against the FP8 peak
    assert p8.timeline.compute_s < p16.timeline.compute_s  # the GEMMs at the FP8 rate
    assert p8.tflops_per_gpu > p16.tflops_per_gpu
