"""Statistics of a rank's steps: percentiles, the median's distribution-free interval, the
median rate, the time left, the resident memory and its growth. Pure Python, no torch: the
Recorder measures and passes the numbers in."""

from __future__ import annotations

import math
from typing import Iterable, Optional


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (q in [0, 100]) with linear interpolation, as numpy's default.

    With the n values sorted as x[0] <= ... <= x[n-1], the position is p = (n - 1) * q / 100;
    with i = floor(p) and f = p - i the result is x[i] + (x[i+1] - x[i]) * f (just x[i] when
    f == 0 or i is the last index). This is numpy.percentile(values, q) with method="linear".
    Raises ValueError for no values, a NaN value or q outside [0, 100].
    """
    xs = sorted(float(x) for x in values)
    if not xs:
        raise ValueError("percentile of an empty sequence")
    if any(math.isnan(x) for x in xs):
        raise ValueError("percentile of a sequence containing NaN")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q!r}")
    pos = (len(xs) - 1) * q / 100
    i = math.floor(pos)
    frac = pos - i
    if i + 1 >= len(xs) or frac == 0:
        return xs[i]
    return xs[i] + (xs[i + 1] - xs[i]) * frac


def median_interval(values: Iterable[float], confidence: float = 0.95) -> Optional[tuple]:
    """The distribution-free interval of the median: (x_(j), x_(n+1-j)) of the n sorted values,
    j the largest rank whose binomial tail P(Binomial(n, 1/2) < j) is at most (1 - confidence)
    / 2, so the interval holds the true median at least `confidence` of the time whatever the
    values' distribution (order statistics; no resampling). None below 6 values: even their
    minimum and maximum hold it only 1 - 2 / 2**n of the time (94% for 5)."""
    xs = sorted(float(x) for x in values)
    n, tail = len(xs), (1 - confidence) / 2
    below, j = 0.0, 0
    while j < n and below + math.comb(n, j) / 2 ** n <= tail:
        below += math.comb(n, j) / 2 ** n
        j += 1
    if j == 0:
        return None
    return xs[j - 1], xs[n - j]


def median_per_step(rate, times: Iterable[float]) -> float:
    """The median over steps of rate(step time): the one definition of a run's throughput.

    A run's tokens/s/GPU and TFLOP/s/GPU (summary, console, wandb, TensorBoard) and a sweep
    cell's (table, report; pooled over its repeats, with a bootstrap interval) are all the median
    of the per-step rates over the steady-state steps. Megatron-LM logs the mean over a logging
    interval instead (total over total time); the median is what the sweep's intervals are on,
    and one slow step (a collection, a neighbour) moves it least.
    """
    rates = sorted(rate(float(t)) for t in times)
    if not rates:
        raise ValueError("median_per_step of no steps")
    middle = len(rates) // 2
    return rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2


def step_time_stats(times: Iterable[float]) -> dict[str, float]:
    """Summary of step times: {"p50": median, "p90": 90th percentile, "mean": arithmetic mean}.

    p50 and p90 come from ``percentile`` (linear interpolation); mean is sum(times) / len(times).
    The caller picks which steps to pass in (e.g. leaves out warm-up steps). Raises ValueError
    for no times.
    """
    ts = [float(t) for t in times]
    if not ts:
        raise ValueError("step_time_stats of an empty sequence")
    return {
        "p50": percentile(ts, 50),
        "p90": percentile(ts, 90),
        "mean": sum(ts) / len(ts),
    }


def remaining_s(times: Iterable[float], steps_left: int) -> float:
    """The time the steps left take at the mean step time so far: steps_left * sum(times) /
    len(times) (the first steps' start-up included, so early estimates run high). 0 with no
    step left; raises ValueError with no times."""
    ts = [float(t) for t in times]
    if not ts:
        raise ValueError("remaining_s of no steps")
    return steps_left * sum(ts) / len(ts)


def current_rss_bytes():
    """This process's resident memory now (Linux /proc/self/statm), or None where there is none."""
    import os

    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def growth_per_step(first, last, steps: int):
    """(last - first) / (steps - 1): bytes a step adds, None without two readings."""
    if first is None or last is None or steps < 2:
        return None
    return (last - first) / (steps - 1)
