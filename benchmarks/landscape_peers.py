"""The strategies a landscape is searched with, each run as its own users run it: each returns
the batches of configurations it evaluated, the defaults first (`landscape_problem.charge` then
charges them, the same rules for every strategy).

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

The batch (8 above) is `--batch`'s: `strategies(batch)`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import random
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import t1_file
from common import BATCH
from landscape_problem import TARGETS, Key, Problem, config_of, finished, key_of
from t1_file import InputError

from compileiq.evaluate.replay import field_of, read_cache
from compileiq.search.searcher import Observation, Searcher, SearchSettings

KERNEL_TUNER = ("random_sample", "genetic_algorithm", "simulated_annealing", "bayes_opt",
                "diff_evo", "pso", "greedy_ils", "dual_annealing")
STRATEGIES = ("compileiq", "random", "optuna-tpe", *(f"kt-{name}" for name in KERNEL_TUNER))
IDLE_BATCHES = 50
MAX_FILLED = 4_000_000  # configurations a cache's tune_params may span (each one a dict for Kernel Tuner)
MISSING = "RuntimeFailedConfig"  # Kernel Tuner's record of a configuration that failed to run
Run = Callable[[Problem, int, int], list[list[Key]]]  # (problem, seed, cap): the batches evaluated


def searcher_batches(problem: Problem, strategy: str, seed: int,
                     done: Callable[[list[list[Key]]], bool], batch_size: int = BATCH) -> list[list[Key]]:
    """The product's Searcher, told and asked in batches of `batch_size` after the defaults."""
    searcher = Searcher(problem.space, SearchSettings(strategy, seed=seed))
    batches: list[list[Key]] = []
    batch = [problem.space.default_config()]
    while batch and not done(batches):
        keys = [key_of(problem.landscape, c) for c in batch]
        batches.append(keys)
        searcher.tell([Observation(c, problem.value(k)) for c, k in zip(batch, keys)])
        batch = searcher.ask(batch_size)
    return batches


def searcher_run(strategy: str, batch: int = BATCH) -> Run:
    return lambda problem, seed, cap: searcher_batches(problem, strategy, seed,
                                                       lambda batches: finished(problem, batches, cap), batch)


def optuna_tpe(problem: Problem, seed: int, cap: int, batch_size: int = BATCH) -> list[list[Key]]:
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
        while idle < IDLE_BATCHES and not finished(problem, batches, cap):
            trials = [study.ask(distributions) for _ in range(batch_size)]
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


def kernel_tuner_run(strategy: str) -> Run:
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


def strategies(batch: int = BATCH) -> dict[str, Run]:
    """Each strategy by name; the batch ones (compileiq, random, Optuna TPE) in batches of `batch`."""
    found: dict[str, Run] = {"compileiq": searcher_run("bayes", batch), "random": searcher_run("random", batch),
                             "optuna-tpe": functools.partial(optuna_tpe, batch_size=batch)}
    found.update({f"kt-{name}": kernel_tuner_run(name) for name in KERNEL_TUNER})
    return found
