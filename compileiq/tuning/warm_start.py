"""A new study's warm start from the database: what earlier studies of the same kernel found,
re-scored for this run's objective (told to the searcher; their best few tried first, as cache
hits), and what other kernels' studies of the same toolchain space suggest (`cross_kernel`: an
order of proposals, never a result). Random and exhaustive searches are yardsticks: they get none."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compileiq.core.records import Study, Trial, TrialState
from compileiq.core.space import Config, SearchSpace, SpaceError
from compileiq.core.static_score import StaticMetrics
from compileiq.evaluate.metrics import objective_value
from compileiq.results.pareto import values_of
from compileiq.search.loading import SearchLoad
from compileiq.search.search_process import RemoteSearcher
from compileiq.search.settings import Observation
from compileiq.search.transfer import Prior
from compileiq.source.spec import KernelSpec
from compileiq.store import Store
from compileiq.tuning.cross_kernel import other_kernels_prior
from compileiq.tuning.request import TuneRequest

if TYPE_CHECKING:  # loaded on a thread of its own (`search_start`): scikit-optimize is slow to import
    from compileiq.search.searcher import Searcher


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
                    baseline: Config, batch_size: int, kernel: Sequence[str] = ()) -> EarlierResults | None:
    """The results of earlier studies of this kernel (`Store.related_trials`; `kernel`: its every
    identity, `kernel.study_identities`), each as `observe` scores it for this run (None: it does
    not fit); None when there is none."""
    related = store.related_trials(study.key, exclude_study_id=study.id, sources=kernel)
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


@dataclass(frozen=True)
class WarmStart:
    """What a warm start hands the run: the configs it tries first, whether an earlier study holds
    the baseline's result, and what other kernels' studies proposed (for the provenance; "": nothing)."""

    first: tuple[Config, ...] = ()
    baseline_built: bool = False
    note: str = ""


def warm_start(search: SearchLoad[Searcher | RemoteSearcher], store: Store, study: Study, request: TuneRequest,
               baseline: Config, rescore: Rescoring | None, note: Callable[[str], None],
               kernel: Sequence[str] = ()) -> WarmStart:
    """Tell the searcher what earlier studies of this kernel found, as `rescore` scores them (None:
    runtimes are not carried between studies), their best few tried first (cache hits); then
    propose first what other kernels' studies of this toolchain space chose. `kernel`: every
    identity of this kernel (`kernel.study_identities`: a study the releases before 2026-12-06
    recorded for this build is one of its, not another kernel's). The searcher is waited for only
    when there is something to tell it."""
    start = WarmStart()
    if rescore is not None:
        start = _from_earlier_studies(search, store, study, request, baseline, rescore, note, kernel)
    return _from_other_kernels(search, store, study, request, baseline, start, note, kernel)


def discouraged(store: Store, study: Study, request: TuneRequest, baseline: Config,
                kernel: Sequence[str] = ()) -> frozenset[tuple[str, Any]] | None:
    """What this run's warm start discourages (None: it calls no `discourage`): what a replayed
    record of a stopped run's search may discourage (`search.journal.ReplayRules`)."""
    if request.search.strategy != "bayes" or not request.warm_start:
        return None
    prior = _prior(store, study, request, baseline, kernel)
    return None if prior.empty else frozenset(prior.discouraged)


def _prior(store: Store, study: Study, request: TuneRequest, baseline: Config, kernel: Sequence[str]) -> Prior:
    limit = max(request.batch_size // 2, 1)  # half a batch: the rest spreads over the space
    return other_kernels_prior(store, study.key, request.space, baseline, limit, kernel)


def _from_earlier_studies(search: SearchLoad[Searcher | RemoteSearcher], store: Store, study: Study,
                          request: TuneRequest, baseline: Config, rescore: Rescoring,
                          note: Callable[[str], None], kernel: Sequence[str]) -> WarmStart:
    found = earlier_results(store, study, rescore, baseline, request.batch_size, kernel)
    if found is None:
        return WarmStart()
    search.get().tell(list(found.observations))
    note(found.note)
    return WarmStart(found.first, found.baseline_built)


def _from_other_kernels(search: SearchLoad[Searcher | RemoteSearcher], store: Store, study: Study,
                        request: TuneRequest, baseline: Config, start: WarmStart,
                        note: Callable[[str], None], kernel: Sequence[str]) -> WarmStart:
    """Propose first what other kernels' studies of this toolchain space chose, and later what
    their rules refused (`cross_kernel`): an order, never a result."""
    prior = _prior(store, study, request, baseline, kernel)
    if prior.empty:
        return start
    first = tuple({c.key: c for c in [*start.first, *prior.first]}.values())  # ours first
    if (discourage := getattr(search.get(), "discourage", None)) is not None:  # one objective
        discourage(prior.discouraged)
    note(f"warm start: {prior.note}")
    return WarmStart(first, start.baseline_built, prior.note)
