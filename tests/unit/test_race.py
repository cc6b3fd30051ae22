"""The tuner's racing rule (launcher.sweep.race) on synthetic throughput samples."""

import numpy as np

from launcher.sweep.race import losers, step, within_noise


def runs(mean: float, count: int, seed: int, spread: float = 10.0) -> list:
    rng = np.random.default_rng(seed)
    return [rng.normal(mean, spread, size=20) for _ in range(count)]


def test_a_clear_loser_is_dropped_after_the_first_eligible_round():
    samples = {"fast": runs(1000, 2, 0), "tie": runs(1001, 2, 1), "slow": runs(700, 2, 2)}
    drops, ended = step(samples, round_=2, min_repeats=2, repeats=5)
    assert set(drops) == {"slow"}
    assert drops["slow"].round == 2 and "lies wholly below the best cell's" in drops["slow"].reason
    assert ended == "the 2 cells left are within noise of each other after round 2"


def test_nothing_is_dropped_before_min_repeats():
    samples = {"fast": runs(1000, 1, 0), "slow": runs(700, 1, 2)}
    assert step(samples, round_=1, min_repeats=2, repeats=5) == ({}, "")


def test_a_tie_is_kept_and_runs_on_until_the_rounds_are_done():
    samples = {"a": runs(1000, 3, 0, spread=200), "b": runs(1040, 3, 1, spread=200)}
    assert losers(samples, 3) == {}
    assert within_noise(samples)


def test_the_race_ends_when_one_cell_is_left_or_the_rounds_are_done():
    drops, ended = step({"fast": runs(1000, 2, 0), "slow": runs(500, 2, 1)}, 2, 2, 5)
    assert set(drops) == {"slow"} and ended == "one cell left after round 2"
    # apart (not within noise), yet overlapping (no loser): the last round ends the race
    samples = {"a": runs(1000, 3, 0, spread=30), "b": runs(1020, 3, 1, spread=30)}
    assert losers(samples, 3) == {} and not within_noise(samples)
    assert step(samples, 2, 2, 3) == ({}, "")
    assert step(samples, 3, 2, 3) == ({}, "sweep.repeats=3 rounds done")
