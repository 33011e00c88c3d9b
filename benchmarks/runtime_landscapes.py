"""Search judged on recorded GPU runtimes, against peers: evaluations and simulated GPU+compile
time each strategy needs to come within 1% and 5% of a brute-forced landscape's optimum, median
over seeds; then the confidence intervals of compileiq's confirmation checked against the truth.

No kernel source and no GPU: the space is the T1 file's parameters (as tuned macros, defaults
first) with its `Conditions` as restrictions (`t1_file` reads it, Kernel Tuner's `Values` forms
included, running nothing); without a T1 file, the cache's own `tune_params`, every combination,
the first value of each the defaults (or the first recorded configuration, when those have no
time). The optimum and its targets are those of the configurations the space allows, not of the
whole cache. A strategy that raises is a row saying so; bad input is one line and exit status 2. A configuration's value is the mean of
its recorded `times` (a cache that kept only `time`: that one value, and its confirmation
intervals are not judged, a replay of one timing having no noise; an error string or Kernel
Tuner's 1e20 is a failure). The same rules for every strategy:

- Everyone starts from the defaults, counted as evaluation 1 (a run that proposes them again
  gets them free). A configuration is charged the first time it is evaluated; a repeat is free.
- A batch strategy is charged whole batches: a target reached inside a batch of 8 costs the batch.
- Simulated time = the sum, over the configurations charged, of their recorded `compile_time +
  benchmark_time` (serial, one GPU, whole batches too), in seconds.
- A run ends when it reaches the 1% target (so also 5%), when it has `--cap` evaluations, or when
  the strategy stops by itself. A target it did not reach is charged the cap + 1,
  every such run alike, whatever it spent: the cap only flatters whoever needs more than it. The table
  says how many runs reached each target.

How each strategy is driven:

- compileiq: the product's `Searcher` (strategy "bayes", its defaults), told and asked in batches
  of 8 as `compileiq tune` does (search only: no compile screening, which needs the kernel).
- random: the same `Searcher` with strategy "random" (allowed configurations, no repeats), batches of 8.
- Optuna TPE (default `TPESampler(seed)`): ask 8, then tell 8 (8 parallel workers); the defaults
  added first as a finished trial. Every tuned parameter is an ordered integer: the index of its
  value in the sorted value list (`IntDistribution(0, n-1)`), because the tile and block sizes are
  sizes, an order that means something (a categorical would hide that 48 lies between 32 and 64);
  the 0/1 flags have two values, so order makes no difference there; one-value parameters are
  fixed. A proposal that breaks the restrictions is never built: it costs no evaluation and is
  told as FAIL. A run that asks 50 batches in a row without a new configuration has stopped.
- Kernel Tuner (`tune_kernel(..., cache=FILE, simulation_mode=True, strategy=S,
  strategy_options={"max_fevals": cap - 1})`, the T1 Conditions as its restrictions, the cache
  gunzipped to a temporary file): it reads the cache natively; the order of evaluation is the
  order of its results (repeats free). It is sequential, so each evaluation counts one. Seeded
  through `random.seed`/`numpy.random.seed`; a strategy whose seed-0 run differs when repeated is
  flagged as not deterministic by seed. The only intervention: once a result within 1% of the
  optimum comes back, its budget is set to what it has spent, so it stops there (as at max_fevals).

Coverage: per seed (and per `--confirmations` repeat), compileiq's search runs a fixed budget
(`--budget` evaluations after the defaults), its finalists are chosen by the product's
`choose_finalists` (screening value = recorded mean, distinct configurations) and confirmed
against the defaults by the product's `confirm` (A/A noise delta, interleaved rounds, 95% interval
of the median round ratio) with `executable_sampler` over a `ReplayMeasurer`: each block draws,
seeded and with replacement, from the configuration's steady-state timings (its recorded times
less the first, a cold launch no warmed-up harness times: `Landscape.timed`). An interval covers
when it holds the true ratio candidate/defaults. Four truths are reported: the ratio of the
steady-state medians (what the product states: a median speedup), the ratio of the steady-state
means (the speedup a user sees once the kernel runs warm), the ratio of the means
of all recorded times (the cold first launch included), and the statistic's own estimand, the
median of the round ratio median(10 draws of B) / median(10 draws of A) under that same
resampling (Monte Carlo, 4,000 rounds). The final choice is the confirmed winner (or the defaults
when the baseline is kept); its true speedup (defaults' mean / its mean, all recorded times, as
the search is judged) is set beside the best possible (defaults' mean / optimum).

    .venv/bin/python benchmarks/runtime_landscapes.py --landscape CACHE.json[.gz] [--space T1.json]
        [--landscape CACHE2 ...] [--seeds 20] [--cap 512] [--budget 64] [--confirmations 5]
        [--strategies compileiq,random,...] [--batch 8] [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import logging
import math
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import t1_file
from common import BATCH, machine
from t1_file import InputError

from compileiq.core.space import Config, SearchSpace
from compileiq.evaluate.confirm import Candidate, choose_finalists, confirm, executable_sampler
from compileiq.evaluate.replay import (
    Field,
    Landscape,
    LandscapeError,
    ReplayMeasurer,
    field_of,
    load_landscape,
    read_cache,
)
from compileiq.search.searcher import Observation, Searcher, SearchSettings
from compileiq.source import restrictions

TARGETS = (0.01, 0.05)
KERNEL_TUNER = ("random_sample", "genetic_algorithm", "simulated_annealing", "bayes_opt",
                "diff_evo", "pso", "greedy_ils", "dual_annealing")
STRATEGIES = ("compileiq", "random", "optuna-tpe", *(f"kt-{name}" for name in KERNEL_TUNER))
IDLE_BATCHES = 50
MAX_FILLED = 4_000_000  # configurations a cache's tune_params may span (each one a dict for Kernel Tuner)
MISSING = "RuntimeFailedConfig"  # Kernel Tuner's record of a configuration that failed to run
ESTIMAND_ROUNDS = 4000
Key = tuple[Field, ...]  # a configuration's values in the landscape's parameter order (replay.field_of)


@dataclass(frozen=True)
class Problem:
    """One landscape with its space: what every strategy is run on."""

    landscape: Landscape
    space: SearchSpace
    t1: dict
    cache: Path  # the Kernel Tuner cache file (.json or .json.gz)
    t1_path: Path | None = None  # the T1 file (None: the cache's own tune_params)

    @property
    def default(self) -> Key:
        return key_of(self.landscape, self.space.default_config())

    @cached_property
    def allowed(self) -> tuple[Key, ...]:
        """The recorded configurations with times that the space holds (its values, its
        restrictions): the only ones any strategy can reach, so the only ones judged on."""
        parameters = [self.space.parameter(f"define.{p}") for p in self.landscape.parameters]
        return tuple(k for k, times in self.landscape.times.items() if times
                     and all(q.allows(v) for q, v in zip(parameters, k)) and self.space.allows(config_of(self, k)))

    @cached_property
    def best(self) -> float:
        """The optimum: the lowest mean of the configurations the space allows."""
        return min(v for k in self.allowed if (v := self.value(k)) is not None)

    @cached_property
    def optimum(self) -> Key:
        return min(self.allowed, key=lambda k: (self.value(k), k != self.default))

    @cached_property
    def steady_best(self) -> Key:
        """The allowed configuration fastest once warm (mean of its times less the cold first launch)."""
        return min(self.allowed, key=lambda k: (self.landscape.steady_mean(k), k != self.optimum))

    def target(self, fraction: float) -> float:
        return self.best * (1 + fraction)

    def value(self, key: Key) -> float | None:
        return self.landscape.mean(key)


@dataclass(frozen=True)
class Reached:
    """What a run was charged for one target."""

    evaluations: int
    seconds: float
    reached: bool


def t1_space(t1: dict, where: object = "T1 file") -> SearchSpace:
    """The T1 tuning space as compileiq's: tuned macros (default first; a value that is no integer
    as its cache key spells it, `field_of`) under its Conditions; InputError when it has none."""
    values, default = t1_file.parameters(t1, where), t1_file.defaults(t1)
    tuned: dict[str, tuple[Field, ...]] = {
        name: tuple(dict.fromkeys(field_of(v) for v in (default[name], *found))) for name, found in values.items()}
    try:
        texts = restrictions.parse(t1_file.conditions(t1, where), {}, tuned, known_as="a TuningParameter of the T1 file")
    except ValueError as error:
        raise InputError(f"{where}: Conditions{error}") from None
    name = t1.get("General", {}).get("BenchmarkName", "space") if isinstance(t1.get("General"), dict) else "space"
    base = SearchSpace(f"t1:{name}", "", ()).with_defines(tuned)
    return base.restricted(restrictions.restrictions_of(texts, {}, tuned))


def key_of(landscape: Landscape, config: Config | dict) -> Key:
    values = config.as_dict() if isinstance(config, Config) else config
    return tuple(field_of(values[f"define.{p}"]) for p in landscape.parameters)


def config_of(problem: Problem, key: Key) -> dict:
    return {f"define.{p}": v for p, v in zip(problem.landscape.parameters, key)}


def charge(problem: Problem, batches: Sequence[Sequence[Key]], cap: int) -> dict[float, Reached]:
    """Per target: evaluations and simulated seconds until a batch holds a configuration within
    it (the whole batch charged). A run that does not get there within `cap` evaluations counts
    `cap + 1`, whatever it spent: a batch strategy's last batch can run past the cap (1 + 64 x 8 =
    513), and counting that against a sequential strategy's 512 made two runs that both failed
    look different to the rank test. Repeats within or across batches are free."""
    seen: set[Key] = set()
    count, seconds, found = 0, 0.0, {}
    for batch in batches:
        fresh = [k for k in dict.fromkeys(batch) if k not in seen]
        seen.update(fresh)
        count += len(fresh)
        seconds += sum(problem.landscape.costs_ms.get(k, 0.0) for k in fresh) / 1000
        for target in TARGETS:
            if target not in found and any((v := problem.value(k)) is not None and v <= problem.target(target)
                                           for k in fresh):
                found[target] = Reached(count, seconds, True)
    short = Reached(cap + 1, seconds, False)
    return {t: found[t] if t in found and found[t].evaluations <= cap else short for t in TARGETS}


def _done(problem: Problem, batches: Sequence[Sequence[Key]], cap: int) -> bool:
    evaluated = {k for b in batches for k in b}
    best = min((v for k in evaluated if (v := problem.value(k)) is not None), default=math.inf)
    return best <= problem.target(TARGETS[0]) or len(evaluated) >= cap


# --- the strategies: each returns the batches of configurations it evaluated, the defaults first ---

def searcher_batches(problem: Problem, strategy: str, seed: int,
                     done: Callable[[list[list[Key]]], bool]) -> list[list[Key]]:
    """The product's Searcher, told and asked in batches of BATCH after the defaults."""
    searcher = Searcher(problem.space, SearchSettings(strategy, seed=seed))
    batches: list[list[Key]] = []
    batch = [problem.space.default_config()]
    while batch and not done(batches):
        keys = [key_of(problem.landscape, c) for c in batch]
        batches.append(keys)
        searcher.tell([Observation(c, problem.value(k)) for c, k in zip(batch, keys)])
        batch = searcher.ask(BATCH)
    return batches


def searcher_run(strategy: str) -> Callable[[Problem, int, int], list[list[Key]]]:
    return lambda problem, seed, cap: searcher_batches(problem, strategy, seed,
                                                       lambda batches: _done(problem, batches, cap))


def optuna_tpe(problem: Problem, seed: int, cap: int) -> list[list[Key]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    values = {p: _ordered(problem.space.parameter(f"define.{p}").values) for p in problem.landscape.parameters}
    tuned = [p for p in problem.landscape.parameters if len(values[p]) > 1]
    distributions = {p: optuna.distributions.IntDistribution(0, len(values[p]) - 1) for p in tuned}
    default = dict(zip(problem.landscape.parameters, problem.default))

    def told(trial_or_none: Any, key: Key) -> None:
        value = problem.value(key)
        if value is None:
            study.tell(trial_or_none, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial_or_none, value)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
        value = problem.value(problem.default)
        study.add_trial(optuna.trial.create_trial(
            params={p: values[p].index(default[p]) for p in tuned}, distributions=distributions, value=value,
            state=optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL))
        batches: list[list[Key]] = [[problem.default]]
        seen, idle = {problem.default}, 0
        while idle < IDLE_BATCHES and not _done(problem, batches, cap):
            trials = [study.ask(distributions) for _ in range(BATCH)]
            batch: list[Key] = []
            for trial in trials:
                chosen = {p: values[p][trial.params[p]] if p in trial.params else values[p][0]
                          for p in problem.landscape.parameters}
                key = tuple(chosen[p] for p in problem.landscape.parameters)
                if not problem.space.allows(config_of(problem, key)):
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)  # never built: no evaluation
                    continue
                told(trial, key)
                if key not in seen:
                    seen.add(key)
                    batch.append(key)
            idle = 0 if batch else idle + 1
            if batch:
                batches.append(batch)
    return batches


def _ordered(values: Sequence[Any]) -> list[Any]:
    """A parameter's values as Optuna's ordered axis: sorted when all are numbers, else as listed."""
    return sorted(values) if all(isinstance(v, int) for v in values) else list(values)


@contextlib.contextmanager
def _stop_at(threshold: float, seen: list[dict]) -> Iterator[None]:
    """Kernel Tuner's simulation runner, made to end the run (as max_fevals would) once a result
    within the 1% target has come back; nothing it evaluates is changed. Every result it returns
    is appended to `seen`: a strategy whose very first evaluation is within the target (before its
    own loop catches the stop) ends with an exception instead of its results."""
    from kernel_tuner.runners.simulation import SimulationRunner

    original = SimulationRunner.run

    def run(self: Any, parameter_space: Any, tuning_options: Any) -> Any:
        results = original(self, parameter_space, tuning_options)
        seen.extend(r for r in results if r is not None)
        if any(r is not None and isinstance(r.get("time"), float) and r["time"] <= threshold for r in results):
            tuning_options.budget.max_fevals = max(tuning_options.budget.num_fevals, 1)
        return results

    SimulationRunner.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        SimulationRunner.run = original  # type: ignore[method-assign]


@functools.cache
def _kernel_tuner_cache(source: Path, params: tuple[tuple[str, tuple[Any, ...]], ...]) -> tuple[str, dict]:
    """The cache as Kernel Tuner is given it for these parameters (the T1 file's, in the cache's
    key order; its JSON text, made once) and its header: each entry carries its parameters' values
    (a cache that keeps them only in its keys gets them added: Kernel Tuner returns the entry, and
    the entry is how its run's configurations are read back), and every configuration of the
    parameters that the cache lacks is recorded as failed, as the product's replay answers it
    (Kernel Tuner's simulation stops at a configuration it cannot find)."""
    data = read_cache(source)
    keys = data["tune_params_keys"]
    spelled = [{str(v): v for v in values} for _, values in params]
    for key, entry in data["cache"].items():
        for name, text, known in zip(keys, str(key).split(","), spelled):
            entry.setdefault(name, known.get(text, field_of(text)))
    if math.prod(len(values) for _, values in params) > MAX_FILLED:
        raise InputError(f"{source.name}: its tuning space makes more than {MAX_FILLED:,} configurations")
    for values in itertools.product(*(values for _, values in params)):
        data["cache"].setdefault(",".join(map(str, values)), {**dict(zip(keys, values)), "time": MISSING})
    header = {**{k: v for k, v in data.items() if k != "cache"}, "tune_params": dict(params)}
    text = json.dumps({**header, "cache": data["cache"]})  # the cache last: Kernel Tuner reads a file
    return text, header  # that does not end "}}}" as one left open, and "closes" it again


def kernel_tuner_run(strategy: str) -> Callable[[Problem, int, int], list[list[Key]]]:
    def run(problem: Problem, seed: int, cap: int) -> list[list[Key]]:
        import kernel_tuner
        from kernel_tuner.util import StopCriterionReached

        given = t1_file.parameters(problem.t1)  # its own values (a string as a string), in the cache's order
        params = {p: given[p] for p in problem.landscape.parameters}
        spec = problem.t1.get("KernelSpecification", {})
        with tempfile.TemporaryDirectory() as folder:
            cache = Path(folder) / "cache.json"
            text, header = _kernel_tuner_cache(problem.cache, tuple((p, tuple(v)) for p, v in params.items()))
            cache.write_text(text)
            random.seed(seed)
            np.random.seed(seed)
            seen: list[dict] = []
            with warnings.catch_warnings(), _stop_at(problem.target(TARGETS[0]), seen):
                warnings.simplefilter("ignore")
                try:
                    results, _ = kernel_tuner.tune_kernel(
                        header.get("kernel_name", spec.get("KernelName", "kernel")), "__global__ void k() {}",
                        _problem_size(header.get("problem_size", spec.get("ProblemSize", [1]))), [], params,
                        restrictions=t1_file.conditions(problem.t1),
                        cache=str(cache), simulation_mode=True, strategy=strategy,
                        strategy_options={"max_fevals": max(cap - 1, 1)}, quiet=True, verbose=False)
                except StopCriterionReached:  # raised past the strategy: its first result was the target
                    results = seen
        batches = [[problem.default]]
        batches += [[tuple(field_of(r[p]) for p in problem.landscape.parameters)] for r in results]
        return batches

    return run


def _problem_size(size: Any) -> tuple:
    """Kernel Tuner's problem size: a cache's or T1 file's list, or one number (the T1 form)."""
    return tuple(size) if isinstance(size, list | tuple) else (size,)


def strategies() -> dict[str, Callable[[Problem, int, int], list[list[Key]]]]:
    found: dict[str, Callable[[Problem, int, int], list[list[Key]]]] = {
        "compileiq": searcher_run("bayes"), "random": searcher_run("random"), "optuna-tpe": optuna_tpe}
    found.update({f"kt-{name}": kernel_tuner_run(name) for name in KERNEL_TUNER})
    return found


# --- confirmation: the product's statistic on replayed samples, against the table's truth ---

@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    medians_ratio: float  # candidate's steady-state median / the defaults' (what a median speedup states)
    steady_ratio: float  # candidate's steady-state mean / the defaults'
    means_ratio: float  # candidate's mean of all recorded times / the defaults'
    estimand: float  # median round ratio under the resampling (what the statistic estimates)

    TRUTHS = ("medians_ratio", "steady_ratio", "means_ratio", "estimand")

    def covers(self, truth: str) -> bool:
        """Whether the interval holds this truth (one of TRUTHS)."""
        return self.low <= getattr(self, truth) <= self.high


def marker(key: Key) -> bytes:
    return b"ciq-replay-key:" + ",".join(map(str, key)).encode() + b";"  # what ReplayMeasurer reads


def estimand(problem: Problem, candidate: Key, baseline: Key, samples: int = 10, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    a = rng.choice(np.asarray(problem.landscape.timed(baseline)), size=(ESTIMAND_ROUNDS, samples))
    b = rng.choice(np.asarray(problem.landscape.timed(candidate)), size=(ESTIMAND_ROUNDS, samples))
    return float(np.median(np.median(b, axis=1) / np.median(a, axis=1)))


def _steady_median(problem: Problem, key: Key) -> float:
    return statistics.median(problem.landscape.timed(key))


@dataclass(frozen=True)
class Choice:
    """What a confirmation decided, as the ACF records it."""

    key: Key  # the final choice (the defaults when kept)
    intervals: list[Interval]  # each finalist's, with its truths
    confirmed_median: float | None  # `objective.confirmed_median` (None when the defaults are kept)
    delta: float  # `objective.confirmation_delta`: the A/A threshold (nan: nothing to confirm)


def confirmed_choice(problem: Problem, evaluated: Sequence[Key], seed: int,
                     screened: Mapping[Key, float] | None = None) -> Choice:
    """The product's finalists and confirmation on `evaluated` (defaults first). `screened`:
    each configuration's screening value (default: its recorded mean)."""
    base = problem.default
    order = {k: i for i, k in enumerate(dict.fromkeys(evaluated))}
    screen = problem.value if screened is None else screened.get
    candidates = [Candidate(i, ",".join(map(str, k)), v, True) for k, i in order.items()
                  if (v := screen(k)) is not None]
    finalists = choose_finalists(candidates, ",".join(map(str, base)))
    by_trial = {i: k for k, i in order.items()}
    measurer = ReplayMeasurer(problem.landscape, seed=seed)
    pairs = [(c, executable_sampler(measurer, marker(by_trial[c.trial]))) for c in finalists]
    outcome = confirm(executable_sampler(measurer, marker(base)), pairs, seed=seed)
    intervals = []
    base_mean, base_steady = problem.value(base), problem.landscape.steady_mean(base)
    for confirmed in outcome.confirmed:
        if confirmed.comparison is None:
            continue
        key = by_trial[confirmed.candidate.trial]
        intervals.append(Interval(confirmed.comparison.low, confirmed.comparison.high,
                                  _steady_median(problem, key) / _steady_median(problem, base),
                                  problem.landscape.steady_mean(key) / base_steady,  # type: ignore[operator]
                                  problem.value(key) / base_mean, estimand(problem, key, base)))  # type: ignore[operator]
    if outcome.winner is None:
        return Choice(base, intervals, None, outcome.delta)
    return Choice(by_trial[outcome.winner.candidate.trial], intervals, outcome.winner.median_ms, outcome.delta)


def compileiq_evaluated(problem: Problem, seed: int, budget: int) -> list[Key]:
    """The configurations compileiq's search evaluates in `budget` evaluations after the defaults
    (whole batches), each once, in order: what its confirmation chooses from."""
    batches = searcher_batches(problem, "bayes", seed, lambda b: sum(map(len, b)) >= budget + 1)
    return list(dict.fromkeys(k for b in batches for k in b))


def coverage(problem: Problem, seeds: int, budget: int, repeats: int) -> dict:
    intervals: list[Interval] = []
    speedups: list[float] = []
    base_mean = problem.value(problem.default)
    assert base_mean is not None
    for seed in range(seeds):
        evaluated = compileiq_evaluated(problem, seed, budget)
        for repeat in range(repeats):
            choice = confirmed_choice(problem, evaluated, seed * 1000 + repeat)
            intervals += choice.intervals
            speedups.append(base_mean / problem.value(choice.key))  # type: ignore[operator]
    return summarize_coverage(intervals, speedups, base_mean / problem.best, budget)


def summarize_coverage(intervals: Sequence[Interval], speedups: Sequence[float], best: float, budget: int) -> dict:
    n = len(intervals)
    return {
        "budget": budget, "intervals": n,
        **{f"coverage_of_{truth}": sum(i.covers(truth) for i in intervals) / n if n else None
           for truth in Interval.TRUTHS},
        "choices": len(speedups),
        "median_true_speedup_of_choice": statistics.median(speedups) if speedups else None,
        "quartiles_true_speedup_of_choice": _quartiles(speedups),
        "choices_slower_than_defaults": sum(s < 1 for s in speedups),
        "choices_keeping_defaults": sum(s == 1 for s in speedups),
        "best_possible_speedup": best,
    }


def _quartiles(values: Sequence[float]) -> list[float] | None:
    if len(values) < 2:
        return None
    q = statistics.quantiles(values, n=4, method="inclusive")
    return [q[0], q[2]]


# --- the comparison ---

def compare(problem: Problem, names: Sequence[str], seeds: int, cap: int,
            on_row: Callable[[dict, float], None] = lambda row, seconds: None) -> tuple[list[dict], dict]:
    """One row per strategy (`on_row` told each as it is made). A strategy that raises (Kernel
    Tuner's on a space too small for it, say) is a row that says so; the others still run."""
    known = strategies()
    rows, spent = [], {}
    for name in names:
        start = time.perf_counter()
        row: dict[str, Any] = {"landscape": problem.landscape.name, "strategy": name,
                               "batch": BATCH if not name.startswith("kt-") else 1, "seeds": seeds}
        try:
            row.update(_row(problem, known[name], seeds, cap, name.startswith("kt-")))
        except Exception as error:  # noqa: BLE001 - a peer's own failure is its row, not the run's end
            row["crashed"] = f"{type(error).__name__}: {' '.join(str(error).split())}"[:200]
        rows.append(row)
        spent[name] = time.perf_counter() - start
        on_row(row, spent[name])
    return rows, spent


def _row(problem: Problem, run: Callable[[Problem, int, int], list[list[Key]]], seeds: int, cap: int,
         checked: bool) -> dict[str, Any]:
    runs = [charge(problem, run(problem, seed, cap), cap) for seed in range(seeds)]
    row: dict[str, Any] = {}
    for target in TARGETS:
        label = f"{round(target * 100)}pct"
        counts = [r[target].evaluations for r in runs]
        seconds = [r[target].seconds for r in runs]
        row[f"median_evaluations_to_{label}"] = statistics.median(counts)
        row[f"quartiles_evaluations_to_{label}"] = _quartiles(counts)
        row[f"median_seconds_to_{label}"] = statistics.median(seconds)
        row[f"reached_{label}"] = sum(r[target].reached for r in runs)
        row[f"evaluations_to_{label}"] = counts  # per seed; cap + 1 where a run fell short
    if checked:  # Kernel Tuner seeds through the global generators: checked (the others take the seed)
        row["deterministic_by_seed"] = run(problem, 0, cap) == run(problem, 0, cap)
    return row


def versus(ours: dict | None, row: dict, label: str) -> str:
    """The p-value of a two-sided Mann-Whitney U test of `row`'s per-seed evaluations to the
    target against compileiq's ("-" for compileiq itself, or without per-seed counts)."""
    key = f"evaluations_to_{label}"
    if ours is None or row is ours or key not in row or key not in ours:
        return "-"
    if set(row[key]) == set(ours[key]) and len(set(ours[key])) == 1:
        return "1"  # the same constant on both sides (both at the cap, say)
    from scipy.stats import mannwhitneyu

    return f"{mannwhitneyu(ours[key], row[key], alternative='two-sided').pvalue:.2g}"


def facts(problem: Problem) -> dict[str, Any]:
    """What the table's header states (and --json records): the space, the optimum within it and
    its targets, the defaults, and whether the optimum by mean is the steady-state best."""
    allowed, total = problem.space.macro_combinations()
    means = [problem.value(k) for k in problem.allowed]
    shown = ",".join(map(str, problem.optimum))
    steady = problem.steady_best if problem.landscape.repeated else problem.optimum
    return {"landscape": problem.landscape.name, "device": problem.landscape.device,
            "space": str(problem.t1_path) if problem.t1_path else "the cache's tune_params",
            "allowed": allowed, "combinations": total, "allowed_with_times": len(problem.allowed),
            "recorded_with_times": sum(1 for t in problem.landscape.times.values() if t),
            "optimum_ms": problem.best, "optimum": shown,
            **{f"within_{round(t * 100)}pct": sum(1 for v in means if v is not None and v <= problem.target(t))
               for t in TARGETS},
            "defaults": ",".join(map(str, problem.default)), "defaults_ms": problem.value(problem.default),
            "steady_state_best": ",".join(map(str, steady)),
            "optimum_is_steady_state_best": steady == problem.optimum}


def render(problem: Problem, rows: Sequence[dict], covered: dict | None, cap: int) -> list[str]:
    told = facts(problem)
    allowed = "?" if told["allowed"] is None else f"{told['allowed']:,}"
    head = (f"{told['landscape']} ({told['device']}): {allowed} of {told['combinations']:,} configurations "
            f"allowed, {told['allowed_with_times']:,} of them with times; optimum {told['optimum_ms']:.4f} ms "
            f"({told['within_1pct']} within 1%, {told['within_5pct']} within 5%); defaults "
            f"{told['defaults_ms']:.4f} ms; cap {cap}")
    lines = [head]
    if not told["optimum_is_steady_state_best"]:
        steady = problem.steady_best
        lines.append(f"warning: the optimum by mean ({told['optimum']}) is not the fastest once warm "
                     f"({told['steady_state_best']}: {problem.landscape.steady_mean(steady):.4f} ms against "
                     f"{problem.landscape.steady_mean(problem.optimum):.4f} ms without the first, cold launch): "
                     "with so few timings the targets may rest on a cold-launch artefact")
    lines.append(f"{'strategy':24} {'batch':>5} {'evals 1%':>9} {'reached':>7} {'s 1%':>8} {'p 1%':>6} {'evals 5%':>9} "
                 f"{'reached':>7} {'s 5%':>8} {'p 5%':>6}  deterministic")
    ours = next((row for row in rows if row["strategy"] == "compileiq" and "crashed" not in row), None)
    for row in rows:
        if "crashed" in row:
            lines.append(f"{row['strategy']:24} {row['batch']:>5} crashed: {row['crashed']}")
            continue
        p1, p5 = (versus(ours, row, label) for label in ("1pct", "5pct"))
        lines.append(
            f"{row['strategy']:24} {row['batch']:>5} {_shown(row['median_evaluations_to_1pct'], cap):>9} "
            f"{row['reached_1pct']:>4}/{row['seeds']:<2} {row['median_seconds_to_1pct']:>8.0f} {p1:>6} "
            f"{_shown(row['median_evaluations_to_5pct'], cap):>9} {row['reached_5pct']:>4}/{row['seeds']:<2} "
            f"{row['median_seconds_to_5pct']:>8.0f} {p5:>6}  {row.get('deterministic_by_seed', '-')}")
    if ours is not None and len(rows) > 1:
        lines.append("p: two-sided Mann-Whitney U test of this strategy's per-seed evaluations against compileiq's "
                     "(every run short of the target counted alike, cap + 1); under 0.05: a difference the seeds support")
    if covered:
        lines.append(_coverage_line(problem, covered))
    return lines


def _coverage_line(problem: Problem, covered: dict) -> str:
    if not problem.landscape.repeated:
        intervals = "intervals not judged (one timing per configuration: its replay has no noise)"
    elif not covered["intervals"]:
        intervals = "no interval to judge (no finalist was confirmed against the defaults)"
    else:
        intervals = (f"{covered['intervals']} intervals cover the steady-state medians' ratio "
                     f"{covered['coverage_of_medians_ratio']:.1%}, the steady-state means' ratio "
                     f"{covered['coverage_of_steady_ratio']:.1%}, the means' ratio of all recorded times "
                     f"{covered['coverage_of_means_ratio']:.1%}, the statistic's estimand "
                     f"{covered['coverage_of_estimand']:.1%}")
    quartiles = covered["quartiles_true_speedup_of_choice"]
    spread = f" (quartiles {quartiles[0]:.3f}, {quartiles[1]:.3f})" if quartiles else ""
    return (f"confirmation after {covered['budget']} evaluations: {intervals}; "
            f"true speedup of the final choice: median {covered['median_true_speedup_of_choice']:.3f}{spread}, "
            f"{covered['choices_slower_than_defaults']} of {covered['choices']} slower than the defaults, "
            f"{covered['choices_keeping_defaults']} kept them; best possible {covered['best_possible_speedup']:.3f}")


def _shown(evaluations: float, cap: int) -> str:
    """A median as the table shows it: `>cap` where half the runs or more fell short."""
    return f">{cap}" if evaluations > cap else f"{evaluations:g}"


def cache_t1(landscape: Landscape) -> dict:
    """A T1 tuning space made of the cache's own `tune_params` when no space file is given: every
    combination of their values, no restrictions (one the cache lacks is a failed launch for every
    strategy), the first value of each parameter as the defaults; where that configuration has no
    recorded time (Kernel Tuner's test caches record a sample), the first recorded one that has."""
    if not landscape.values:
        raise InputError(f"{landscape.name}: no usable tune_params in the cache: give its tuning space with --space")
    first = tuple(values[0] for values in landscape.values.values())
    timed = [k for k, t in landscape.times.items() if t and all(v in landscape.values[p] for p, v in
                                                                   zip(landscape.parameters, k))]
    default = first if landscape.mean(first) is not None or not timed else timed[0]
    parameters = [{"Name": name, "Type": "int", "Values": list(values), "Default": value}
                  for (name, values), value in zip(landscape.values.items(), default)]
    return {"General": {"BenchmarkName": landscape.name.split(".")[0]},
            "ConfigurationSpace": {"TuningParameters": parameters, "Conditions": []}}


def problems(landscapes: Sequence[Path], spaces: Sequence[Path]) -> list[Problem]:
    """Each cache with its space, checked: InputError (one line) for one no strategy can be judged on."""
    if len(spaces) not in (0, 1, len(landscapes)):
        raise InputError("give one --space, one per --landscape, or none (each cache's own tune_params)")
    found = []
    for index, cache in enumerate(landscapes):
        landscape = load_landscape(cache)
        t1_path = spaces[0] if len(spaces) == 1 else spaces[index] if spaces else None
        t1 = t1_file.read_t1(t1_path) if t1_path else cache_t1(landscape)
        space = t1_space(t1, t1_path or cache)
        names = [p.removeprefix("define.") for p in (q.name for q in space.parameters)]
        if sorted(names) != sorted(landscape.parameters):
            raise InputError(f"{t1_path} names {', '.join(names)}; {cache} has {', '.join(landscape.parameters)}")
        problem = Problem(landscape, space, t1, cache, t1_path)
        if not problem.allowed:
            raise InputError(f"{cache}: no configuration of the space has a recorded time (every one failed, "
                             f"missing, or without `time`: the objective judged is time)")
        if problem.value(problem.default) is None:
            shown = ",".join(map(str, problem.default))
            raise InputError(f"{cache}: the defaults ({shown}) have no recorded time (missing or failed): every "
                             "strategy starts from them and every speedup is against them")
        found.append(problem)
    return found


def landscape_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's parser with the landscapes it runs on (--landscape, --space), read by `problems`."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--landscape", type=Path, action="append", required=True,
                        help="Kernel Tuner cache file (.json or .json.gz); repeat for several")
    parser.add_argument("--space", type=Path, action="append", default=[],
                        help="the tuning space in the T1 format (JSON): one, or one per --landscape; without "
                             "it, each cache's own tune_params, unrestricted, their first values the defaults")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    global BATCH  # --batch: one batch for the whole run
    parser = landscape_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--cap", type=int, default=512, help="evaluations a run may take (a run short of the target counts cap + 1)")
    parser.add_argument("--budget", type=int, default=64, help="compileiq's evaluations after the defaults "
                        "before its confirmation (coverage)")
    parser.add_argument("--confirmations", type=int, default=5, help="confirmations per seed (coverage)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated")
    parser.add_argument("--json", type=Path, help="also write the rows and the coverage as JSON")
    parser.add_argument("--batch", type=int, default=BATCH, help="the batch strategies' batch (compileiq's "
                        "`--batch-size`; random and TPE too), charged whole")
    args = parser.parse_args(argv)
    for option in ("batch", "seeds", "cap", "budget"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1")
    if args.confirmations < 0:
        parser.error("--confirmations must be 0 or more")
    BATCH = args.batch
    names = [n for n in args.strategies.split(",") if n]
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        parser.error(f"unknown strategies {unknown}; choose from {', '.join(STRATEGIES)}")
    logging.getLogger().setLevel(logging.ERROR)
    try:
        found = problems(args.landscape, args.space)
    except (InputError, LandscapeError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"machine: {machine()}; {args.seeds} seeds; batch {BATCH} (Kernel Tuner: 1)")
    report: dict[str, Any] = {"seeds": args.seeds, "cap": args.cap, "rows": [], "coverage": {}, "replay_seconds": {},
                              "landscapes": {}}

    def write() -> None:
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))

    for problem in found:
        name = problem.landscape.name
        report["landscapes"][name] = facts(problem)
        report["replay_seconds"][name] = {}

        def kept(row: dict, seconds: float) -> None:
            report["rows"].append(row)
            report["replay_seconds"][name][row["strategy"]] = seconds  # noqa: B023 - called within this loop
            write()

        rows, _ = compare(problem, names, args.seeds, args.cap, kept)
        covered = coverage(problem, args.seeds, args.budget, args.confirmations) if args.confirmations else None
        report["coverage"][name] = covered if problem.landscape.repeated else (
            covered and {k: v for k, v in covered.items() if not k.startswith("coverage_")})
        write()
        print("\n".join(render(problem, rows, covered, args.cap)), flush=True)


if __name__ == "__main__":
    main()
