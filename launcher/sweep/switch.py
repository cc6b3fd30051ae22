"""Why the switch wins or loses: each pair of cells that differ only in
fsdp.prefetch_first_param_group, explained by the first parameter group's all-gather.

The switch moves that one all-gather from the first forward pre-hook into start_param_sync, so
what it can save per step is the time the forward waits for it: the predicted saving is the
first-group wait without the prefetch minus the wait with it (launcher.run.first_group). The
measured saving is the step-time difference (median without minus median with, bootstrap 95%
interval over repeats and steps). Both sit in the prefetching cell's row; its partner's row names
the pair too.
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


def add_explanations(rows: List[dict], keys: List[str], step_times: Dict[str, list]) -> None:
    """Fills the pair columns of each cell with prefetch=true that has a prefetch=false partner:
    the partner's label, and where both were measured the predicted and measured saving (ms per
    step). `step_times`: per cell, its ok runs' steady-state step times (s), one list per run."""
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
        if row["cell"] not in step_times or other["cell"] not in step_times:
            continue
        if None not in (row.get("first_group_wait_ms"), other.get("first_group_wait_ms")):
            row["predicted_saving_ms"] = other["first_group_wait_ms"] - row["first_group_wait_ms"]
        saving, low, high = stats.difference_ci(step_times[other["cell"]], step_times[row["cell"]])
        row.update(measured_saving_ms=saving * MS, measured_saving_ms_ci_low=low * MS,
                   measured_saving_ms_ci_high=high * MS,
                   measured_saving_step_noise_only=stats.step_noise_only(
                       step_times[other["cell"]], step_times[row["cell"]]))


def partner_by_keys(rows: List[dict], row: dict, keys: List[str]) -> Optional[dict]:
    """The row with the switch off and every other swept key as in `row`."""
    for candidate in rows:
        if candidate.get(SWITCH) == "false" and all(
                candidate.get(k) == row.get(k) for k in keys if k != SWITCH):
            return candidate
    return None
