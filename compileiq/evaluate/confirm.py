"""Screening and confirmation: which screened candidates to re-measure, and whether one really
beats the baseline.

Screening times every candidate cheaply once, so its best is biased low (the winner's curse).
The top few (distinct machine code, correct outputs) are re-measured against the baseline with
the interleaved A/B statistic; the threshold δ comes from an A/A run of the baseline. If none is
FASTER beyond δ, the baseline is kept.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from compileiq.core.errors import CompileIQError
from compileiq.evaluate.measure import TIMING_ONLY, Measurer, RunResult, program_time
from compileiq.evaluate.stats import (
    FINALISTS,
    ROUND_SCHEDULE,
    Comparison,
    Sampler,
    Verdict,
    interleaved,
    interleaved_runs,
    noise_delta,
    ratios,
)

AA_ROUNDS = 10
CONFIRM_TIMEOUT_S = 60.0


class ConfirmError(CompileIQError):
    """A confirmation run gave no samples (the variant failed when re-run)."""


@dataclass(frozen=True)
class Candidate:
    """A screened variant: trial number, what was timed (`timed_key`: its machine code, built with
    its macros), screening median, output check."""

    trial: int
    timed: str
    screen_ms: float
    output_ok: bool


@dataclass(frozen=True)
class Confirmed:
    candidate: Candidate
    comparison: Comparison | None  # None when the candidate failed while being re-measured
    failure: str = ""
    median_ms: float | None = None  # the median of its blocks' medians in the interleaved rounds


@dataclass(frozen=True)
class Confirmation:
    winner: Confirmed | None  # None: keep the baseline
    delta: float  # the FASTER/SLOWER threshold from the baseline's A/A noise (nan: no finalist, no A/A)
    aa_ratios: tuple[float, ...]
    confirmed: tuple[Confirmed, ...]

    @property
    def keeps_baseline(self) -> bool:
        return self.winner is None


def choose_finalists(
    candidates: Sequence[Candidate], baseline_timed: str | None, limit: int = FINALISTS
) -> list[Candidate]:
    """The fastest screened candidates with correct outputs, one per timed key (machine code built
    with its macros), none equal to the baseline's."""
    chosen: list[Candidate] = []
    seen = {baseline_timed} if baseline_timed else set()
    for candidate in sorted(candidates, key=lambda c: (c.screen_ms, c.trial)):
        if candidate.output_ok and candidate.timed not in seen:
            chosen.append(candidate)
            seen.add(candidate.timed)
        if len(chosen) == limit:
            break
    return chosen


def aa_noise(baseline: Sampler, *, rounds: int = AA_ROUNDS, samples: int = 10) -> list[float]:
    """Per-round median ratios of the baseline against itself."""
    pairs = [(baseline(samples), baseline(samples)) for _ in range(rounds)]
    return ratios([a for a, _ in pairs], [b for _, b in pairs])


def pick_winner(confirmed: Sequence[Confirmed]) -> Confirmed | None:
    """The FASTER candidate with the lowest estimated ratio, or None."""
    faster = [c for c in confirmed if c.comparison is not None and c.comparison.verdict is Verdict.FASTER]
    return min(faster, key=lambda c: (c.comparison.estimate if c.comparison else 1.0, c.candidate.trial),
               default=None)


def confirm(
    baseline: Sampler,
    finalists: Sequence[tuple[Candidate, Sampler]],
    *,
    samples: int = 10,
    seed: int = 0,
    schedule: Sequence[int] = ROUND_SCHEDULE,
    note: Callable[[str], None] | None = None,
) -> Confirmation:
    """A/A of the baseline for δ, then each finalist against the baseline, interleaved; `note`
    hears each step's outcome as it ends (a confirmation can take minutes)."""
    tell = note or (lambda _: None)
    if not finalists:  # no A/A either: 20 runs of the measuring program would decide nothing
        tell("nothing to confirm: no screened variant with other machine code than the baseline's and correct outputs")
        return Confirmation(None, math.nan, (), ())
    started = time.perf_counter()
    aa = aa_noise(baseline, samples=samples)
    delta = noise_delta(aa)
    tell(f"A/A: the baseline against itself in {len(aa)} rounds, threshold ±{delta:.1%} "
         f"({time.perf_counter() - started:.0f} s)")
    results = []
    for index, (candidate, sampler) in enumerate(finalists):
        started = time.perf_counter()
        kept: list[float] = []
        try:
            comparison = interleaved(baseline, _keeping(sampler, kept), delta=delta, samples=samples,
                                     schedule=schedule, seed=seed + index)
        except ConfirmError as error:
            results.append(Confirmed(candidate, None, str(error)))
            tell(f"#{candidate.trial}: failed when measured again: {error}")
            continue
        results.append(Confirmed(candidate, comparison, median_ms=statistics.median(kept)))
        tell(f"#{candidate.trial}: {comparison.verdict.value}, median speedup {comparison.speedup:.3f}x, "
             f"95% [{1 / comparison.high:.3f}, {1 / comparison.low:.3f}] in {comparison.rounds} rounds "
             f"({time.perf_counter() - started:.0f} s)")
    return Confirmation(pick_winner(results), delta, tuple(aa), tuple(results))


def _keeping(sampler: Sampler, kept: list[float]) -> Sampler:
    """`sampler`, the median of each of its blocks also added to `kept`: what a round of the
    gate's comparison with a recorded time divides (a block's median by that time)."""

    def sample(k: int) -> list[float]:
        block = sampler(k)
        kept.append(statistics.median(block))
        return block

    return sample


def confirmation_runs(finalists: int, schedule: Sequence[int] = ROUND_SCHEDULE) -> tuple[int, int]:
    """The fewest and the most runs of a measuring program a confirmation of `finalists` takes:
    two per A/A round, then one interleaved comparison per finalist."""
    fewest, most = interleaved_runs(schedule)
    return 2 * AA_ROUNDS + fewest * finalists, 2 * AA_ROUNDS + most * finalists


def confirm_args(samples: int, timing_only: bool = True) -> tuple[str, ...]:
    """Harness options for one confirmation block: exactly `samples` samples, short warm-up and,
    `timing_only`, no output verification (copying the outputs back, checking every element was
    written, hashing and dumping them was up to 3.4 s of a 4.3 s process on the H200)."""
    return ("--samples", str(samples), "--max-samples", str(samples), "--min-time-ms", "0",
            "--warmup-ms", "5", *([TIMING_ONLY] if timing_only else []))


def executable_sampler(
    measurer: Measurer, executable: bytes, extra_args: Sequence[str] = (),
    timeout_s: float = CONFIRM_TIMEOUT_S,
) -> Sampler:
    """A Sampler that runs `executable` once per block of samples on `measurer`. Its first block
    verifies the outputs as a screening run does (an unwritten element fails it: the gate's
    rebuild was never screened); the rest only time."""
    verified: list[bool] = []

    def sample(k: int) -> list[float]:  # no --dump: nobody reads a block's outputs
        run = measurer.measure(executable, [*extra_args, *confirm_args(k, timing_only=bool(verified))], timeout_s,
                               dump=False)
        if run.failure is not None or not run.harness.samples_ms:
            raise ConfirmError(run.failure or "the harness reported no samples")
        verified.append(True)
        return list(run.harness.samples_ms)

    return sample


HARNESS_BLOCK = 10  # samples per block of a harness run (the design's k)
PROGRAM_BLOCK = 1  # program mode: a block is one run of the program (it prints one time)


def block_sampler(measurer: Measurer, executable: bytes, run_args: Sequence[str], program: bool,
                  regex: str | None = None) -> tuple[Sampler, int]:
    """One build's blocks for confirmation and `gate --device`, with the samples a block holds:
    harness runs, or (`program`) runs of the program and the time it prints (`regex`)."""
    if program:
        return program_sampler(measurer, executable, run_args, partial(program_time, regex=regex)), PROGRAM_BLOCK
    return executable_sampler(measurer, executable, run_args), HARNESS_BLOCK


def program_sampler(
    measurer: Measurer, executable: bytes, args: Sequence[str], metric: Callable[[RunResult], float | None],
    timeout_s: float = CONFIRM_TIMEOUT_S,
) -> Sampler:
    """Program mode: a block of k samples is k runs of the program with its own arguments alone
    (no harness option, no --dump), each giving the one time it prints (`metric`)."""

    def sample(k: int) -> list[float]:
        values = []
        for _ in range(k):
            run = measurer.measure(executable, list(args), timeout_s, dump=False)
            value = metric(run)
            if value is None:
                raise ConfirmError(run.failure or f"the program printed no time (exit code {run.returncode})")
            values.append(value)
        return values

    return sample


def relative_noise(samples_ms: Sequence[float]) -> float:
    """IQR / median of one arm's samples (for reports)."""
    if len(samples_ms) < 2:
        return 0.0
    q = statistics.quantiles(samples_ms, n=4)
    return (q[2] - q[0]) / statistics.median(samples_ms)
