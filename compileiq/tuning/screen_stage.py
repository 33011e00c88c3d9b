"""Screening inside a tuning run (runtime objectives, `compileiq.evaluate.screening`): per batch,
compile the candidates, record those the static rules refuse as screened trials (never measured),
queue the repairs of those refused for a lower optimisation level alone, and hand the tuner the
ones to measure. The tuner owns the loop and the claims; this stage owns what screening keeps
between batches: the tiling references, the repair queue and the count of screened trials."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from compileiq.core.records import SCREEN, Study, Trial
from compileiq.core.space import Config
from compileiq.evaluate import eligibility, screening
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.evaluate.timed_key import timed_key
from compileiq.source.spec import KernelSpec, SourceBundle
from compileiq.tuning.progress import Evaluator, Progress
from compileiq.tuning.runner import TrialRunner

Claim = Callable[[Study, Sequence[Config], str], list[Trial]]


class ScreenStage:
    """One run's screening: `select` per batch, `repairs` first in the next batch's candidates."""

    def __init__(self, policy: screening.ScreeningPolicy, kernel: KernelSpec, bundle: SourceBundle,
                 baseline: Config, runner: TrialRunner, evaluator: Evaluator, progress: Progress,
                 claim: Claim) -> None:
        self.policy = policy
        self._judge = StaticEvaluator("static", kernel, bundle)  # screening's facts: spills, occupancy
        self._baseline = baseline.as_dict()
        self._tilings = screening.Tilings(self._baseline)  # the reference build per macro values
        self._runner, self._evaluator, self._progress, self._claim = runner, evaluator, progress, claim
        self.screened = 0  # trials screened out (never measured) in this study
        self.repairs: list[Config] = []  # refused for a lower level alone: at the default level

    def count(self, finished: Sequence[Trial]) -> None:
        """Count the study's screened trials (this run's and other tuners')."""
        self.screened = sum(1 for t in finished if screening.is_screened(t))

    def exhausted(self, budget: int) -> str:
        """Why the run stops screening ("" while it may go on): `factor` x the budget screened."""
        if self.screened < self.policy.factor * budget:
            return ""
        return f"screened {self.screened} candidates ({self.policy.factor}x the budget)"

    def keep_repairs(self, waiting: Collection[str]) -> None:
        """The repairs still waiting after a batch took its candidates (config keys)."""
        self.repairs = [c for c in self.repairs if c.key in waiting]

    def select(self, study: Study, trials: Sequence[Trial], candidates: Sequence[Config], count: int,
               reference: eligibility.Reference) -> list[Config]:
        """Compile the candidates, record those the static rules refuse (never measured) and
        return those to measure; `trials`: the study as this batch read it."""
        tilings = self._tilings if self.policy.tilings else None  # other macros: judged against their own build
        builds = self._runner.prebuild([*candidates, *(tilings.to_build(candidates) if tilings else [])])
        judge = self._judge.evaluate
        references = tilings.references(candidates, builds, judge, reference) if tilings else {}
        found = [screening.Candidate(c, builds[c.key], judge(builds[c.key], c)) for c in candidates]
        measured = {timed_key(t.code_hash, t.config) for t in trials
                    if t.code_hash and t.final and not screening.is_screened(t)}
        selection = screening.select(found, reference, count, measured, references)
        if self.policy.repair:  # proposed first in the next batch
            self.repairs += screening.repairs(selection.rejected, self._baseline)
        rejected = {r.candidate.config.key: r for r in selection.rejected}
        for trial in self._claim(study, [r.candidate.config for r in selection.rejected], SCREEN):
            judged = rejected[trial.config_key]
            self._runner.record_judged(trial, judged.candidate.build, judged.evaluation)
        if selection.rejected or selection.held:
            self._progress.note(f"screening: {len(candidates)} compiled, {len(selection.rejected)} refused "
                                f"before measuring, {len(selection.measure)} to measure, {len(selection.held)} held")
        measure = list(selection.measure)[:count]  # the budget counts trials, repeated machine code included
        if (build_batch := getattr(self._evaluator, "build_batch", None)) is not None:  # nvcc before the GPU's turn
            build_batch([(builds[c.key], c) for c in measure])
        return measure
