"""A new study's warm start from the database: what earlier studies of the same kernel found,
re-scored for this run's objective (told to the searcher; their best few tried first, as cache
hits), and what other kernels' studies of the same toolchain space suggest (`cross_kernel`: an
order of proposals, never a result). Random and exhaustive searches are yardsticks: they get none."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compileiq.core.records import Study, Trial, TrialState
from compileiq.core.space import Config, SearchSpace, SpaceError
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate.metrics import objective_value
from compileiq.results.pareto import values_of
from compileiq.search.settings import Observation
from compileiq.source.spec import KernelSpec
from compileiq.store import Store


@dataclass(frozen=True)
class EarlierResults:
    """Earlier studies' results for this study's objective (not recorded as trials here)."""

    observations: tuple[Observation, ...]
    first: tuple[Config, ...]  # their best few, the baseline left out (tried first anyway)
    studies: int  # how many earlier studies they came from
    baseline_built: bool  # one of them holds the baseline's result

    @property
    def note(self) -> str:
        return f"warm start: {len(self.observations)} results from {self.studies} earlier studies"


def earlier_results(store: Store, study: Study, observe: Callable[[Trial], Observation | None],
                    baseline: Config, batch_size: int) -> EarlierResults | None:
    """The results of earlier studies of this kernel (`Store.related_trials`), each as `observe`
    scores it for this run (None: it does not fit); None when there is none."""
    related = store.related_trials(study.key, exclude_study_id=study.id)
    found = {o.config.key: (o, t.study_id) for t in related if (o := observe(t))}
    if not found:
        return None
    observations = tuple(observation for observation, _ in found.values())
    ranked = sorted((o for o in observations if o.value is not None), key=lambda o: (o.value, o.config.key))
    first = tuple(o.config for o in ranked if o.config.key != baseline.key)[: max(batch_size - 1, 0)]
    built = any(o.config.key == baseline.key and o.value is not None for o in observations)
    return EarlierResults(observations, first, len({study_id for _, study_id in found.values()}), built)


@dataclass(frozen=True)
class Rescoring:
    """How this run scores an earlier static trial: its space, kernel, objective(s) and rule."""

    space: SearchSpace
    kernel: KernelSpec
    objective: str
    objectives: Sequence[str]
    refusal: Callable[[Trial], str | None]

    def __call__(self, trial: Trial) -> Observation | None:
        """The trial's result for this run's objective, if its config fits this space."""
        if trial.state is not TrialState.COMPLETE:
            return None
        try:
            config = Config.of(trial.config)
            self.space.validate(config)
        except (SpaceError, KeyError, TypeError):
            return None
        if (metrics := StaticMetrics.of(trial.metrics)) is None:
            return None
        if trial.metrics.get("block_size") != self.kernel.block_size_for(config.as_dict()):
            return None  # scored for another block size: occupancy would differ
        refused = self.refusal(trial) is not None
        if len(self.objectives) > 1:
            values = () if refused else values_of(trial, self.objectives) or ()
            return Observation.of(config, values[0] if values else None, refused, values)
        return Observation.of(config, objective_value(self.objective, metrics), refused)
