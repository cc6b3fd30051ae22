"""Writes the logits the launcher's GPT gives on fixed tokens, built as a rank builds it: the
CPU layer, a gloo world of one, megatron's process groups and seeds (launcher.run.rank_setup),
the TransformerConfig and GPT of launcher.run.build with the imported recipe's train.init_hf
weights (build.load_hf), in fp32. Used by tests/integration/test_hf.py:
`python hf_logits.py CONFIG_DIR RECIPE TOKENS.pt OUT.pt`."""

import os
import sys

os.environ["CUDA_VISIBLE_DEVICES"] = ""

from launcher.run import cpu_compat  # noqa: E402

cpu_compat.activate()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from launcher.cli import compose  # noqa: E402
from launcher.run import build, rank_setup  # noqa: E402


def main(config_dir: str, recipe: str, tokens_path: str, out: str) -> None:
    cfg = compose([f"hydra.searchpath=[file://{config_dir}]", f"+recipe={recipe}",
                   "train.precision=fp32", "runtime.nproc_per_node=1",
                   "parallel.expert_model_parallel_size=1"])
    dist.init_process_group("gloo", init_method=f"file://{out}.store", rank=0, world_size=1)
    rank_setup.init_parallel(cfg.parallel, 1, cfg.train.seed, 600, graph_safe_rng=False)
    fusions = build.run_fusions(cfg, on_cpu=True)
    config = build.transformer_config(cfg.model, cfg.parallel, cfg.cuda_graph, cfg.train,
                                      fusions, on_cpu=True)
    gpt = build.gpt_model(cfg.model, cfg.parallel, config)
    build.load_hf(gpt, cfg.model, cfg.parallel, cfg.train.init_hf)
    gpt.eval()
    tokens = torch.load(tokens_path)
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    with torch.no_grad():
        logits = gpt(tokens, positions, attention_mask=None)
    torch.save(logits[..., : cfg.model.vocab_size].float(), out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
