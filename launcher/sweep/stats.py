"""Sweep statistics: medians and bootstrap confidence intervals over steady-state steps and repeats.

A cell's samples are a list of repeats, each an array of per-step values (tokens/s/GPU of each
steady-state step). The bootstrap is two-level, as the data are: draw repeats with replacement,
then steps with replacement inside each drawn repeat, pool, take the median. With one repeat it is
the plain bootstrap over steps. Speedup is the ratio of a cell's median to the baseline's median;
the interval comes from resampling both independently.
"""

from typing import List, Sequence, Tuple

import numpy as np

NUM_RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_REPEATS = 2
"""Fewer repeats than this on either side: the interval holds step noise only."""


def pooled(repeats: Sequence[Sequence[float]]) -> np.ndarray:
    return np.concatenate([np.asarray(r, dtype=float) for r in repeats])


def bootstrap_medians(repeats: Sequence[Sequence[float]], rng: np.random.Generator,
                      num_resamples: int = NUM_RESAMPLES) -> np.ndarray:
    """The median of each of num_resamples two-level resamples (vectorised: repeats of unequal
    length are padded with NaN, and the padding is left out of each median)."""
    lengths = np.array([len(r) for r in repeats])
    padded = np.full((len(repeats), lengths.max()), np.nan)
    for i, r in enumerate(repeats):
        padded[i, :len(r)] = r
    picks = rng.integers(len(repeats), size=(num_resamples, len(repeats)))
    picked_lengths = lengths[picks][..., None]
    steps = (rng.random((*picks.shape, padded.shape[1])) * picked_lengths).astype(int)
    values = padded[picks[..., None], steps]
    values[np.arange(padded.shape[1]) >= picked_lengths] = np.nan
    return np.nanmedian(values.reshape(num_resamples, -1), axis=1)


def interval(draws: np.ndarray, confidence: float = CONFIDENCE) -> Tuple[float, float]:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)


def median_ci(repeats: Sequence[Sequence[float]], seed: int = 0) -> Tuple[float, float, float]:
    """(median of the pooled samples, interval low, interval high)."""
    draws = bootstrap_medians(repeats, np.random.default_rng(seed))
    return (float(np.median(pooled(repeats))), *interval(draws))


def speedup_ci(cell: List[Sequence[float]], baseline: List[Sequence[float]],
               seed: int = 0) -> Tuple[float, float, float, bool]:
    """(cell median / baseline median, interval low, high, within_noise: the interval holds 1.0)."""
    rng = np.random.default_rng(seed)
    ratio = float(np.median(pooled(cell)) / np.median(pooled(baseline)))
    draws = bootstrap_medians(cell, rng) / bootstrap_medians(baseline, rng)
    low, high = interval(draws)
    return ratio, low, high, bool(low <= 1.0 <= high)


def step_noise_only(*sides: Sequence[Sequence[float]]) -> bool:
    """Whether a comparison has fewer than MIN_REPEATS repeats on some side: its bootstrap then
    resamples only steps of one run, and run-to-run drift (another load, other clocks) lies
    outside its interval, however narrow. Such a difference is never called significant."""
    return min(len(side) for side in sides) < MIN_REPEATS


def difference_ci(cell: List[Sequence[float]], other: List[Sequence[float]],
                  seed: int = 0) -> Tuple[float, float, float]:
    """(median of `cell` - median of `other`, interval low, high): a step-time saving."""
    rng = np.random.default_rng(seed)
    difference = float(np.median(pooled(cell)) - np.median(pooled(other)))
    draws = bootstrap_medians(cell, rng) - bootstrap_medians(other, rng)
    return (difference, *interval(draws))


T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""Student's t 0.975 quantile for 1..30 degrees of freedom (beyond 30: the 30th, a little wide)."""


def paired_difference_ci(cell: List[Sequence[float]], other: List[Sequence[float]]
                         ) -> Tuple[float, float, float]:
    """(mean over pairs of median(cell[i]) - median(other[i]), interval low, high): a saving
    measured in pairs, repeat i of both sides run back to back. A machine's drift between pairs
    (slow phases, another load) moves both sides of a pair alike and drops out of each pair's
    difference. The interval is Student's t over the pairs (a bootstrap over 3 pairs would be
    their min to max, which excludes zero one time in four when nothing differs); one pair
    gives no interval (-inf, inf)."""
    if len(cell) != len(other):
        raise ValueError(f"paired samples need as many repeats a side: {len(cell)} and "
                         f"{len(other)}")
    pairs = np.array([np.median(a) - np.median(b) for a, b in zip(cell, other)])
    mean = float(pairs.mean())
    if len(pairs) < 2:
        return mean, float("-inf"), float("inf")
    half = T_975[min(len(pairs) - 1, len(T_975)) - 1] * pairs.std(ddof=1) / np.sqrt(len(pairs))
    return mean, mean - float(half), mean + float(half)
