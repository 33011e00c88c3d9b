"""Shared bits of the benchmark scripts (run them from the repository root)."""

from __future__ import annotations

import atexit
import json
import os
import platform
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from compileiq import app
from compileiq.core.records import TrialState
from compileiq.core.space import Config, Parameter, SearchSpace, Value
from compileiq.core.toolchain import find_toolchain
from compileiq.core.version import __version__
from compileiq.evaluate.metrics import StaticMetrics, objective_value
from compileiq.search.searcher import Observation, Searcher, SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.tuning.progress import SilentProgress

ROOT = Path(__file__).resolve().parent.parent
KERNELS = sorted((ROOT / "kernels").glob("*/*.cu"))


def scratch(prefix: str) -> Path:
    """A new folder under the temporary directory, removed when the benchmark exits (its
    databases, ACFs and compiler outputs are not results: the printed tables are)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def fresh_db() -> str:
    return f"sqlite:///{scratch('compileiq-bench-') / 'bench.db'}"


def machine() -> str:
    tools = find_toolchain()
    return f"{platform.node()} ({os.cpu_count()} CPUs), nvcc {tools.nvcc_version}, compileiq {__version__}"


def tune(kernel: Path, db: str, **options) -> app.TuneReport:
    out = scratch("compileiq-acf-") / f"{kernel.stem}.acf.toml"
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
    distinct configuration once (a repeat is served from the record, free), the baseline first,
    alone. Counting is by whole batches: `evaluate_batch` compiles every configuration of a
    batch (they run side by side) and only then raises Found if any of them is optimal, so the
    whole batch is charged even when its first configuration was the optimum. `evaluate` is a
    batch of one: for sequential tuners (Kernel Tuner), which do run one configuration at a time.
    A run that reaches `cap` evaluations is stopped and charged `cap`."""

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
        (value,) = self.evaluate_batch([key])
        return value

    def evaluate_batch(self, keys: Sequence[str]) -> list[float | None]:
        hit = False
        for key in keys:
            if key in self._seen:
                continue
            if self.count >= self.cap:
                raise Found(self.cap)
            value = self._seen[key] = self.case.values[key]
            hit = hit or (value is not None and value <= self._target)
        if hit:
            raise Found(min(self.count, self.cap))
        return [self._seen[key] for key in keys]


def evaluations_to_optimum(
    case: Case, strategy: Callable[[Replay, int], None], seed: int, cap: int | None = None
) -> int:
    """Evaluations, in whole batches, until the strategy reaches the optimum; a strategy that
    stops without it is charged the whole space (as if it then tried everything), and a run
    that reaches `cap` evaluations first is stopped and charged `cap`."""
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
            values = replay.evaluate_batch([c.key for c in batch])
            searcher.tell([Observation(c, v) for c, v in zip(batch, values)])
            batch = searcher.ask(BATCH)

    return run


# --- How other tuners see a search space (benchmarks/peers.py, benchmarks/full_space.py) ---

# Where a parameter's "default" sits among its numbers, when that is known: no register cap is
# as many registers as ptxas may give a thread, 255. Any other "default" has no known place.
DEFAULT_PLACES: dict[str, int] = {"ptxas.maxrregcount": 255}


@dataclass(frozen=True)
class PeerAxis:
    """One parameter as a peer tuner is given it: `values` in axis order; `ordered` says
    whether that order means something (an integer axis) or not (a categorical one)."""

    name: str
    ordered: bool
    values: tuple[Value, ...]


def peer_axis(parameter: Parameter) -> PeerAxis:
    """The encoding rules. A parameter is ordered only when every value is a number (not a
    boolean) or a "default" whose place among the numbers is known (DEFAULT_PLACES: "no cap"
    sits at 255 registers, after the cap of 255); its values are then sorted by that place.
    Everything else is categorical, in the space's own order: flags, booleans, enums, and a
    "default" of unknown place (ptxas.maxntid's "default" is not a thread count)."""

    def place(value: Value) -> float | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            return float(value)
        if value == "default" and parameter.name in DEFAULT_PLACES:
            return DEFAULT_PLACES[parameter.name] + 0.5  # just after the cap of 255, never beside 24
        return None

    places = [place(v) for v in parameter.values]
    if all(p is not None for p in places):
        ordered = tuple(v for _, v in sorted(zip(places, parameter.values), key=lambda pv: pv[0]))  # type: ignore[arg-type, return-value]
        return PeerAxis(parameter.name, True, ordered)
    return PeerAxis(parameter.name, False, tuple(parameter.values))


class PeerEncoding:
    """A search space as a peer tuner is given it: each configuration a tuple of indices into
    its axes' values (see `peer_axis` for which axes are ordered)."""

    def __init__(self, space: SearchSpace) -> None:
        self.axes = tuple(peer_axis(p) for p in space.parameters)
        self._index = [{(type(v), v): i for i, v in enumerate(a.values)} for a in self.axes]

    def indices(self, config: Config | dict[str, Value]) -> tuple[int, ...]:
        values = config.as_dict() if isinstance(config, Config) else config
        return tuple(
            index[(type(values[a.name]), values[a.name])] for a, index in zip(self.axes, self._index)
        )

    def config(self, indices: Sequence[int]) -> Config:
        return Config.of({a.name: a.values[int(i)] for a, i in zip(self.axes, indices)})


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
