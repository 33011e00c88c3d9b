"""Benchmark (issue 13, item 3): evaluations to reach the best known value on the DEFAULT search
space of nvcc/ptxas (no --only: millions of configurations), compileiq against random search and the
best peer of benchmarks/peers.py (Optuna's TPE, needs the `peers` extra).

Nobody can compile the whole default space, so the reference is the best value any strategy
found: every strategy runs `--budget` evaluations for each seed and objective, and every
configuration any of them compiled goes into one table per kernel; the reference of an objective
is the best value in the pooled table. Each run then counts the evaluations it needed to reach
that reference (the baseline first, then batches of 8, as `compileiq tune` counts; failures
count), in whole batches: the batch in which a run reaches it is charged in full. A run that never
reaches it within the budget is censored (shown as ">budget").

Values are what the tuner's searcher learns: the static objective's value, or a failure when the
trial failed or may not win under `compileiq.evaluate.eligibility` (it adds spills, loses occupancy, or
lowers optimisation without a spill or occupancy gain), held to the compiler defaults' build.

The table is a partial map (config key -> static metrics, or null for a failed build) kept in a
JSON file: a rerun replays from it without compiling. A strategy that asks for a configuration
the table lacks has it compiled through the tuner's own trial path (`Tuner.evaluate`, local
workers, a SQLite study under store/full-space/), and the table grows.

Strategies are `Proposer` factories in STRATEGIES (the `Searcher` interface: ask/tell); a peer
adapter (benchmarks/peers.py) plugs in by adding an entry.

    nice -n 10 .venv/bin/python benchmarks/full_space.py --tables store/full-space-tables.json
        [--kernels spill_heavy,conv2d,sgemm,many_kernels,attention] [--objectives static,registers]
        [--seeds 3] [--budget 96] [--replay-only]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `common`, when imported by the tests

from common import ROOT, PeerEncoding, machine, static_value

from compileiq import app
from compileiq.core.records import TrialState
from compileiq.core.space import Config, SearchSpace
from compileiq.core.toolchain import find_toolchain
from compileiq.evaluate import eligibility
from compileiq.search.searcher import Observation, Searcher, SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec

BATCH = 8
KERNELS = {
    "spill_heavy": ROOT / "kernels/spill_heavy/spill_heavy.cu",  # spills under __launch_bounds__(256, 2)
    "conv2d": ROOT / "kernels/conv2d/conv2d.cu",  # implicit GEMM, unrolled TT x TT thread tiles
    "sgemm": ROOT / "kernels/sgemm/sgemm.cu",  # register-blocked, unrolled TM x TN tiles
    "many_kernels": ROOT / "tests/corpus/many_kernels/pipeline.cu",  # many entries, one launch each
    "attention": ROOT / "kernels/attention/attention.cu",  # tiles BQ x BKV, fast-math flags allowed
}
Metrics = dict[str, Any] | None  # a configuration's static metrics; None: the build failed
Compile = Callable[[Sequence[Config]], dict[str, Metrics]]


class Proposer(Protocol):
    """What a strategy must do: the tuner's searcher interface."""

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]: ...

    def tell(self, observations: Sequence[Observation]) -> None: ...


class OptunaTPE:
    """Optuna's TPE (its defaults, the best peer of benchmarks/peers.py) behind the searcher's
    ask/tell, each setting encoded as peers.py encodes it (ordered only where the order means
    something, else categorical: common.peer_axis); a proposal already evaluated is told its
    known value and asked again, so that it costs no evaluation (as peers.py counts repeats)."""

    TRIES = 50  # asks per wanted proposal before giving up (a converged TPE repeats itself)

    def __init__(self, space: SearchSpace, seed: int) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        self._optuna = optuna
        from peers import optuna_distributions

        self._encoding = PeerEncoding(space)
        self._distributions = optuna_distributions(self._encoding)
        self._names = list(self._distributions)
        self._study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
        self._known: dict[str, float | None] = {}
        self._pending: dict[str, Any] = {}

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]:
        chosen: dict[str, Config] = {}
        for _ in range(count * self.TRIES):
            if len(chosen) == count:
                break
            trial = self._study.ask(self._distributions)
            config = self._encoding.config([trial.params[name] for name in self._names])
            if config.key in self._known:
                self._finish(trial, self._known[config.key])
            elif config.key in chosen or config.key in exclude:
                self._finish(trial, None)
            else:
                chosen[config.key] = config
                self._pending[config.key] = trial
        return list(chosen.values())

    def tell(self, observations: Sequence[Observation]) -> None:
        for observation in observations:
            key = observation.config.key
            self._known[key] = observation.value
            if (trial := self._pending.pop(key, None)) is not None:
                self._finish(trial, observation.value)
                continue
            row = self._encoding.indices(observation.config)
            complete = observation.value is not None
            self._study.add_trial(self._optuna.trial.create_trial(
                params=dict(zip(self._names, row)), distributions=self._distributions,
                value=observation.value if complete else None,
                state=self._optuna.trial.TrialState.COMPLETE if complete else self._optuna.trial.TrialState.FAIL))

    def _finish(self, trial: Any, value: float | None) -> None:
        if value is None:
            self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(trial, value)


class RefusalsAsFailures:
    """compileiq's searcher told a refused result as a plain failure, without its value: the
    previous release's search (before refused results carried their objective value)."""

    def __init__(self, space: SearchSpace, seed: int) -> None:
        self._searcher = Searcher(space, SearchSettings("bayes", seed))

    def ask(self, count: int, exclude: Sequence[str] = ()) -> list[Config]:
        return self._searcher.ask(count, exclude)

    def tell(self, observations: Sequence[Observation]) -> None:
        self._searcher.tell([Observation(o.config, o.value) for o in observations])


def as_tuned(space: SearchSpace, seed: int) -> Searcher:
    """compileiq's searcher as `tune` runs it for a static objective: settings that lower
    optimisation, which no static objective may choose, are not proposed (`Searcher.avoid`)."""
    searcher = Searcher(space, SearchSettings("bayes", seed))
    searcher.avoid(eligibility.lowering_settings(space, space.default_config().as_dict()))
    return searcher


STRATEGIES: dict[str, Callable[[SearchSpace, int], Proposer]] = {
    "compileiq": as_tuned,
    "compileiq-lowered": lambda space, seed: Searcher(space, SearchSettings("bayes", seed)),  # before 2026-12-05
    "compileiq-failures": RefusalsAsFailures,
    "random": lambda space, seed: Searcher(space, SearchSettings("random", seed)),
    "optuna-tpe": OptunaTPE,  # needs the `peers` extra
}


class Table:
    """A partial map of one kernel's space: config key -> metrics; misses are compiled."""

    def __init__(self, entries: dict[str, Metrics], compile_missing: Compile | None,
                 grown: Callable[[], None] = lambda: None) -> None:
        self.entries = entries
        self._compile = compile_missing
        self._grown = grown  # called after each compile (the benchmark writes its tables file)
        self.compiled = 0

    def lookup(self, configs: Sequence[Config]) -> list[Metrics]:
        missing = list({c.key: c for c in configs if c.key not in self.entries}.values())
        if missing:
            if self._compile is None:
                raise LookupError(f"{len(missing)} configuration(s) not in the table (--replay-only)")
            found = self._compile(missing)
            self.entries.update(found)
            self.compiled += len(found)
            self._grown()
        return [self.entries[c.key] for c in configs]


@dataclass(frozen=True)
class Run:
    strategy: str
    objective: str
    seed: int
    values: tuple[float | None, ...]  # in evaluation order, the baseline first
    batches: tuple[int, ...] = ()  # the sizes of the batches `values` came in; (): one at a time

    def evaluations_to(self, reference: float) -> int | None:
        """Evaluations, in whole batches, until the first value at or below the reference (the
        batch that holds it is charged in full); None: never."""
        first = next((i for i, v in enumerate(self.values) if v is not None and v <= reference), None)
        if first is None:
            return None
        ends = itertools.accumulate(self.batches or (1,) * len(self.values))
        return next(end for end in ends if end > first)


def value(objective: str, config: Config, metrics: Metrics, baseline: Metrics, defaults: Config) -> float | None:
    """What the tuner's searcher learns of a result: None for a failure or a refused trial."""
    if metrics is None or baseline is None:
        return None
    reference = eligibility.Reference(int(baseline["spill_bytes"]), float(baseline["occupancy"]), defaults.as_dict())
    if eligibility.refusal(config.as_dict(), metrics, reference) is not None:
        return None
    return static_value(metrics, objective)


def observation(objective: str, config: Config, metrics: Metrics, baseline: Metrics, defaults: Config) -> Observation:
    """What the tuner tells its searcher (as `Tuner._observation`): the value, or for a compiled
    result the no-harm rules refuse, its objective value as `refused`."""
    allowed = value(objective, config, metrics, baseline, defaults)
    if allowed is not None or metrics is None or baseline is None:
        return Observation(config, allowed)
    return Observation(config, None, refused=static_value(metrics, objective))


def replay(space: SearchSpace, table: Table, strategy: str, objective: str, seed: int, budget: int) -> Run:
    """One strategy's search, as `compileiq tune` runs it: the baseline alone, then batches."""
    default = space.default_config()
    (baseline,) = table.lookup([default])
    proposer = STRATEGIES[strategy](space, seed)
    values: list[float | None] = []
    batches: list[int] = []
    batch = [default]
    while batch:
        observations = [observation(objective, c, m, baseline, default) for c, m in zip(batch, table.lookup(batch))]
        values += [o.value for o in observations]
        batches.append(len(batch))
        proposer.tell(observations)
        if (left := budget - len(values)) <= 0:
            break
        batch = proposer.ask(min(BATCH, left))
    return Run(strategy, objective, seed, tuple(values), tuple(batches))


def reference_value(space: SearchSpace, table: Table, objective: str) -> float | None:
    """The best value of any configuration in the table (every strategy's finds, pooled)."""
    default = space.default_config()
    baseline = table.entries.get(default.key)
    found = (value(objective, Config.of(json.loads(key)), metrics, baseline, default)
             for key, metrics in table.entries.items())
    return min((v for v in found if v is not None), default=None)


@dataclass(frozen=True)
class Summary:
    strategy: str
    reached: int
    runs: int
    median: float  # inf when at most half the runs reached the reference

    def shown(self, budget: int) -> str:
        median = f">{budget}" if math.isinf(self.median) else f"{self.median:g}"
        return f"{median} ({self.reached}/{self.runs})"


def summarise(runs: Sequence[Run], reference: float) -> list[Summary]:
    """Per strategy: the median evaluations to the reference (a miss counts as infinite)."""
    strategies = dict.fromkeys(r.strategy for r in runs)
    summaries = []
    for strategy in strategies:
        counts = [r.evaluations_to(reference) for r in runs if r.strategy == strategy]
        finite = [float(c) if c is not None else math.inf for c in counts]
        summaries.append(Summary(strategy, sum(c is not None for c in counts), len(counts),
                                 statistics.median(finite)))
    return summaries


def table_key(kernel: Path, space: SearchSpace) -> str:
    spec = load_spec(kernel)
    return f"{kernel.stem}:{bundle_sources(spec).sha256[:16]}:{space.sha256[:16]}"


def default_space(kernel: Path) -> SearchSpace:
    spec = load_spec(kernel)
    return app.tuning_space(spec, find_toolchain(), app.TuneOptions(kernel=kernel))


def tuner_compiler(kernel: Path, space: SearchSpace, db: Path) -> Compile:
    """Compiles configurations through the tuner's trial path into a study of its own."""
    from compileiq.build.workers.backends import open_workers
    from compileiq.store import Store
    from compileiq.tuning.progress import SilentProgress
    from compileiq.tuning.request import TuneRequest, study_key
    from compileiq.tuning.tuner import Tuner

    spec = load_spec(kernel)
    toolchain = find_toolchain()
    request = TuneRequest(kernel=spec, space=space, objective="static", budget=1,
                          search=SearchSettings("random", 0), simplify=False, ablate=False)
    bundle = bundle_sources(spec, toolchain.nvcc)
    db.parent.mkdir(parents=True, exist_ok=True)
    store = Store.open(f"sqlite:///{db}")
    workers = app.SharedWorkers(lambda: open_workers("local"))
    tuner = Tuner(request, store, toolchain, workers, SilentProgress(), None, bundle)
    study = store.get_or_create_study(study_key(request, bundle, toolchain), f"full-space-{kernel.stem}")

    def compile_missing(configs: Sequence[Config]) -> dict[str, Metrics]:
        trials = tuner.evaluate(study, configs)
        return {t.config_key: dict(t.metrics) if t.state is TrialState.COMPLETE else None for t in trials}

    return compile_missing


def save(path: Path | None, tables: Mapping[str, Any]) -> None:
    if path is not None:
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(tables))
        temporary.replace(path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--objectives", default="static,registers")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=96, help="evaluations per run")
    parser.add_argument("--tables", type=Path, help="JSON cache of the compiled configurations (read and written)")
    parser.add_argument("--replay-only", action="store_true", help="never compile: fail on a config not in --tables")
    args = parser.parse_args(argv)
    tables: dict[str, Any] = json.loads(args.tables.read_text()) if args.tables and args.tables.exists() else {}
    strategies = args.strategies.split(",")
    objectives = args.objectives.split(",")
    print(f"machine: {machine()}; {args.seeds} seeds; batch {BATCH}; budget {args.budget} evaluations per run")
    print(f"{'kernel':13} {'objective':10} {'space':>10} {'table':>6} {'baseline':>9} {'reference':>9}  "
          + "  ".join(f"{s:>14}" for s in strategies) + "   (median evaluations to the reference, runs reaching it)")
    for name in args.kernels.split(","):
        kernel = KERNELS.get(name) or Path(name)
        start = time.perf_counter()
        space = default_space(kernel)
        key = table_key(kernel, space)
        entries = tables.setdefault(key, {})
        db = ROOT / "store" / "full-space" / f"{kernel.stem}.db"
        compile_missing = None if args.replay_only else tuner_compiler(kernel, space, db)
        table = Table(entries, compile_missing, lambda: save(args.tables, tables))
        runs = [replay(space, table, strategy, objective, seed, args.budget)
                for seed in range(args.seeds) for objective in objectives for strategy in strategies]
        save(args.tables, tables)
        for objective in objectives:
            reference = reference_value(space, table, objective)
            default = space.default_config()
            built = table.entries[default.key]
            baseline = value(objective, default, built, built, default)
            if reference is None:
                print(f"{kernel.stem:13} {objective:10} no configuration built")
                continue
            summaries = summarise([r for r in runs if r.objective == objective], reference)
            print(f"{kernel.stem:13} {objective:10} {space.size():10.2e} {len(table.entries):6d} "
                  f"{_number(baseline):>9} {_number(reference):>9}  "
                  + "  ".join(f"{s.shown(args.budget):>14}" for s in summaries)
                  + ("   trivial: the baseline is the best known" if baseline == reference else ""), flush=True)
        print(f"{'':13} ({table.compiled} compiled now; {time.perf_counter() - start:.0f} s)", flush=True)


def _number(x: float | None) -> str:
    return "failed" if x is None else f"{x:g}"


if __name__ == "__main__":
    main()
