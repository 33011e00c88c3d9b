"""The baseline a run holds every static result to (`baseline`), as the run loop reads it: the
reference the no-harm rules judge by (`eligibility`), picked up from the study once the baseline is
recorded, and the check that stops a run whose kernel does not build that way."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from compileiq.core import metric_ranges
from compileiq.core.records import Study, Trial, TrialState
from compileiq.core.space import Config
from compileiq.evaluate import eligibility
from compileiq.source.spec import KernelSpec, SourceBundle
from compileiq.store import Store
from compileiq.tuning import baseline


@dataclass(frozen=True)
class RunBaseline:
    """The run's baseline config, and what judging its trials needs."""

    config: Config
    kernel: KernelSpec
    bundle: SourceBundle
    objective: str

    @property
    def against(self) -> str:
        """The baseline's name in refusals: the build as shipped where the run starts from one."""
        return eligibility.against(self.kernel.shipped)

    def reference(self, trials: Sequence[Trial]) -> eligibility.Reference | None:
        """The static rules' reference, if the baseline is complete among `trials`."""
        return baseline.reference(trials, self.config.key, self.objective, self.against)

    def check(self, trials: Sequence[Trial]) -> None:
        """BaselineError if the baseline is among `trials` and failed for good."""
        baseline.check_baseline(trials, self.config.key, self.kernel, self.bundle)


def baseline_reference(store: Store, study: Study, held: RunBaseline,
                       evaluate: Callable[[Study, Sequence[Config]], Sequence[Trial]]) -> eligibility.Reference | None:
    """The defaults' result, evaluated now unless another live tuner is evaluating it (then it
    is picked up when it is recorded: concurrent tuners never queue behind one baseline)."""
    trials = store.trials(study.id)
    if rescore_before_unscored(store, trials, held):
        trials = store.trials(study.id)
    if any(t.config_key == held.config.key and t.state is TrialState.RUNNING for t in trials):
        return held.reference(trials)
    found = evaluate(study, [held.config])
    held.check(found)
    return held.reference(found)


def rescore_before_unscored(store: Store, trials: Sequence[Trial], held: RunBaseline) -> bool:
    """Hand the baseline back to be scored again where tune.toml names `entries` and its recorded
    result has no `unscored` table (recorded before the kernels the entries leave unscored were held to
    the rules): it is what the rules hold every choice to, and read as none it would switch them off
    while the ACF records the entries; or one without each kernel's spills and occupancy, which would
    hold every choice to the group's alone (`unscored.unscored_harm`). True where it did."""
    if not held.kernel.entries:
        return False
    old = [t for t in trials if t.config_key == held.config.key and t.state is TrialState.COMPLETE
           and not _per_kernel(t.metrics.get("unscored"))]
    for trial in old:
        store.hand_back(trial, RESCORED)
    return bool(old)


def _per_kernel(table: object) -> bool:
    """An `unscored` table that records each kernel's spills and occupancy (a damaged one is read as
    the rows it damages are: not rescored here)."""
    return isinstance(table, Mapping) and (
        metric_ranges.unscored_problem(table) is not None or
        all(key in table for key in ("kernel_spill_bytes", "kernel_occupancy")))


RESCORED = "recorded before the kernels tune.toml's entries leave unscored were held to the rules: scored again"
