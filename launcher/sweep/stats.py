"""Sweep statistics: a cell's throughput with its interval, and one cell against another.

A cell's own throughput: its samples are a list of repeats, each an array of per-step values
(tokens/s/GPU of each steady-state step). The bootstrap is two-level, as the data are: draw
repeats with replacement, then steps with replacement inside each drawn repeat, pool, take the
median. With one repeat it is the plain bootstrap over steps.

One cell against another (a speedup against the baseline, a switch pair's saving): paired by
repeat, one method for both (`compare`). Repeat r of every cell runs in round r, so the machine's
drift between rounds moves both sides of a pair alike and drops out of the pair's ratio. Each
run's rate is its tokens per GPU over its median step time; each pair gives log(cell's rate /
other's rate); the estimate is their mean and the interval Student's t over the pairs,
exponentiated: the geometric mean ratio with its 95% interval. A saving in ms is that same ratio
at the partner's step time (`Comparison.saving_s`), so a pair's speedup and its saving can never
give opposite verdicts. One pair gives no t interval: its interval resamples that pair's steps
only, and it is flagged step noise only, never significant.
"""

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

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


@dataclass(frozen=True)
class RepeatRun:
    """One ok run of a cell: its repeat (its round), its tokens per step per GPU and its
    steady-state step times (s)."""

    repeat: int
    tokens_per_gpu: float
    step_times_s: Sequence[float]

    @property
    def median_step_s(self) -> float:
        return float(np.median(self.step_times_s))

    @property
    def rate(self) -> float:
        """tokens/s/GPU at the run's median step time."""
        return self.tokens_per_gpu / self.median_step_s


@dataclass(frozen=True)
class Comparison:
    """A cell's rate against another's, paired by repeat (`compare`): the geometric mean of the
    pairs' ratios, its 95% interval, and how many pairs it rests on."""

    ratio: float
    low: float
    high: float
    num_pairs: int

    @property
    def step_noise_only(self) -> bool:
        """One pair: its interval holds that pair's step noise only (MIN_REPEATS)."""
        return self.num_pairs < MIN_REPEATS

    @property
    def within_noise(self) -> bool:
        """The interval holds 1.0: no difference told apart from noise."""
        return self.low <= 1.0 <= self.high

    @property
    def significant(self) -> bool:
        return not self.within_noise and not self.step_noise_only

    def inverse(self) -> "Comparison":
        """The other cell against this one: the same pairs, the same verdict."""
        return Comparison(1 / self.ratio, 1 / self.high, 1 / self.low, self.num_pairs)

    def saving_s(self, partner_step_s: float) -> Tuple[float, float, float]:
        """(saving, low, high) in s per step of this cell against its partner, at the partner's
        step time: step_s x (1 - 1/ratio), a monotone map of the ratio and its interval, so the
        saving's interval holds 0 exactly where the ratio's holds 1."""
        return tuple(partner_step_s * (1 - 1 / r) for r in (self.ratio, self.low, self.high))


def compare(cell: Sequence[RepeatRun], other: Sequence[RepeatRun],
            seed: int = 0) -> Optional[Comparison]:
    """`cell` against `other` over the repeats both ran ok (None where there is none): the mean
    of the pairs' log rate ratios with Student's t 95% interval, exponentiated. One pair: the
    interval of a bootstrap over each side's steps (step noise only)."""
    theirs = {run.repeat: run for run in other}
    pairs = [(run, theirs[run.repeat]) for run in cell if run.repeat in theirs]
    if not pairs:
        return None
    logs = np.array([math.log(a.rate / b.rate) for a, b in pairs])
    mean = float(logs.mean())
    if len(pairs) == 1:
        low, high = step_bootstrap_log_ratio(*pairs[0], seed)
    else:
        half = T_975[min(len(logs) - 1, len(T_975)) - 1] * logs.std(ddof=1) / math.sqrt(len(logs))
        low, high = mean - half, mean + half
    return Comparison(math.exp(mean), math.exp(low), math.exp(high), len(pairs))


def step_bootstrap_log_ratio(a: RepeatRun, b: RepeatRun, seed: int) -> Tuple[float, float]:
    """The 95% interval of log(a's rate / b's rate) resampling each run's steps. The slower run
    draws first, so `b` against `a` gets the negated interval: the same verdict either way."""
    slower, faster = sorted((a, b), key=lambda run: run.rate)
    rng = np.random.default_rng(seed)
    drawn = [bootstrap_medians([run.step_times_s], rng) for run in (slower, faster)]
    a_medians, b_medians = drawn if slower is a else drawn[::-1]
    draws = np.log(a.tokens_per_gpu / a_medians) - np.log(b.tokens_per_gpu / b_medians)
    return interval(draws)


def speedup_ci(cell: List[Sequence[float]], baseline: List[Sequence[float]],
               seed: int = 0) -> Tuple[float, float, float, bool]:
    """(cell median / baseline median, interval low, high, within_noise: the interval holds 1.0),
    unpaired: the tuning race's test of whether the cells left are within noise of the best."""
    rng = np.random.default_rng(seed)
    ratio = float(np.median(pooled(cell)) / np.median(pooled(baseline)))
    draws = bootstrap_medians(cell, rng) / bootstrap_medians(baseline, rng)
    low, high = interval(draws)
    return ratio, low, high, bool(low <= 1.0 <= high)


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
