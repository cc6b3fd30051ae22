"""The tuner's race (sweep.tune=true): run the valid cells in rounds, and from round
sweep.min_repeats on stop running every cell whose throughput interval lies wholly below the best
cell's, on the same two-level bootstrap the report uses (launcher.sweep.stats).

With sweep.memory_limit_gib, a cell whose run's peak memory (RunSummary.peak_memory_bytes) is
above the limit leaves the race after that run's round. The race ends when one cell is left, when
the cells left are all within noise of the best (each one's speedup interval against it holds
1.0), or after sweep.repeats rounds. Its state is never stored: `replay` recomputes it from the
runs on disk, round by round, so a resumed sweep continues the race where it stopped, the report
shows the same drops, and a finished repeat never reruns.
A cell whose run in a round failed leaves the race (its row says why); it is not retried.
Unless sweep.allow_numerics_change, a cell whose run trains differently from the baseline's run of
the same round (launcher.sweep.numerics) leaves the race too: the tuner would refuse it, so it
must not set the bar the other cells are dropped against.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

from launcher.sweep import stats
from launcher.sweep.numerics import DIFFERENT, kind_of, max_rel_diff
from launcher.summary import RunSummary, read as read_summary
from launcher.sweep.folders import attempts
from launcher.sweep.plan import Plan

GIB = 2**30


@dataclass
class Drop:
    round: int
    """The round after which the cell stopped running (it ran this many)."""
    reason: str
    for_numerics: bool = False
    """It trains differently from the baseline (the tuner would refuse it for that)."""


@dataclass
class Race:
    rounds_done: int
    alive: List[str]
    dropped: Dict[str, Drop] = field(default_factory=dict)
    ended: str = ""
    """Why the race ended; "" while rounds are left to run."""

    def rounds_of(self, cell_id: str, repeats: int) -> int:
        """The rounds a cell runs in this race (so far): its drop round, else all."""
        drop = self.dropped.get(cell_id)
        if drop:
            return drop.round
        return self.rounds_done if self.ended else repeats


def losers(samples: Dict[str, List[Sequence[float]]], round_: int) -> Dict[str, Drop]:
    """The racing rule, after `round_`: every cell whose interval lies wholly below the best's."""
    intervals = {cell: stats.median_ci(runs) for cell, runs in samples.items()}
    best = max(intervals, key=lambda c: intervals[c][0])
    _, best_low, best_high = intervals[best]
    return {cell: Drop(round_, f"dropped after round {round_}: its throughput interval "
                               f"[{low:,.0f}, {high:,.0f}] tokens/s/GPU lies wholly below the "
                               f"best cell's [{best_low:,.0f}, {best_high:,.0f}]")
            for cell, (_, low, high) in intervals.items() if high < best_low}


def within_noise(samples: Dict[str, List[Sequence[float]]]) -> bool:
    """Whether every cell's speedup interval against the best cell holds 1.0."""
    medians = {cell: float(np.median(stats.pooled(runs))) for cell, runs in samples.items()}
    best = max(medians, key=medians.get)
    return all(stats.speedup_ci(runs, samples[best])[3] for cell, runs in samples.items()
               if cell != best)


def step(samples: Dict[str, List[Sequence[float]]], round_: int, min_repeats: int,
         repeats: int) -> tuple:
    """One round's decision: (drops, why the race ends or "")."""
    drops = losers(samples, round_) if round_ >= min_repeats and len(samples) > 1 else {}
    left = {c: s for c, s in samples.items() if c not in drops}
    if len(left) <= 1:
        return drops, f"one cell left after round {round_}"
    if round_ >= min_repeats and within_noise(left):
        return drops, (f"the {len(left)} cells left are within noise of each other after round "
                       f"{round_}")
    if round_ == repeats:
        return drops, f"sweep.repeats={repeats} rounds done"
    return drops, ""


def replay(plan: Plan) -> Race:
    """The race as the runs on disk decide it: round by round, while a round is complete."""
    race = Race(0, [c.id for c in plan.cells if c.valid])
    runs = {cell: [] for cell in race.alive}
    for round_ in range(1, plan.repeats + 1):
        outcome = {cell: repeat_outcome(plan, cell, round_ - 1) for cell in race.alive}
        if any(result is None for result in outcome.values()):
            return race  # this round has yet to run (in part)
        baseline = outcome.get(plan.baseline)
        for cell, result in outcome.items():
            if isinstance(result, str):
                race.dropped[cell] = Drop(round_, f"left the race in round {round_}: its run "
                                                  f"ended {result}")
            elif too_big := over_limit(result, plan.memory_limit_gib):
                race.dropped[cell] = Drop(round_, too_big.format(round=round_))
            elif changed := changes_numerics(result, baseline, plan.allow_numerics_change):
                race.dropped[cell] = Drop(round_, changed.format(round=round_), for_numerics=True)
            else:
                runs[cell].append(np.asarray(result.throughput_samples()))
        race.alive = [c for c in race.alive if c not in race.dropped]
        race.rounds_done = round_
        if not race.alive:
            race.ended = f"no cell left after round {round_}"
            return race
        drops, race.ended = step({c: runs[c] for c in race.alive}, round_, plan.min_repeats,
                                 plan.repeats)
        race.dropped.update(drops)
        race.alive = [c for c in race.alive if c not in drops]
        if race.ended:
            return race
    return race


def over_limit(summary: RunSummary, limit_gib: Optional[float]) -> str:
    """Why a run's cell leaves the race for its memory ({round} left to fill); "" if it fits."""
    peak = summary.peak_memory_bytes
    if limit_gib is None or peak is None or peak <= limit_gib * GIB:
        return ""
    return (f"dropped after round {{round}}: its peak memory {peak / GIB:.3g} GiB is above "
            f"sweep.memory_limit_gib={limit_gib:g}")


def changes_numerics(summary: RunSummary, baseline, allowed: bool) -> str:
    """Why a run's cell leaves the race for training differently from the baseline's run of the
    same round ({round} left to fill); "" where it trains like it, where that is allowed, or where
    the baseline's run has nothing to compare (it failed, or left the race before)."""
    if allowed or not isinstance(baseline, RunSummary) or summary is baseline:
        return ""
    diff = max_rel_diff(summary, baseline)
    if diff is None or kind_of(diff) != DIFFERENT:
        return ""
    return (f"dropped after round {{round}}: it trains differently from the baseline (max rel "
            f"diff {diff:.2g}); sweep.allow_numerics_change=true keeps it in the race")


def repeat_outcome(plan: Plan, cell: str, repeat: int):
    """A repeat's summary when it ran ok; its status when it ended otherwise; None when it has
    not run."""
    summaries = [read_summary(d) for d in attempts(plan.sweep_dir, cell, repeat)]
    ok = [s for s in summaries if s and s.status == "ok"]
    if ok:
        return ok[0]
    ended = [s for s in summaries if s]
    return ended[-1].status if ended else None

