"""Runtime objectives: compile many candidates, measure few.

With `--objective time` a compile costs a second or so of CPU, a measurement the GPU's time (an
executable to build, inputs to generate, a timed run). So each batch after the baseline's:

1. the searcher proposes `factor` times as many candidates as the batch may measure;
2. each is compiled (no GPU; cached, so that its trial later is a build-cache hit) and its static
   facts (spill bytes, occupancy) are read from the compiler's report;
3. a candidate that the static no-harm rules of `compileiq.evaluate.eligibility` refuse against
   its reference build (more spill bytes; less occupancy with no fewer spill bytes; ptxas
   optimisation lowered with no spill or occupancy gain) is recorded as a failed trial, with its
   static metrics and the reason "screened: <rule>", and is never measured. The searcher learns it
   as a failure, so it steers away from configurations that spill (a feasibility signal). A
   candidate that does not build is recorded as the failure it is. The reference is the baseline's
   build for a candidate with the baseline's macros; for one with other macro values (another tile
   size: another algorithm, whose registers and occupancy are its own) it is the baseline's
   settings with those macros, compiled once: the rules judge what the compiler settings do to
   that source, and only a measurement judges the macros (refusing every tile size with less
   occupancy than the defaults' refused 42 of sgemm's 73 candidates, the ones a GEMM is tuned for);
4. a candidate refused for a lower optimisation level alone is proposed again at the default level
   (`repairs`): the searcher's random start lowers a level in most proposals, and without the
   repair those proposals were spent (36 of 43 candidates on reduction on the H200, before it);
5. the survivors are measured in the order of a static prior: machine code that was already
   measured first (the measurement cache answers: free), then fewer spill bytes, then higher
   occupancy, then the searcher's own order. At most the batch size of new machine codes are
   measured; the other survivors are left untried (no trial: the searcher may propose them
   again, and their builds are cached).

The budget of a runtime objective counts the trials that reached the GPU (and failures); screened
trials do not count, and screening stops the run once it has screened `factor` x budget trials.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compileiq.build.compile import Build
from compileiq.core.records import SCREEN, Trial
from compileiq.core.space import Config
from compileiq.evaluate.eligibility import (
    Reference,
    at_default_level,
    lowered_optimisation,
    missing_metrics,
    refusal,
)
from compileiq.evaluate.launch_bound import Bounds
from compileiq.evaluate.metrics import Evaluation
from compileiq.evaluate.timed_key import timed_key
from compileiq.evaluate.unscored import Unscored

SCREENED = "screened: "


@dataclass(frozen=True)
class ScreeningPolicy:
    factor: int = 3  # candidates compiled per candidate measured
    tilings: bool = True  # judge a candidate of other macro values against its own tiling's build
    repair: bool = True  # propose a candidate refused for a lower level alone again at the default level


@dataclass(frozen=True)
class Candidate:
    config: Config
    build: Build
    static: Evaluation  # the static evaluator's verdict on the build (its metrics: spills, occupancy)

    @property
    def timed(self) -> str | None:
        """What measuring it measures (`timed_key`): its code, launched as its macros launch it."""
        return timed_key(self.build.code_hash, self.config.as_dict()) if self.build.code_hash else None


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


def tiling(config: Config, baseline: Mapping[str, Any]) -> Config | None:
    """The baseline's settings with `config`'s macro values: the reference build its compiler
    settings are judged against; None when its macros are the baseline's (the baseline is)."""
    macros = {name: value for name, value in config.as_dict().items() if name.startswith("define.")}
    if all(baseline.get(name) == value for name, value in macros.items()):
        return None
    return Config.of({**baseline, **macros})


def tiling_reference(config: Config, static: Evaluation, baseline: Reference) -> Reference | None:
    """The reference a tiling's build gives (None when it does not build: the baseline's holds): its
    spills, occupancy, kernels left unscored and launch bounds, each as `Reference.of` reads a row's."""
    if static.value is None or missing_metrics(static.metrics) is not None:
        return None
    return Reference(int(static.metrics["spill_bytes"]), float(static.metrics["occupancy"]), config.as_dict(),
                     baseline.objective, baseline.against, Unscored.of(static.metrics), Bounds.of(static.metrics))


class Tilings:
    """Screening's reference per macro values (`tiling`), each judged once per run: which tilings a
    batch must compile beside its candidates, then which reference judges each candidate."""

    def __init__(self, baseline: Mapping[str, Any]) -> None:
        self._baseline = dict(baseline)
        self._known: dict[str, Reference | None] = {}  # tiling key -> its reference (None: it does not build)

    def to_build(self, candidates: Sequence[Config]) -> list[Config]:
        """The tilings not judged yet that are not candidates themselves (compile them with the batch)."""
        keys = {c.key for c in candidates}
        new = {t.key: t for c in candidates if (t := tiling(c, self._baseline)) is not None and t.key not in self._known}
        return [t for key, t in new.items() if key not in keys]

    def references(self, candidates: Sequence[Config], builds: Mapping[str, Build],
                   judge: Callable[[Build, Config], Evaluation], baseline: Reference) -> dict[str, Reference]:
        """Config key -> the reference of each candidate of other macros than the baseline's (its
        tiling's build judged by `judge`, once); a tiling that does not build leaves the baseline's."""
        found: dict[str, Reference] = {}
        for candidate in candidates:
            if (t := tiling(candidate, self._baseline)) is None:
                continue
            if t.key not in self._known:
                self._known[t.key] = tiling_reference(t, judge(builds[t.key], t), baseline)
            if (reference := self._known[t.key]) is not None:
                found[candidate.key] = reference
        return found


def repairs(rejected: Sequence[Rejected], defaults: Mapping[str, Any]) -> list[Config]:
    """The candidates refused for a lower optimisation level alone, at the default level."""
    found: dict[str, Config] = {}
    for refused in rejected:
        config = refused.candidate.config.as_dict()
        if (refused.evaluation.reason or "").startswith(f"{SCREENED}lowers optimisation") and \
                lowered_optimisation(config, defaults):
            repaired = Config.of(at_default_level(config, defaults))
            found.setdefault(repaired.key, repaired)
    return list(found.values())


def select(candidates: Sequence[Candidate], reference: Reference, count: int,
           measured_codes: Collection[str] = (), references: Mapping[str, Reference] | None = None) -> Selection:
    """Split one batch's compiled candidates into those to measure, reject and hold; `references`
    (config key -> reference) judges a candidate of other macros than the baseline's (`tiling`)."""
    rejected: list[Rejected] = []
    passed: list[tuple[int, Candidate]] = []
    for order, candidate in enumerate(candidates):
        reason = verdict(candidate, (references or {}).get(candidate.config.key, reference))
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
        code = candidate.timed
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
    fresh = candidate.timed not in measured_codes
    return fresh, int(metrics["spill_bytes"]), -float(metrics["occupancy"]), order  # `refusal` saw both
