"""The dry run's time model beside Megatron-Bridge's published Megatron-FSDP rows, on paper:
each row's setting through the launcher's recipe, predicted for the row's GPUs, printed as the
markdown table of docs/prediction.md. No constant is fitted to these rows.

    .venv/bin/python bench/published.py

Each row is a command a user can dry-run as printed: FP8 current scaling as
`train.fp8.format=hybrid train.fp8.recipe=tensorwise`, Bridge's CPU offloading as
`model.cpu_offloading_num_layers`, its batch, micro-batch and tensor parallelism; the time model
prices every kernel class from the hardware file's public measurements.
"""

from dataclasses import dataclass
from typing import List

BLOB = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{}/docs/performance-summary.md#L{}"

# Every row with FSDP > 0 is Bridge's FP8-CS (its performance recipes' fp8_cs: Transformer
# Engine's current, per-tensor scaling), with no recomputation and no CUDA graphs; the tables of
# 25.09 and 26.02 on say only "FP8" or nothing, the recipes say fp8_cs.
FP8_CS = ["train.fp8.format=hybrid", "train.fp8.recipe=tensorwise"]
# The rows' settings the launcher's recipes differ in: Bridge's 70B and 405B presets recompute
# nothing and offload the first layers' activations to the host (cpu_offloading_num_layers)
NO_RECOMPUTE = ["model.recompute.granularity=null"]


def offload(layers: int) -> str:
    return f"model.cpu_offloading_num_layers={layers}"



L70 = ["+recipe=llama3_70b", *NO_RECOMPUTE, "train.micro_batch_size=2", *FP8_CS]
L405 = ["+recipe=llama3_70b", *NO_RECOMPUTE, "model.num_layers=126", "model.hidden_size=16384",
        "model.ffn_hidden_size=53248", "model.num_attention_heads=128",
        "parallel.tensor_model_parallel_size=2", "train.micro_batch_size=1",
        "train.global_batch_size=64", *FP8_CS, offload(95)]
L8 = ["+recipe=llama3_8b", "cluster.gpu=h100_sxm", "fsdp.suggested_communication_unit_size=null",
      *FP8_CS]
GB200 = ["cluster.gpu=gb200", "cluster.nodes=16", offload(40)]
GB300 = ["cluster.gpu=gb300", "cluster.nodes=16", offload(20)]


@dataclass(frozen=True)
class Row:
    what: str
    overrides: List[str]
    tokens: float
    tflops: float
    source: str
    note: str = ""


ROWS = [
    Row("25.09: Llama3-70B, 64 x GB200, GBS 128, MBS 2",
        [*L70, *GB200, "train.global_batch_size=128"], 3986, 1791,
        BLOB.format("fa0315ae2684693a666be9d247adf9baf1e30028", 53),
        "no precision column; the recipe is FP8-CS"),
    Row("25.09: Llama3.1-405B, 128 x GB200, TP 2, GBS 64, MBS 1",
        [*L405, "cluster.gpu=gb200", "cluster.nodes=32"], 729, 1840,
        BLOB.format("fa0315ae2684693a666be9d247adf9baf1e30028", 54),
        "no precision column; the recipe is FP8-CS; Bridge's TP 2 runs with sequence "
        "parallelism, the launcher's without"),
    Row("25.09: Llama3-8B, 8 x H100, GBS 128, MBS 1", L8, 14079, 725,
        BLOB.format("fa0315ae2684693a666be9d247adf9baf1e30028", 73),
        "no precision column; the recipe is FP8-CS with NCCL user buffers"),
    Row("25.11: Llama3-70B, 64 x GB300, FP8-CS, GBS 256, MBS 2", [*L70, *GB300], 4520, 2030,
        BLOB.format("5776a6d90b4dd8692902ab2eb581369484e19283", 54)),
    Row("25.11: Llama3-70B, 64 x GB200, FP8-CS, GBS 256, MBS 2", [*L70, *GB200], 4312, 1937,
        BLOB.format("5776a6d90b4dd8692902ab2eb581369484e19283", 67)),
    Row("25.11: Llama3-8B, 8 x H100, FP8-CS, GBS 128, MBS 1", L8, 14451, 744,
        BLOB.format("5776a6d90b4dd8692902ab2eb581369484e19283", 90),
        "the 25.11 recipe behind it recomputes 5 layers and uses no FSDP"),
    *[Row(f"{release}: Llama3-70B, 64 x {kind.upper()}, FP8, GBS 256, MBS 2",
          [*L70, *(GB300 if kind == "gb300" else GB200)], tokens, tflops,
          BLOB.format(commit, line))
      for release, kind, tokens, tflops, commit, line in [
          ("26.02", "gb300", 5003, 2248, "c0b9a00031b79b731ccefb56d0aba9629b4dd01b", 53),
          ("26.02", "gb200", 4040, 1815, "c0b9a00031b79b731ccefb56d0aba9629b4dd01b", 68),
          ("26.02.01", "gb300", 5243, 2353, "cfeddcd9445817a85ff58549d407fa700b1f8ace", 57),
          ("26.02.01", "gb200", 4357, 1956, "cfeddcd9445817a85ff58549d407fa700b1f8ace", 58),
          ("26.04", "gb300", 5243, 2355, "74695a06d759adcab3d782193127969213e4f005", 52),
          ("26.04", "gb200", 4143, 1861, "74695a06d759adcab3d782193127969213e4f005", 53),
          ("26.04.01", "gb300", 5248, 2348, "21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6", 48),
          ("26.04.01", "gb200", 4224, 1892, "21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6", 51)]],
]


def predict_row(row: Row):
    from launcher.cli import compose
    from launcher.estimate.predict import cluster_of, predict, predict_band

    cfg = compose(row.overrides)
    cluster = cluster_of(cfg)
    return predict(cfg, cluster), predict_band(cfg, cluster)


def table() -> List[str]:
    """The markdown table of docs/prediction.md, then the errors over all rows."""
    lines = ["| published row | launcher overrides | predicted tokens/s/GPU (band) | published | "
             "error | predicted TFLOP/s/GPU | published | MFU | what still differs |",
             "|---|---|---|---|---|---|---|---|---|"]
    errors = []
    for row in ROWS:
        p, (slow, fast) = predict_row(row)
        error = p.tokens_per_s_per_gpu / row.tokens - 1
        errors.append(abs(error))
        lines.append(
            f"| [{row.what}]({row.source}) | `{' '.join(row.overrides)}` | "
            f"{p.tokens_per_s_per_gpu:,.0f} ({slow.tokens_per_s_per_gpu:,.0f}-"
            f"{fast.tokens_per_s_per_gpu:,.0f}) | {row.tokens:,.0f} | {error:+.0%} | "
            f"{p.tflops_per_gpu:,.0f} | {row.tflops:,.0f} | {p.mfu:.0%} | {row.note} |")
    lines += ["", f"Mean absolute error over the {len(ROWS)} rows: "
                  f"{sum(errors) / len(errors):.1%}; the largest: {max(errors):.1%}; within 25%: "
                  f"{sum(e <= 0.25 for e in errors)} of {len(ROWS)}."]
    return lines


def main() -> None:
    print("\n".join(table()))


if __name__ == "__main__":
    main()
