"""The interleaved A/B statistic on simulated timings (recorded-data style: no GPU needed)."""

import random

import pytest

from compileiq.evaluate.stats import (
    Verdict,
    interleaved,
    interval_ranks,
    judge,
    noise_delta,
    verdict,
)


def test_interval_ranks_match_the_binomial_tables():
    assert interval_ranks(10) == (2, 9)
    assert interval_ranks(20) == (6, 15)
    assert interval_ranks(30) == (10, 21)
    with pytest.raises(ValueError):
        interval_ranks(5)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(1.05, 1.10, Verdict.SLOWER), (0.90, 0.95, Verdict.FASTER), (0.99, 1.01, Verdict.SAME),
     (0.97, 1.01, Verdict.INCONCLUSIVE), (1.01, 1.03, Verdict.INCONCLUSIVE)],
)
def test_verdict_against_the_threshold(low, high, expected):
    assert verdict(low, high, 0.02) is expected


def _sampler(rng: random.Random, mean: float, noise: float = 0.03, drift: list[float] | None = None):
    def sample(k: int) -> list[float]:
        level = drift[0] if drift else 1.0
        if drift:
            drift[0] *= rng.choice((0.98, 1.02))  # the card's state wanders between rounds
        return [mean * level * rng.lognormvariate(0, noise) for _ in range(k)]

    return sample


def test_false_alarms_stay_rare_on_identical_arms():
    alarms = 0
    for seed in range(200):
        rng = random.Random(seed)
        drift = [1.0]
        result = interleaved(_sampler(rng, 1.0, drift=drift), _sampler(rng, 1.0, drift=drift), seed=seed)
        alarms += result.verdict in (Verdict.FASTER, Verdict.SLOWER)
    assert alarms / 200 <= 0.05


def test_a_real_speedup_is_found_with_its_interval():
    rng = random.Random(1)
    result = interleaved(_sampler(rng, 1.0), _sampler(rng, 0.9), seed=1)
    assert result.verdict is Verdict.FASTER
    assert result.low <= 0.9 <= result.high
    assert result.speedup == pytest.approx(1 / 0.9, rel=0.03)


def test_undecided_comparisons_escalate_the_rounds():
    rng = random.Random(2)
    result = interleaved(_sampler(rng, 1.0, noise=0.2), _sampler(rng, 0.985, noise=0.2), seed=2)
    assert result.rounds in (10, 20, 30)
    assert result.rounds > 10 or result.verdict is not Verdict.INCONCLUSIVE


def test_noise_threshold():
    assert noise_delta([]) == 0.02
    assert noise_delta([1.001, 0.999, 1.0]) == 0.02
    assert noise_delta([1.05, 0.95, 1.04, 0.96]) == pytest.approx(0.09)


def test_judge_uses_the_median_ratio():
    result = judge([0.8, 0.81, 0.82, 0.83, 0.84, 0.85, 0.86, 0.87, 0.88, 0.89], 0.02)
    assert result.estimate == pytest.approx(0.845)
    assert (result.low, result.high) == (0.81, 0.88)
    assert result.verdict is Verdict.FASTER
