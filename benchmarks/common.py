"""Shared bits of the benchmark scripts (run them from the repository root)."""

from __future__ import annotations

import json
import os
import platform
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from compileiq import app
from compileiq.core.records import TrialState
from compileiq.core.space import SearchSpace
from compileiq.core.toolchain import find_toolchain
from compileiq.core.version import __version__
from compileiq.evaluate.metrics import StaticMetrics, objective_value
from compileiq.search.searcher import Observation, Searcher, SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.tuning.progress import SilentProgress

ROOT = Path(__file__).resolve().parent.parent
KERNELS = sorted((ROOT / "kernels").glob("*/*.cu"))


def fresh_db() -> str:
    folder = Path(tempfile.mkdtemp(prefix="compileiq-bench-"))
    return f"sqlite:///{folder / 'bench.db'}"


def machine() -> str:
    tools = find_toolchain()
    return f"{platform.node()} ({os.cpu_count()} CPUs), nvcc {tools.nvcc_version}, compileiq {__version__}"


def tune(kernel: Path, db: str, **options) -> app.TuneReport:
    out = Path(tempfile.mkdtemp(prefix="compileiq-acf-")) / f"{kernel.stem}.acf.toml"
    return app.tune(app.TuneOptions(kernel=kernel, db=db, out=out, **options), SilentProgress())


# --- Exhaustive tables of static metrics and the counting every search strategy is replayed with ---

TABLE_SPACE = (
    "ptxas.opt_level",
    "ptxas.maxrregcount",
    "ptxas.override_directive_values",
    "ptxas.allow_expensive_optimizations",
)
BATCH = 8
CASE_KINDS = ("dense", "plateau", "needle", "trivial")


@dataclass(frozen=True)
class Case:
    """One kernel's exhaustive table under one static objective: every configuration's value
    (None: the variant failed)."""

    kernel: str
    objective: str
    space: SearchSpace
    values: dict[str, float | None]

    @property
    def best(self) -> float:
        return min(v for v in self.values.values() if v is not None)

    @property
    def optima(self) -> int:
        return sum(1 for v in self.values.values() if v == self.best)

    @property
    def kind(self) -> str:
        """trivial: the baseline is optimal. dense: at least one configuration in eight is
        optimal. plateau: a quarter or more of the space shares one non-optimal value (a model
        sees no slope there). needle: the rest, few optima in a varied landscape."""
        if self.values[self.space.default_config().key] == self.best:
            return "trivial"
        if self.optima * BATCH >= len(self.values):
            return "dense"
        counts = Counter(v for v in self.values.values() if v is not None and v != self.best)
        if counts and max(counts.values()) * 4 >= len(self.values):
            return "plateau"
        return "needle"


class Found(Exception):
    """The replay reached the optimum after `count` evaluations."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


class Replay:
    """Evaluates configurations from a case's table the way `compileiq tune` counts them: each
    distinct configuration once (a repeat is served from the record, free), the baseline first.
    `evaluate` raises Found at the first optimal configuration."""

    def __init__(self, case: Case, cap: int | None = None) -> None:
        self.case = case
        self.cap = cap or len(case.values)
        self._target = case.best
        self._seen: dict[str, float | None] = {}
        self.evaluate(case.space.default_config().key)

    @property
    def count(self) -> int:
        return len(self._seen)

    def evaluate(self, key: str) -> float | None:
        if key in self._seen:
            return self._seen[key]
        if self.count >= self.cap:
            raise Found(self.cap)
        value = self.case.values[key]
        self._seen[key] = value
        if value is not None and value <= self._target:
            raise Found(self.count)
        return value


def evaluations_to_optimum(
    case: Case, strategy: Callable[[Replay, int], None], seed: int, cap: int | None = None
) -> int:
    """Evaluations until the strategy reaches the optimum; a strategy that stops without it
    is charged the whole space (as if it then tried everything), and a run that reaches `cap`
    evaluations first is stopped and charged `cap`."""
    try:
        strategy(Replay(case, cap), seed)
    except Found as found:
        return found.count
    return len(case.values) if cap is None else cap


def compileiq_strategy(settings: SearchSettings) -> Callable[[Replay, int], None]:
    """compileiq's Searcher in batches of BATCH after the baseline, as `compileiq tune` runs it."""

    def run(replay: Replay, seed: int) -> None:
        searcher = Searcher(replay.case.space, replace(settings, seed=seed))
        batch = [replay.case.space.default_config()]
        while batch:
            observations = [Observation(c, replay.evaluate(c.key)) for c in batch]
            searcher.tell(observations)
            batch = searcher.ask(BATCH)

    return run


def static_value(metrics: dict | None, objective: str) -> float | None:
    if metrics is None:
        return None
    m = metrics
    static = StaticMetrics(
        m["spill_bytes"], m["registers"], m["occupancy"], m["instructions"], m["stack_bytes"]
    )
    return objective_value(objective, static)


def exhaustive_table(
    kernel: Path, cache: dict, only: tuple[str, ...] = TABLE_SPACE
) -> tuple[SearchSpace, dict[str, dict | None]]:
    """Every configuration's static metrics (None: failed), compiled by an exhaustive `tune`,
    or read from the cache written by an earlier run of the same source and space."""
    spec = load_spec(kernel)
    space = app.tuning_space(spec, find_toolchain(), app.TuneOptions(kernel=kernel, only=only))
    key = f"{kernel.stem}:{bundle_sources(spec).sha256[:16]}:{','.join(p.name for p in space.parameters)}"
    if key not in cache:
        report = tune(
            kernel,
            fresh_db(),
            objective="static",
            strategy="exhaustive",
            budget=app.MAX_BUDGET,
            workers="local",
            only=only,
            batch_size=32,
            simplify=False,
        )
        cache[key] = {
            t.config_key: t.metrics if t.state is TrialState.COMPLETE else None
            for t in report.result.trials
        }
    return space, cache[key]


def load_cases(
    tables: Path | None, objectives: Sequence[str], kernels: Sequence[str] = ()
) -> Iterator[Case]:
    """Every bundled kernel's case per objective (or only `kernels`'); the tables are compiled
    once and kept in `tables` (JSON), so a rerun replays without compiling."""
    cache = json.loads(tables.read_text()) if tables and tables.exists() else {}
    for kernel in KERNELS:
        if kernels and kernel.stem not in kernels:
            continue
        known = len(cache)
        space, table = exhaustive_table(kernel, cache)
        if tables and len(cache) > known:
            tables.write_text(json.dumps(cache))
        for objective in objectives:
            values = {key: static_value(metrics, objective) for key, metrics in table.items()}
            yield Case(kernel.stem, objective, space, values)
