"""Sweep statistics on synthetic samples whose true answers are known."""

import numpy as np
import pytest

from launcher.sweep import stats


def repeats(rng, center, spread=0.03, num_repeats=3, steps=30):
    """Per-step tokens/s of `num_repeats` runs: center x (1 + relative noise)."""
    return [center * (1 + spread * rng.standard_normal(steps)) for _ in range(num_repeats)]


def test_median_of_pooled_repeats_and_an_interval_around_it():
    median, low, high = stats.median_ci([[1.0, 2.0, 3.0], [4.0, 5.0]])
    assert median == 3.0
    assert 1.0 <= low <= median <= high <= 5.0


def test_the_interval_covers_the_true_ratio_in_most_trials():
    # True ratio 1.2 between two noisy cells; a 95% interval should cover it in most of 40 trials.
    covered = 0
    for trial in range(40):
        rng = np.random.default_rng(trial)
        ratio, low, high, noise = stats.speedup_ci(repeats(rng, 1200.0), repeats(rng, 1000.0),
                                                   seed=trial)
        covered += low <= 1.2 <= high
        assert not noise and low < ratio < high
    assert covered >= 34  # binomial(40, 0.95) falls below 34 with probability < 0.1%


def test_same_distribution_is_within_noise():
    rng = np.random.default_rng(7)
    ratio, low, high, noise = stats.speedup_ci(repeats(rng, 1000.0), repeats(rng, 1000.0))
    assert noise and low < 1.0 < high
    assert ratio == pytest.approx(1.0, abs=0.03)


def test_noise_flag_flips_between_a_tiny_and_a_clear_speedup():
    rng = np.random.default_rng(3)
    base, shape = repeats(rng, 1000.0), repeats(rng, 1.0)
    flags = {factor: stats.speedup_ci([factor * 1000.0 * r for r in shape], base)[3]
             for factor in (1.0, 1.002, 1.1, 0.9)}
    assert flags == {1.0: True, 1.002: True, 1.1: False, 0.9: False}


def test_the_cell_against_itself_is_exactly_one():
    rng = np.random.default_rng(0)
    cell = repeats(rng, 500.0)
    ratio, _, _, noise = stats.speedup_ci(cell, cell)
    assert ratio == 1.0 and noise


def test_repeat_to_repeat_drift_widens_the_interval():
    # Same steps, but the repeats disagree: resampling repeats must show that uncertainty.
    rng = np.random.default_rng(1)
    steady = [1000.0 * (1 + 0.01 * rng.standard_normal(30)) for _ in range(3)]
    drifting = [r * f for r, f in zip(steady, (0.9, 1.0, 1.1))]
    _, low_s, high_s = stats.median_ci(steady)
    _, low_d, high_d = stats.median_ci(drifting)
    assert high_d - low_d > 3 * (high_s - low_s)


def test_pairs_cancel_the_drift_that_hides_a_saving():
    # Each pair runs in its own phase of the machine (x0.8 .. x1.25); inside a pair the cell is
    # 5% slower. Unpaired, the phases swamp the 5%; paired, they drop out.
    rng = np.random.default_rng(2)
    phases = (0.8, 1.0, 1.25, 0.9)
    faster = [100.0 * f * (1 + 0.01 * rng.standard_normal(30)) for f in phases]
    slower = [105.0 * f * (1 + 0.01 * rng.standard_normal(30)) for f in phases]
    _, low, high, _ = stats.speedup_ci(slower, faster)  # unpaired
    assert low < 1 < high
    saving, low, high = stats.paired_difference_ci(slower, faster)
    assert 0 < low < saving < high
    assert saving == pytest.approx(5.0 * np.mean(phases), rel=0.05)


def test_pairs_of_alike_runs_hold_zero_in_most_trials():
    # Three pairs of runs from one distribution, in drifting phases: the 95% interval should
    # hold zero in most of 200 trials (a bootstrap over the pairs would in only 3 of 4).
    held = 0
    for trial in range(200):
        rng = np.random.default_rng(trial)
        sides = [[f * 100.0 * (1 + 0.02 * rng.standard_normal(30)) for f in (0.8, 1.0, 1.25)]
                 for _ in range(2)]
        _, low, high = stats.paired_difference_ci(*sides)
        held += low < 0 < high
    assert held >= 180  # binomial(200, 0.95) falls below 180 with probability < 0.2%


def test_one_pair_gives_no_interval():
    assert stats.paired_difference_ci([[2.0, 2.0]], [[1.0]]) == (1.0, float("-inf"), float("inf"))


def test_pairs_need_as_many_repeats_a_side():
    with pytest.raises(ValueError, match="2 and 1"):
        stats.paired_difference_ci([[1.0], [2.0]], [[1.0]])


def runs(step_times_by_repeat, tokens_per_gpu=1000.0):
    """A cell's ok runs, repeat r holding step_times_by_repeat[r] (s)."""
    return [stats.RepeatRun(r, tokens_per_gpu, steps) for r, steps in
            enumerate(step_times_by_repeat)]


def test_a_comparison_pairs_runs_by_repeat_and_cancels_the_rounds_drift():
    # round phases x0.8 .. x1.25; inside each round the cell's step is 5% longer
    rng = np.random.default_rng(2)
    phases = (0.8, 1.0, 1.25, 0.9)
    other = runs([0.100 * f * (1 + 0.01 * rng.standard_normal(30)) for f in phases])
    cell = runs([0.105 * f * (1 + 0.01 * rng.standard_normal(30)) for f in phases])
    found = stats.compare(cell, other)
    assert found.ratio == pytest.approx(1 / 1.05, rel=0.01) and found.num_pairs == 4
    assert found.high < 1 and found.significant


def test_a_comparison_uses_only_the_repeats_both_sides_ran():
    cell = runs([[0.1] * 5, [0.1] * 5])
    other = [stats.RepeatRun(1, 1000.0, [0.2] * 5)]  # its repeat 0 failed
    found = stats.compare(cell, other)
    assert found.num_pairs == 1 and found.ratio == pytest.approx(2.0)
    assert found.step_noise_only and not found.significant
    assert stats.compare(cell, [stats.RepeatRun(5, 1000.0, [0.2])]) is None


@pytest.mark.parametrize("num_repeats", [1, 2, 3])
def test_either_way_round_and_as_a_saving_a_pair_gives_one_verdict(num_repeats):
    """A speedup of B against A, A's against B and B's saving against A agree in every trial:
    the same pairs, the same interval, mapped monotonically."""
    verdicts = set()
    for trial in range(200):
        rng = np.random.default_rng(trial)
        drift = 1 + 0.2 * rng.random(num_repeats)
        a = runs([0.1 * d * (1 + 0.05 * rng.standard_normal(8)) for d in drift])
        b = runs([0.1 * d * (1 + 0.02 * trial / 200) * (1 + 0.05 * rng.standard_normal(8))
                  for d in drift])
        ab, ba = stats.compare(a, b), stats.compare(b, a)
        saving, low, high = ab.saving_s(0.1)
        assert ba.ratio == pytest.approx(1 / ab.ratio)
        assert (ba.low, ba.high) == pytest.approx((1 / ab.high, 1 / ab.low), rel=1e-9)
        assert ab.within_noise == ba.within_noise == (low <= 0 <= high)
        assert (saving > 0) == (ab.ratio > 1) and low <= saving <= high
        verdicts.add(ab.within_noise)
    assert verdicts == {True, False}  # both verdicts occurred: the agreement was tested


def test_pairs_of_alike_cells_are_within_noise_in_most_trials():
    held = 0
    for trial in range(200):
        rng = np.random.default_rng(trial)
        phases = (0.8, 1.0, 1.25)
        a, b = (runs([0.1 * f * (1 + 0.02 * rng.standard_normal(30)) for f in phases])
                for _ in range(2))
        held += stats.compare(a, b).within_noise
    assert held >= 180  # binomial(200, 0.95) falls below 180 with probability < 0.2%
