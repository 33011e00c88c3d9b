"""Screening and confirmation decisions, with synthetic samplers standing in for the GPU."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

import pytest

from compileiq.evaluate.confirm import (
    Candidate,
    ConfirmError,
    choose_finalists,
    confirm,
    confirm_args,
    confirmation_runs,
    executable_sampler,
)
from compileiq.evaluate.measure import FakeMeasurer, RunResult, synthetic_result
from compileiq.evaluate.stats import Sampler, Verdict


def noisy(center: float, noise: float, seed: int) -> Sampler:
    rng = random.Random(seed)
    return lambda k: [center * (1 + rng.gauss(0, noise)) for _ in range(k)]


def test_finalists_are_fastest_correct_distinct_and_not_the_baseline_code() -> None:
    candidates = [
        Candidate(1, "base", 0.80, True),  # same machine code as the baseline
        Candidate(2, "a", 0.85, True),
        Candidate(3, "a", 0.86, True),  # duplicate code
        Candidate(4, "b", 0.70, False),  # wrong result
        Candidate(5, "c", 0.90, True),
        Candidate(6, "d", 0.95, True),
        Candidate(7, "e", 0.99, True),
        Candidate(8, "f", 1.20, True),
    ]
    chosen = choose_finalists(candidates, "base", limit=4)
    assert [c.trial for c in chosen] == [2, 5, 6, 7]


def test_a_clear_winner_is_faster_with_an_interval() -> None:
    baseline = noisy(1.0, 0.01, 1)
    finalists = [(Candidate(2, "a", 0.8, True), noisy(0.8, 0.01, 2)),
                 (Candidate(3, "b", 0.9, True), noisy(0.9, 0.01, 3))]
    result = confirm(baseline, finalists, samples=5)
    assert not result.keeps_baseline and result.winner is not None
    comparison = result.winner.comparison
    assert result.winner.candidate.trial == 2 and comparison is not None
    assert comparison.verdict is Verdict.FASTER and comparison.low < 0.8 < comparison.high < 0.9
    assert comparison.speedup > 1.2 and result.delta >= 0.02


def test_a_confirmed_candidate_records_the_median_of_its_rounds_blocks() -> None:
    """What the ACF records as `confirmed_median` (the gate's reference): the median over every
    block of the finalist's interleaved rounds, each block by its median (what a round of the
    gate divides by the recorded time), not one block. A GPU with two clock states gives blocks
    in two modes; one block (a screening run) is either, the rounds' median sits where most are."""
    medians: list[float] = []
    blocks = iter(range(10_000))

    def bimodal(k: int) -> list[float]:
        slow = next(blocks) % 3 == 0  # one block in three in the slow state
        block = [(0.88 if slow else 0.80) + 0.001 * i for i in range(k)]
        medians.append(statistics.median(block))
        return block

    result = confirm(noisy(1.0, 0.01, 1), [(Candidate(2, "a", 0.88, True), bimodal)], samples=5)
    assert result.winner is not None and len(medians) >= 10
    assert result.winner.median_ms == statistics.median(medians) == pytest.approx(0.802)

    def crashed(k: int) -> list[float]:
        raise ConfirmError("crashed")

    failed = confirm(noisy(1.0, 0.01, 1), [(Candidate(2, "a", 0.5, True), crashed)], samples=5)
    assert failed.confirmed[0].median_ms is None


def test_noise_keeps_the_baseline() -> None:
    baseline = noisy(1.0, 0.03, 1)
    finalists = [(Candidate(2, "a", 0.95, True), noisy(0.995, 0.03, 2))]
    result = confirm(baseline, finalists, samples=5)
    assert result.keeps_baseline and result.winner is None
    [only] = result.confirmed
    assert only.comparison is not None and only.comparison.verdict is not Verdict.FASTER


def test_a_candidate_that_fails_when_rerun_is_skipped() -> None:
    def broken(k: int) -> list[float]:
        raise ConfirmError("crashed: killed by signal 11")

    finalists = [(Candidate(2, "a", 0.5, True), broken), (Candidate(3, "b", 0.8, True), noisy(0.8, 0.01, 3))]
    result = confirm(noisy(1.0, 0.01, 1), finalists, samples=5)
    assert result.winner is not None and result.winner.candidate.trial == 3
    assert result.confirmed[0].comparison is None and "signal 11" in result.confirmed[0].failure


def test_each_step_of_a_confirmation_is_told_as_it_ends() -> None:
    """A confirmation is minutes of GPU runs: the A/A threshold, then each finalist's verdict
    (or failure), are told as they come, not only at the end."""
    def broken(k: int) -> list[float]:
        raise ConfirmError("crashed: killed by signal 11")

    notes: list[str] = []
    finalists = [(Candidate(2, "a", 0.8, True), noisy(0.8, 0.01, 2)), (Candidate(3, "b", 0.5, True), broken)]
    result = confirm(noisy(1.0, 0.01, 1), finalists, samples=5, note=notes.append)
    comparison = result.confirmed[0].comparison
    assert comparison is not None and len(notes) == 3
    assert notes[0].startswith("A/A: the baseline against itself in 10 rounds, threshold ±")
    assert notes[1].startswith(f"#2: FASTER, median speedup {comparison.speedup:.3f}x, 95% [")
    assert f"in {comparison.rounds} rounds" in notes[1]
    assert notes[2] == "#3: failed when measured again: crashed: killed by signal 11"


def test_no_finalist_runs_nothing_not_even_the_a_a() -> None:
    """Every screened variant had the baseline's code: 20 A/A runs would decide nothing."""
    def never(k: int) -> list[float]:
        raise AssertionError("the baseline was run")

    notes: list[str] = []
    result = confirm(never, [], note=notes.append)
    assert result.keeps_baseline and result.confirmed == () and result.aa_ratios == ()
    assert notes == [("nothing to confirm: no screened variant with other machine code than the baseline's and "
                     "correct outputs")]


def test_the_runs_a_confirmation_takes() -> None:
    assert confirmation_runs(1) == (40, 80)  # A/A 10 rounds x 2, then 10 to 30 rounds x 2
    assert confirmation_runs(4) == (100, 260)
    assert confirmation_runs(0) == (20, 20)


def test_executable_sampler_runs_exactly_k_samples_on_the_measurer() -> None:
    def script(exe: bytes, args: Sequence[str]) -> RunResult:
        k = int(args[list(args).index("--max-samples") + 1])
        status = "ok" if exe == b"good" else "error"
        return RunResult(synthetic_result([1.0] * k, status=status), b"", 0, False, 0.1)

    fake = FakeMeasurer(script)
    sampler = executable_sampler(fake, b"good", ["--set", "n=4"])
    assert sampler(7) == [1.0] * 7 and sampler(5) == [1.0] * 5
    # the first block verifies the outputs; the later ones only time (no copy-back, hash or dump)
    assert fake.calls[0][1] == ("--set", "n=4", *confirm_args(7, timing_only=False))
    assert fake.calls[1][1] == ("--set", "n=4", *confirm_args(5)) and confirm_args(5)[-1] == "--timing-only"
    assert fake.dumps == [False, False]  # nobody reads a block's outputs: none is dumped
    try:
        executable_sampler(fake, b"bad")(3)
    except ConfirmError as error:
        assert "error" in str(error)
    else:
        raise AssertionError("a failing run must raise ConfirmError")
