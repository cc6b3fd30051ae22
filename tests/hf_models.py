"""Tiny random Hugging Face models, made here with transformers (no hub): a Llama (GQA, untied,
rope base 500000) and a Qwen3-MoE (4 experts, top 2, q/k norms), hidden 64, 2 layers, vocab
256, saved with save_pretrained (safetensors) in bf16, as published Llama and Qwen checkpoints
are: a bf16 run's weights then start equal to them, and export gives them back exactly."""

from pathlib import Path

LLAMA = dict(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
             rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
QWEN3_MOE = dict(LLAMA, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])


def save_tiny(kind: str, folder, **changes) -> Path:
    """A tiny random `kind` (llama | qwen3_moe) model saved to `folder`, bf16, seed 0."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    config_class, model_class, values = {
        "llama": (LlamaConfig, LlamaForCausalLM, LLAMA),
        "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM, QWEN3_MOE)}[kind]
    torch.manual_seed(0)
    model = model_class(config_class(**dict(values, **changes))).to(torch.bfloat16)
    model.save_pretrained(str(folder))
    return Path(folder)
