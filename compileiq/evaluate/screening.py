"""Runtime objectives: compile many candidates, measure few.

With `--objective time` a compile costs a second or so of CPU, a measurement the GPU's time (an
executable to build, inputs to generate, a timed run). So each batch after the baseline's:

1. the searcher proposes `factor` times as many candidates as the batch may measure;
2. each is compiled (no GPU; cached, so that its trial later is a build-cache hit) and its static
   facts (spill bytes, occupancy) are read from the compiler's report;
3. a candidate that the static no-harm rules of `compileiq.evaluate.eligibility` refuse against the
   baseline's build (more spill bytes than the defaults; less occupancy with no fewer spill
   bytes; ptxas optimisation lowered with no spill or occupancy gain) is recorded as a failed
   trial, with its static metrics and the reason "screened: <rule>", and is never measured. The
   searcher learns it as a failure, so it steers away from configurations that spill (a
   feasibility signal). A candidate that does not build is recorded as the failure it is;
4. the survivors are measured in the order of a static prior: machine code that was already
   measured first (the measurement cache answers: free), then fewer spill bytes, then higher
   occupancy, then the searcher's own order. At most the batch size of new machine codes are
   measured; the other survivors are left untried (no trial: the searcher may propose them
   again, and their builds are cached).

The budget of a runtime objective counts the trials that reached the GPU (and failures); screened
trials do not count, and screening stops the run once it has screened `factor` x budget trials.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from compileiq.build.compile import Build
from compileiq.core.records import SCREEN, Trial
from compileiq.core.space import Config
from compileiq.evaluate.eligibility import Reference, refusal
from compileiq.evaluate.metrics import Evaluation

SCREENED = "screened: "


@dataclass(frozen=True)
class ScreeningPolicy:
    factor: int = 3  # candidates compiled per candidate measured


@dataclass(frozen=True)
class Candidate:
    config: Config
    build: Build
    static: Evaluation  # the static evaluator's verdict on the build (its metrics: spills, occupancy)


@dataclass(frozen=True)
class Rejected:
    candidate: Candidate
    evaluation: Evaluation  # value None; the reason is "screened: ..." or the build's failure


@dataclass(frozen=True)
class Selection:
    measure: tuple[Config, ...]  # in the order of the static prior
    rejected: tuple[Rejected, ...]  # recorded as failed trials, never measured
    held: tuple[Config, ...]  # passed, but over this batch's measuring quota: left untried


def is_screened(trial: Trial) -> bool:
    """True for a trial that screening recorded instead of measuring (its purpose says so)."""
    return trial.purpose == SCREEN


def verdict(candidate: Candidate, reference: Reference) -> str | None:
    """Why the candidate may not be measured, or None when it may."""
    if candidate.static.value is None:
        return candidate.static.reason or "the build failed"
    rule = refusal(candidate.config.as_dict(), candidate.static.metrics, reference)
    return None if rule is None else f"{SCREENED}{rule}"


def select(candidates: Sequence[Candidate], reference: Reference, count: int,
           measured_codes: Collection[str] = ()) -> Selection:
    """Split one batch's compiled candidates into those to measure, reject and hold."""
    rejected: list[Rejected] = []
    passed: list[tuple[int, Candidate]] = []
    for order, candidate in enumerate(candidates):
        reason = verdict(candidate, reference)
        if reason is None:
            passed.append((order, candidate))
        else:
            rejected.append(Rejected(candidate, Evaluation(None, reason, candidate.static.metrics)))
    passed.sort(key=lambda item: _prior(item[1], item[0], measured_codes))
    measure: list[Config] = []
    held: list[Config] = []
    codes = set(measured_codes)
    new_codes = 0
    for _, candidate in passed:
        code = candidate.build.code_hash
        if code in codes:
            measure.append(candidate.config)  # the measurement cache answers
        elif new_codes < count:
            measure.append(candidate.config)
            new_codes += 1
            if code is not None:
                codes.add(code)
        else:
            held.append(candidate.config)
    return Selection(tuple(measure), tuple(rejected), tuple(held))


def _prior(candidate: Candidate, order: int, measured_codes: Collection[str]) -> tuple[bool, int, float, int]:
    metrics = candidate.static.metrics
    fresh = candidate.build.code_hash not in measured_codes
    return fresh, int(metrics.get("spill_bytes", 0)), -float(metrics.get("occupancy", 0.0)), order
