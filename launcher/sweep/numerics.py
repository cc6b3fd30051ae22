"""Whether a cell trains like the baseline: its per-step training losses against the baseline's,
repeat by repeat (RunSummary.losses), over the steps both runs have.

A cell is `identical` (every step's loss bit-equal), `close` (the largest relative difference
|a - b| / |b| over the steps is below CLOSE_REL_DIFF), or `different`; with several repeats, each
repeat is compared with the baseline's same repeat and the worst counts. `n/a` says why no repeat
could be compared (a failed run, on either side). A pair of cells that differ only in
fsdp.prefetch_first_param_group is compared with itself the same way: the switch moves when an
all-gather is issued, not what it computes, so such a pair that is not `identical` is a defect.
Imports no torch: a sweep reads the losses its runs' summaries hold.
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional

from launcher.summary import RunSummary
from launcher.sweep.switch import SWITCH, partner_by_keys

CLOSE_REL_DIFF = 1e-3
"""The largest relative loss difference still called `close`. Changing only the order of a
float32 reduction (another kernel, fusion or layout) moves a loss by some 1e-7 relative, and a
few dozen steps of training grow that to 1e-5..1e-4 at most; a change to what is computed (a
dtype, a seed, a dropped term, a bug) moves it by 1e-2 or more within a few steps. 1e-3 sits
between the two and below bf16's own rounding step (2^-8, about 3.9e-3), so a change that bf16
could show in a loss is never called close."""

IDENTICAL, CLOSE, DIFFERENT = "identical", "close", "different"
BASELINE, UNCHECKED = "baseline", "n/a"
TRAINS_LIKE_BASELINE = (IDENTICAL, CLOSE, BASELINE)


@dataclass(frozen=True)
class Numerics:
    """A cell's losses against a reference's (the baseline, or its switch partner)."""

    kind: str
    """identical | close | different | baseline | n/a."""
    max_rel_diff: Optional[float] = None
    """The largest |a - b| / |b| over the steps and repeats compared; None where none was."""
    note: str = ""
    """Why no repeat was compared (n/a), or which repeats were not."""

    @property
    def label(self) -> str:
        """As the tables, the report and the console show it: `close (max rel diff 3.1e-06)`."""
        if self.kind == UNCHECKED:
            return f"{UNCHECKED} ({self.note})"
        details = [f"max rel diff {self.max_rel_diff:.2g}"] if self.kind in (CLOSE, DIFFERENT) \
            else []
        details += [f"not compared: {self.note}"] if self.note else []
        return self.kind + (f" ({'; '.join(details)})" if details else "")

    @property
    def trains_like_baseline(self) -> bool:
        return self.kind in TRAINS_LIKE_BASELINE


def relative_difference(loss: float, reference: float) -> float:
    if loss == reference:
        return 0.0
    return abs(loss - reference) / abs(reference) if reference else math.inf


def max_rel_diff(run: RunSummary, reference: RunSummary) -> Optional[float]:
    """The largest relative difference over the steps both runs have; None if they share none."""
    by_step = dict(zip(reference.steps_run, reference.losses))
    diffs = [relative_difference(loss, by_step[step])
             for step, loss in zip(run.steps_run, run.losses) if step in by_step]
    return max(diffs) if diffs else None


def kind_of(diff: float) -> str:
    if diff == 0.0:
        return IDENTICAL
    return CLOSE if diff < CLOSE_REL_DIFF else DIFFERENT


def not_run(who: str, repeat: int, status: str) -> str:
    """Why one side of a repeat has nothing to compare: `baseline repeat 1 failed (oom)`."""
    name = f"{who} repeat {repeat}".strip()
    if status == "pending":
        return f"{name} has not run"
    if status == "interrupted":
        return f"{name} was interrupted"
    return f"{name} failed ({status})"


def compare_runs(runs: List[tuple], reference: List[tuple], who: str = "baseline") -> Numerics:
    """`runs` against `reference`, repeat by repeat: each a list of (status, summary or None)
    per repeat index (a run that has not run yet: `pending`). `who` names the reference."""
    diffs, skipped = [], []
    for repeat, (status, summary) in enumerate(runs):
        ref_status, ref_summary = (reference[repeat] if repeat < len(reference)
                                   else ("pending", None))
        if status != "ok":
            skipped.append(not_run("", repeat, status))
        elif ref_status != "ok":
            skipped.append(not_run(who, repeat, ref_status))
        elif not summary.losses or not ref_summary.losses:
            skipped.append(f"repeat {repeat}'s summary.json holds no per-step losses "
                           "(an older launcher wrote it); rerun it")
        elif (diff := max_rel_diff(summary, ref_summary)) is None:
            skipped.append(f"repeat {repeat} has no step in common with {who} repeat {repeat}")
        else:
            diffs.append(diff)
    if not diffs:
        return Numerics(UNCHECKED, note="; ".join(skipped) or "no run to compare")
    worst = max(diffs)
    return Numerics(kind_of(worst), worst, "; ".join(skipped))


def columns(numerics: Numerics) -> dict:
    """A row's numerics columns (results.csv: the kind, the number, the note)."""
    return {"numerics": numerics.kind, "numerics_max_rel_diff": numerics.max_rel_diff,
            "numerics_note": numerics.note}


def from_row(row: dict) -> Optional[Numerics]:
    """The numerics a row holds (None: an invalid cell, never run)."""
    if row.get("numerics") is None:
        return None
    return Numerics(row["numerics"], row.get("numerics_max_rel_diff"),
                    row.get("numerics_note") or "")


def add_numerics(rows: List[dict], runs: Dict[str, List[tuple]], baseline: Optional[str]) -> None:
    """Each valid cell's numerics against the baseline's (`runs`: per cell id, each repeat's
    (status, summary or None)); the baseline's own row says `baseline`."""
    for row in rows:
        if row["cell"] not in runs:
            continue  # invalid: never ran
        numerics = Numerics(BASELINE) if row["cell"] == baseline \
            else compare_runs(runs[row["cell"]], runs.get(baseline, []))
        row.update(columns(numerics))


@dataclass(frozen=True)
class Defect:
    """A pair of cells differing only in the switch whose losses are not identical."""

    pair: str
    """The swept values the two cells share (`cuda_graph.impl=none`)."""
    numerics: Numerics

    @property
    def line(self) -> str:
        return (f"defect: the switch pair ({self.pair}) trains differently (max rel diff "
                f"{self.numerics.max_rel_diff:.2g}): the switch must not change numerics; "
                "please report it")


def switch_defects(rows: List[dict], keys: List[str], runs: Dict[str, List[tuple]]) -> List[Defect]:
    """Every switch pair (launcher.sweep.switch) whose cells, compared with each other repeat by
    repeat, are `close` or `different`. A pair with nothing to compare is no defect."""
    if SWITCH not in keys:
        return []
    defects = []
    for row in rows:
        other = partner_by_keys(rows, row, keys) if row.get(SWITCH) == "true" else None
        if other is None or row["cell"] not in runs or other["cell"] not in runs:
            continue
        numerics = compare_runs(runs[row["cell"]], runs[other["cell"]], who="partner")
        if numerics.kind in (CLOSE, DIFFERENT):
            pair = ", ".join(f"{k}={row[k]}" for k in keys if k != SWITCH) or "no other swept key"
            defects.append(Defect(pair, numerics))
    return defects
