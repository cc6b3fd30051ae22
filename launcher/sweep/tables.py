"""The text of a sweep's tables: results.csv (every column) and results.md (the columns a person
reads, with their headers and the notes under them), and each row's values as the tables, the
report page and the console show them. The rows themselves are launcher.sweep.results.
"""

import csv
import io
from typing import List

from launcher.files import write_text_atomic
from launcher.sweep.numerics import CLOSE_REL_DIFF, from_row
from launcher.sweep.results import MEMORY_NOISE_FLOOR, Results
from launcher.sweep.switch import prediction_gap


def memory_note(results: Results) -> str:
    """The report's sentence where the cells' peak memory is the same within its noise, else
    ""."""
    if not results.memory_within_noise:
        return ""
    peaks = [r["peak_memory_mib"] for r in results.rows
             if r.get("tokens_per_s_per_gpu") is not None]
    return (f"Peak memory is the same within noise in every measured cell: {min(peaks):,.1f} to "
            f"{max(peaks):,.1f} MiB, {max(peaks) - min(peaks):.1f} MiB apart, where a cell's own "
            f"runs move by {results.memory_noise_mib:.1f} MiB (the largest spread over one cell's "
            f"repeats, at least {MEMORY_NOISE_FLOOR:.0%} of the peak). No cell saves memory: the "
            "throughput-memory front ranks the cells by throughput alone.")


def fmt(value, digits: int = 3) -> str:
    """A cell of the printed tables: numbers rounded, booleans and missing values spelled out."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def write_tables(results: Results, folder: str) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=results.columns, extrasaction="ignore")
    writer.writeheader()
    for row in results.rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in results.columns})
    write_text_atomic(f"{folder}/results.csv", buffer.getvalue())
    write_text_atomic(f"{folder}/results.md", markdown(results))


SHOWN = ("label", "status", "tokens_per_s_per_gpu", "speedup", "numerics", "peak_memory_mib",
         "predicted_saving_ms", "measured_saving_ms", "runs_ok", "race", "profile_trace",
         "reason")
"""The columns a person reads in the printed tables (about ten); results.csv has every one."""


def shown_columns(results: Results, traces: bool = True) -> tuple:
    """The columns the printed tables show: SHOWN, the race's only in a tuning sweep, the trace's
    only in a profiling one and where `traces` (report.html links them; results.md leaves them
    to results.csv)."""
    traced = traces and any(r.get("profile_trace") for r in results.rows)
    return tuple(k for k in SHOWN if (k != "race" or results.race)
                 and (k != "profile_trace" or traced))


HEADERS = {"label": "cell", "tokens_per_s_per_gpu": "tokens/s/GPU",
           "speedup": "speedup vs baseline [95% CI]", "numerics": "losses vs baseline",
           "tflops_per_gpu": "TFLOP/s/GPU",
           "step_time_ms_p50": "step p50 (ms)", "step_time_ms_p90": "step p90 (ms)",
           "peak_allocated_mib": "peak allocated (MiB)", "peak_reserved_mib": "peak reserved (MiB)",
           "peak_rss_mib": "peak RSS (MiB)", "pareto": "throughput-memory front",
           "peak_memory_mib": "peak memory (MiB)",
           "runs_ok": "runs ok", "profile_trace": "trace",
           "first_group_issued_in": "first group issued in",
           "first_group_wait_ms": "first-group wait (ms)",
           "first_group_wait_share": "wait share of step",
           "predicted_saving_ms": "predicted saving (ms/step)",
           "measured_saving_ms": "measured saving (ms/step) [95% CI]"}


NUMERICS_NOTE = (
    "Losses vs baseline: every step's training loss against the baseline's at the same repeat: "
    f"identical (bit-equal), close (largest relative difference below {CLOSE_REL_DIFF:g}) or "
    "different; with several repeats, the worst.")


STEP_NOISE_ONLY = "step noise only (1 run), not significant"


ONE_RUN_NOTE = (
    "A cell with one ok run has an interval that holds step-to-step noise only: run-to-run drift "
    "(load, clocks, placement) is invisible to it, so none of its differences is marked "
    "significant. Set sweep.repeats=2 or more to measure it.")


def display(row: dict, key: str) -> str:
    """A row's value as the tables and the report show it."""
    if key == "label":
        return row["label"] + (" (baseline)" if row["baseline"] else "")
    if key == "speedup" and row["baseline"] and row.get("tokens_per_s_per_gpu") is not None:
        return "baseline"  # not compared with itself
    if key == "speedup" and row.get("speedup") is not None:
        noise = ", within noise" if row["within_noise"] else ""
        noise += f", {STEP_NOISE_ONLY}" if row["step_noise_only"] and not row["baseline"] else ""
        return (f"{row['speedup']:.3f} [{row['speedup_ci_low']:.3f}, "
                f"{row['speedup_ci_high']:.3f}]{noise}")
    if key == "measured_saving_ms" and row.get("measured_saving_ms") is not None:
        noise = ", within noise" if row["measured_saving_within_noise"] else ""
        noise += f", {STEP_NOISE_ONLY}" if row["measured_saving_step_noise_only"] else ""
        return (f"{row['measured_saving_ms']:.3g} [{row['measured_saving_ms_ci_low']:.3g}, "
                f"{row['measured_saving_ms_ci_high']:.3g}] vs {row['switch_partner']}{noise}")
    if key == "numerics" and from_row(row) is not None:
        return from_row(row).label
    if key == "status" and row.get("cuda_graph_impl", "none") != "none" \
            and row.get("cuda_graph_captured") is False:
        return f"{row['status']} (CUDA graph not captured: ran eagerly)"
    return fmt(row.get(key))


PREDICTED_NOTE = (
    "Predicted saving: the first-group wait without the prefetch minus the wait with it, as the "
    "runs measured it; it counts that one wait and nothing else the switch moves.")


def saving_notes(results: Results) -> List[str]:
    """What the report says under the table about the switch pairs' savings: what the predicted
    one counts, and for each pair whose measured interval does not hold it, what it leaves out."""
    if not any(r.get("predicted_saving_ms") is not None for r in results.rows):
        return []
    device = results.environment.get("device", "")
    return [PREDICTED_NOTE, *filter(None, (prediction_gap(r, device) for r in results.rows))]


def markdown(results: Results) -> str:
    plan = results.plan
    lines = [f"# Sweep {plan.name}", "",
             f"{len(plan.cells)} cells, {plan.repeats} repeat(s) each; swept: "
             f"{', '.join(plan.keys) or 'nothing'}. Throughput is the median over steady-state "
             "steps and repeats, its interval a bootstrap over repeats and steps. A speedup and "
             "a measured saving compare two cells run by run: repeat r of each ran in round r, "
             "and both are the geometric mean of the pairs' throughput ratios with Student's t "
             "95% interval over the pairs (the saving at the partner's step time), so the two "
             "never disagree.", ""]
    if any(r.get("step_noise_only") for r in results.rows):
        lines += [ONE_RUN_NOTE, ""]
    if memory_note(results):
        lines += [memory_note(results), ""]
    env = results.environment
    if env:
        lines += ["Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), ""]
    columns = shown_columns(results, traces=False)
    lines.append("| " + " | ".join(HEADERS.get(k, k) for k in columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for row in results.rows:
        cells = [display(row, k).replace("|", "\\|").replace("\n", " ") for k in columns]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", NUMERICS_NOTE, *(text for d in results.defects for text in ("", d.line))]
    lines += [text for note in saving_notes(results) for text in ("", note)]
    return "\n".join(lines) + "\n"
