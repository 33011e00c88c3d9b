"""What a tuning run is asked for (`TuneRequest`) and what it returns (`TuneResult`), with the
study's identity and its first trial: the boundary between the tuner and its callers (the app,
the views of a result, the benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from compileiq.core import implied
from compileiq.core.records import Study, StudyKey, Trial
from compileiq.core.space import Config, SearchSpace
from compileiq.core.toolchain import Toolchain
from compileiq.evaluate import eligibility, screening
from compileiq.evaluate.confirm import Confirmation
from compileiq.evaluate.metrics import StaticEvaluator
from compileiq.results import multi_objective
from compileiq.results.ablation import Ablation
from compileiq.results.pareto import Front
from compileiq.results.simplify import Simplification
from compileiq.search.settings import SearchSettings
from compileiq.source.kernel import study_identities
from compileiq.source.spec import KernelSpec, SourceBundle
from compileiq.tuning.limits import RunLimits
from compileiq.tuning.progress import RunCounters

SEARCH_PROCESS_FROM_BATCH = 64  # streaming: a driver that feeds this many compiles at once


@dataclass(frozen=True)
class TuneRequest:
    kernel: KernelSpec
    space: SearchSpace
    objective: str
    budget: int
    search: SearchSettings = field(default_factory=SearchSettings)
    batch_size: int = 8
    study_name: str | None = None
    resume: bool = False
    stale_after_s: float = 300.0
    simplify: bool = True
    ablate: bool = True  # each setting's contribution: a greedy path from the baseline (few builds)
    time_budget_s: float | None = None  # no search trial starts after this many seconds
    patience: int | None = None  # stop after this many batches in a row without a better best
    pick: str = "knee"  # several objectives: the rule that chooses on the front (`multi_objective`)
    stream: bool = False  # keep batch_size variants compiling: refill as results arrive (not reproducible
    # run to run: what the searcher knows at each ask depends on timing)
    screening: screening.ScreeningPolicy | None = None  # runtime objectives: compile more, measure fewer
    search_process: bool | None = None  # the searcher in a child process (None: when streaming a
    # batch of at least SEARCH_PROCESS_FROM_BATCH, one objective, bayes; see `search_process`)
    warm_start: bool = True  # bayes: start from earlier studies of this kernel and other kernels' lessons
    legacy_space: SearchSpace | None = None  # the space releases before 2026-12-06 searched, where another (`study_lookup`)

    @property
    def searches_in_a_process(self) -> bool:
        if self.search_process is not None:
            return self.search_process
        return (self.stream and self.batch_size >= SEARCH_PROCESS_FROM_BATCH and self.search.strategy == "bayes"
                and not multi_objective.is_multi(self.objective))

    @property
    def limits(self) -> RunLimits:
        return RunLimits(self.budget, self.time_budget_s, self.patience)


@dataclass(frozen=True)
class TuneResult:
    study: Study
    baseline: Trial
    winner: Trial  # the search's best trial
    chosen: Trial  # what the ACF records: the winner with every setting that made no difference dropped
    simplification: Simplification | None
    trials: tuple[Trial, ...]
    counters: RunCounters
    wall_seconds: float
    exhausted: bool  # the space ran out of untried configurations before the budget
    confirmation: Confirmation | None = None  # runtime objectives: finalists re-measured vs the baseline
    ablation: Ablation | None = None  # each setting's share of the gain, baseline -> chosen
    origins: dict[int, str] = field(default_factory=dict)  # trial id -> how this run built it (absent: not this run)
    worker: str = ""  # this run's tuner, host:pid
    budget: int = 0  # the search trials asked for (the baseline included)
    stopped: str = ""  # which limit ended the search: "budget 40", "time budget 10m", ...
    front: Front | None = None  # several objectives: the front of the trials that may win, and its pick
    warm_start: str = ""  # what other kernels' studies proposed (`cross_kernel`); "" when nothing
    shrink_builds: int = 0  # configs asked for to shrink the candidates to time (at most half the budget)
    run_id: int | None = None  # this run's row (`runs`), where its decision is recorded

    @property
    def search_trials(self) -> int:
        """The study's finished search trials: what the budget counts."""
        return searched(self.trials)

    @property
    def extra_trials(self) -> int:
        """The study's finished trials built to simplify, ablate or confirm: free of the budget."""
        return sum(1 for t in self.trials if t.final and not t.searched)

    @property
    def to_time(self) -> tuple[Trial, ...]:
        """Trials the static rules refused only for a trade-off a GPU must judge (`eligibility`)."""
        if self.study.key.evaluator != StaticEvaluator.kind:
            return ()
        return eligibility.candidates_to_time(self.trials, self.chosen, self.baseline, self.study.key.objective)


def baseline_config(space: SearchSpace, kernel: KernelSpec) -> Config:
    """The study's first trial: the compiler defaults overridden by the build the project ships
    (`KernelSpec.shipped`, from --compile-commands); SpaceError if the space lacks one of them. A
    setting at the value another implies (`--ftz=true` beside `--use_fast_math`) is left to it
    where the space does not search it (`space_choice.searched_space`): the same build."""
    shipped = kernel.shipped.values() if kernel.shipped is not None else {}
    have, kept = {p.name for p in space.parameters}, implied.without_implied(shipped)
    config = space.default_config().with_values({k: v for k, v in shipped.items() if k in kept or k in have})
    space.validate(config)
    return config


def study_key(request: TuneRequest, bundle: SourceBundle, toolchain: Toolchain,
              evaluator: str = StaticEvaluator.kind) -> StudyKey:
    """The study's identity; `source_sha256` holds the sources, headers and base flags together
    with every tune.toml setting that changes a build or a score (`kernel.study_identities`)."""
    return study_keys(request, bundle, toolchain, evaluator)[0]


def study_keys(request: TuneRequest, bundle: SourceBundle, toolchain: Toolchain,
               evaluator: str = StaticEvaluator.kind) -> tuple[StudyKey, ...]:
    """The run's study identity under each identity of its kernel (`KernelSpec.identities`):
    this release's first, then, where other, the one releases before 2026-12-06 gave the same
    run (`study_lookup`)."""
    return tuple(StudyKey(
        kernel=request.kernel.name,
        source_sha256=identity,
        space_id=request.space.id,
        space_sha256=request.space.sha256,
        toolchain=toolchain.nvcc_build,
        arch=request.kernel.arch,
        evaluator=evaluator,
        objective=request.objective,
    ) for identity in study_identities(request.kernel, bundle))


def searched(trials: Sequence[Trial]) -> int:
    """The finished search trials among `trials`: what the budget counts."""
    return sum(1 for t in trials if t.final and t.searched)
