"""model.fusions resolved against an installation and a device (launcher.preflight.fusions)."""

import dataclasses

import pytest

from launcher.config import (
    Activation, ConfigError, FusionsConfig, LayerSpec, ModelConfig, PositionEmbedding, Precision,
)
from launcher.preflight.fusions import FIELDS, Fusions, Kernels, resolve

NOTHING = Kernels(transformer_engine=False, apex=False, masked_softmax=False,
                  weight_gradient=False)
TE = dataclasses.replace(NOTHING, transformer_engine=True)
LLAMA = ModelConfig(position_embedding=PositionEmbedding.rope, activation=Activation.swiglu,
                    add_bias_linear=False)


def test_every_key_is_one_transformer_config_field():
    keys = set(FusionsConfig.keys())
    assert keys == set(FIELDS) == {f.name for f in dataclasses.fields(Fusions)} - {"off", "spec"}


def test_a_gpu_with_transformer_engine_has_all_but_apexs_softmax():
    run = resolve(LLAMA, LayerSpec.transformer_engine, Precision.bf16, False, TE)
    assert run.fields() == dict(masked_softmax_fusion=False, bias_activation_fusion=True,
                                bias_dropout_fusion=True, apply_rope_fusion=True,
                                gradient_accumulation_fusion=True, persist_layer_norm=True)
    assert run.off == (("masked_softmax", "needs Apex's scaled_masked_softmax_cuda for bf16"),)


def test_a_cpu_keeps_the_unfused_path_and_says_why():
    run = resolve(LLAMA, LayerSpec.local, Precision.bf16, True, NOTHING)
    assert not any(run.fields().values())
    assert run.start_line() == (
        "fusions off: masked_softmax (CUDA only in bf16); bias_activation, bias_dropout "
        "(torch.compile takes 30-50 s a rank to build them on a CPU; model.fusions.KEY=true "
        "turns one on); rope, gradient_accumulation, persist_layer_norm (CUDA only)")
    asked = dataclasses.replace(LLAMA, fusions=FusionsConfig(bias_activation=True,
                                                             bias_dropout=False))
    run = resolve(asked, LayerSpec.local, Precision.bf16, True, NOTHING)
    assert run.bias_activation and not run.bias_dropout
    assert "bias_dropout" not in dict(run.off)  # the user's false is no default left off


def test_fp32_scores_never_take_the_softmax_kernel_so_the_flag_stays_on():
    assert resolve(ModelConfig(), LayerSpec.local, Precision.fp32, True, NOTHING).masked_softmax


def test_a_fusion_asked_for_and_missing_is_refused():
    model = dataclasses.replace(LLAMA, fusions=FusionsConfig(rope=True))
    with pytest.raises(ConfigError, match=r"model.fusions.rope=true cannot run here \(layer spec "
                                          r"local\): needs Transformer Engine; set "
                                          r"model.fusions.rope=null"):
        resolve(model, LayerSpec.local, Precision.bf16, False, NOTHING)


def test_a_fusion_with_nothing_to_fuse_is_off_quietly_or_refused_when_asked():
    gpt = ModelConfig()  # learned positions: Megatron-LM's validate_args turns rope fusion off
    run = resolve(gpt, LayerSpec.transformer_engine, Precision.bf16, False, TE)
    assert not run.rope and "rope" not in dict(run.off)
    with pytest.raises(ConfigError, match="model.fusions.rope=true has no effect"):
        resolve(dataclasses.replace(gpt, fusions=FusionsConfig(rope=True)),
                LayerSpec.transformer_engine, Precision.bf16, False, TE)
    no_bias = ModelConfig(add_bias_linear=False)  # GELU without bias: nothing to add
    assert not resolve(no_bias, LayerSpec.local, Precision.bf16, False, NOTHING).bias_activation
