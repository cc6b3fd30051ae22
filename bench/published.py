"""The dry run's time model beside Megatron-Bridge's published rows that the recipes cite, on paper:
each row's shape through the launcher's recipe, predicted for the row's GPUs, printed as the
markdown table of docs/performance.md. No constant is fitted to these rows.

    .venv/bin/python bench/published.py

FP8 rows are the recipe with `train.fp8.format=hybrid` (and the row's recipe: tensorwise for
FP8-CS, mxfp8 for MXFP8), which a user can run or dry-run as printed; the time model puts every
GEMM outside the core attention at the GPU's dense FP8 rate (times the hardware file's matmul
fraction, measured for bf16), the core attention at bf16's.
"""

from dataclasses import dataclass, replace
from typing import List

ARCHIVE = ("https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/"
           "performance-summary-archive.md")
SUMMARY = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary.md"


# the rows' FP8 as launcher keys: a row that names no recipe gets Megatron-LM's default (delayed)
FP8 = ["train.fp8.format=hybrid"]
FP8_CS = [*FP8, "train.fp8.recipe=tensorwise"]  # Bridge's FP8-CS: current (per-tensor) scaling
MXFP8 = [*FP8, "train.fp8.recipe=mxfp8"]


@dataclass(frozen=True)
class Row:
    what: str
    overrides: List[str]
    tokens: float
    tflops: float
    source: str
    note: str = ""


ROWS = [
    Row("Llama3-8B, 8 x H100, FP8-CS, GBS 128, MBS 1, FSDP 8 (25.11)",
        ["+recipe=llama3_8b", "cluster.gpu=h100_sxm", *FP8_CS], 14451, 744, ARCHIVE,
        "the recipe Bridge shipped with 25.11 had dropped Megatron-FSDP (commit e3ed3267d)"),
    Row("Llama3-8B, 8 x H100, GBS 128, MBS 1, FSDP 8 (25.09, FP8 recipe)",
        ["+recipe=llama3_8b", "cluster.gpu=h100_sxm", *FP8], 14079, 725, ARCHIVE),
    Row("Llama3-70B, 64 x GB200, FP8-CS, GBS 256, MBS 2, FSDP 64 (25.11)",
        ["+recipe=llama3_70b", "cluster.gpu=gb200", "cluster.nodes=16",
         "train.micro_batch_size=2", *FP8_CS], 4312, 1937, ARCHIVE,
        "Bridge offloads 40 layers' activations to the host; the recipe recomputes every layer"),
    Row("Llama3-70B, 64 x GB200, FP8, GBS 256, MBS 2, FSDP 64 (26.04.01)",
        ["+recipe=llama3_70b", "cluster.gpu=gb200", "cluster.nodes=16",
         "train.micro_batch_size=2", *FP8], 4224, 1892, SUMMARY),
    Row("Llama3-70B, 64 x GB200, GBS 128, MBS 2, FSDP 64 (25.09)",
        ["+recipe=llama3_70b", "cluster.gpu=gb200", "cluster.nodes=16",
         "train.micro_batch_size=2", "train.global_batch_size=128"], 3986, 1791,
        ARCHIVE, "no precision column in 25.09; predicted in bf16"),
    Row("DeepSeek-V3, 256 x GB200, MXFP8, PP 4, VP 4, EP 64, no FSDP (26.04.01)",
        ["+recipe=deepseek_v3_proxy", "cluster.gpu=gb200", "cluster.nodes=64",
         "cuda_graph.impl=none", *MXFP8], 4256, 1106, SUMMARY,
        "not the same run: no DeepSeek-V3 row uses Megatron-FSDP; this one pipelines; the proxy "
        "(EP 32, HSDP 4, the recipe's 128-GPU shape on 256) has no multi-latent attention"),
]


def predict_row(row: Row):
    from launcher.cli import compose
    from launcher.run.predict import cluster_of, predict

    cfg = compose(row.overrides)
    return predict(cfg, cluster_of(cfg))


def main() -> None:
    print("| published row | launcher overrides | predicted tokens/s/GPU | published | ratio | "
          "predicted TFLOP/s/GPU | published | ratio | step s | MFU | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in ROWS:
        p = predict_row(row)
        print(f"| [{row.what}]({row.source}) | `{' '.join(row.overrides)}` | "
              f"{p.tokens_per_s_per_gpu:,.0f} | {row.tokens:,.0f} | "
              f"{p.tokens_per_s_per_gpu / row.tokens:.2f} | {p.tflops_per_gpu:,.0f} | "
              f"{row.tflops:,.0f} | {p.tflops_per_gpu / row.tflops:.2f} | "
              f"{p.timeline.step_s:.3g} | {p.mfu:.0%} | {row.note} |")


if __name__ == "__main__":
    main()
