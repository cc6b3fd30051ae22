"""Why the switch wins or loses: each pair of cells that differ only in
fsdp.prefetch_first_param_group, explained by the first parameter group's all-gather.

The switch moves that one all-gather from the first forward pre-hook into start_param_sync, so
what it can save per step is the time the forward waits for it: the predicted saving is the
first-group wait without the prefetch minus the wait with it (launcher.run.first_group), a point
with no band of its own. The measured saving is the pair compared as a speedup is
(launcher.sweep.stats.compare: paired by repeat, Student's t over the pairs), at the partner's
step time, so it agrees with the speedup of the same pair. Both sit in the prefetching cell's
row; its partner's row names the pair too. Where the measured interval does not hold the
prediction, the report says what the prediction leaves out (`prediction_gap`).
"""

from typing import Dict, List, Optional

import numpy as np

from launcher.summary import RunSummary
from launcher.sweep import stats

SWITCH = "fsdp.prefetch_first_param_group"
MS = 1e3


def first_group_metrics(ok: List[RunSummary]) -> dict:
    """A cell's first-group fields: the medians over its ok runs (each a run's median)."""
    def median(key):
        values = [getattr(s.metrics, key) for s in ok if getattr(s.metrics, key) is not None]
        return float(np.median(values)) if values else None

    wait, allgather = median("first_group_wait_s"), median("first_group_allgather_s")
    step = float(np.median([t for s in ok for t in s.steady_state_step_times_s]))
    places = sorted({s.metrics.first_group_issued_in or "" for s in ok} - {""})
    return {"first_group_bytes": ok[0].metrics.first_group_bytes,
            "first_group_issued_in": "+".join(places) or None,
            "first_group_allgather_ms": None if allgather is None else allgather * MS,
            "first_group_wait_ms": None if wait is None else wait * MS,
            "first_group_wait_share": None if wait is None else wait / step}


def add_explanations(rows: List[dict], keys: List[str],
                     repeat_runs: Dict[str, List[stats.RepeatRun]]) -> None:
    """Fills the pair columns of each cell with prefetch=true that has a prefetch=false partner:
    the partner's label, and where both were measured the predicted and measured saving (ms per
    step). `repeat_runs`: per cell, its ok runs with their repeats."""
    if SWITCH not in keys:
        return
    for row in rows:
        if row.get(SWITCH) != "true":
            continue
        other = partner_by_keys(rows, row, keys)
        if other is None:
            continue
        row["switch_partner"] = other["label"]
        other["switch_partner"] = row["label"]
        if row["cell"] not in repeat_runs or other["cell"] not in repeat_runs:
            continue
        if None not in (row.get("first_group_wait_ms"), other.get("first_group_wait_ms")):
            row["predicted_saving_ms"] = other["first_group_wait_ms"] - row["first_group_wait_ms"]
        found = stats.compare(repeat_runs[row["cell"]], repeat_runs[other["cell"]])
        if found is not None:
            row.update(saving_columns(found, repeat_runs[other["cell"]]))


def saving_columns(found: stats.Comparison, partner: List[stats.RepeatRun]) -> dict:
    """The measured saving's columns: the comparison at the partner's median step time."""
    step_s = float(np.median([run.median_step_s for run in partner]))
    saving, low, high = found.saving_s(step_s)
    return {"measured_saving_ms": saving * MS, "measured_saving_ms_ci_low": low * MS,
            "measured_saving_ms_ci_high": high * MS,
            "measured_saving_within_noise": found.within_noise,
            "measured_saving_step_noise_only": found.step_noise_only}


LEFT_OUT = {
    "cpu": "on a CPU, the host's work between steps (the optimizer, the hooks, Python), which "
           "the prefetched all-gather runs beside on the same cores, and how far gloo overlaps "
           "it with that work",
    "cuda": "the step's sync point waiting for what start_param_sync gathers, NCCL's kernels "
            "taking SMs from the compute they overlap, and the hooks' host time",
}


def prediction_gap(row: dict, device: str) -> str:
    """A sentence where a pair's measured saving interval does not hold its predicted saving:
    what the prediction counts, what it leaves out; "" where they agree or either is missing."""
    predicted, low = row.get("predicted_saving_ms"), row.get("measured_saving_ms_ci_low")
    if predicted is None or low is None or low <= predicted <= row["measured_saving_ms_ci_high"]:
        return ""
    left_out = LEFT_OUT["cpu" if device == "cpu" else "cuda"]
    return (f"{row['label']} vs {row['switch_partner']}: the measured saving, "
            f"{row['measured_saving_ms']:.3g} ms [{low:.3g}, "
            f"{row['measured_saving_ms_ci_high']:.3g}], does not hold the predicted "
            f"{predicted:.3g} ms. The prediction counts only the first forward's wait for the "
            f"first parameter group; it leaves out {left_out} (the time model's full list: "
            "docs/prediction.md, 'Left out').")


def partner_by_keys(rows: List[dict], row: dict, keys: List[str]) -> Optional[dict]:
    """The row with the switch off and every other swept key as in `row`."""
    for candidate in rows:
        if candidate.get(SWITCH) == "false" and all(
                candidate.get(k) == row.get(k) for k in keys if k != SWITCH):
            return candidate
    return None
