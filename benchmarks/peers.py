"""Benchmark (c): compileiq's search against other tuners, replayed on the search benchmark's
exhaustive tables (10 kernels x 3 static objectives) with the same counting.

Every strategy starts from the baseline (all defaults, counted as evaluation 1, as `compileiq tune`
does); a configuration is counted the first time it is evaluated, and a repeat is served from
the record for free. Counting is by whole batches (benchmarks/common.py Replay): a strategy that
proposes batches of 8 is charged every configuration of the batch in which it reaches the
optimum, and of every batch before, since a batch is compiled side by side. Kernel Tuner, which
runs one configuration at a time, is counted one at a time. A run that stops without reaching
the optimum is charged the whole space.

Encodings (benchmarks/common.py peer_axis): no peer is handed an order that means nothing. A
setting whose values are all numbers is an ordered axis, sorted by value (ptxas.maxrregcount's
"default", no cap, sits after 255, its true place, not beside the tightest cap of 24; tuned
macros such as tile sizes are sorted); every other setting (flags, booleans, enums such as
allow_expensive_optimizations' default/true/false) is categorical.
How each peer is driven:

- compileiq, random: the Searcher in batches of 8 (`compileiq tune`'s batch).
- Optuna TPE (independent / multivariate), CMA-ES, random: ask/tell in batches of 8 (8 asks,
  then 8 tells, as Optuna runs 8 parallel workers); an ordered axis an IntDistribution over its
  sorted values' indices, a categorical one a CategoricalDistribution (`suggest_categorical`;
  Optuna's CMA-ES samples categorical parameters with its independent fallback sampler, as it
  does for any user); failed variants told as FAIL; the baseline added to the study as a
  finished trial.
- skopt forest_minimize: its defaults (extra trees with min_samples_leaf=3, 10 random initial
  points, EI with xi=0.01) at a reduced size: 25 trees instead of 100 and 500 sampled candidates
  instead of 10,000 (at its defaults one run took minutes on a 2-CPU machine: skopt refits the
  forest for every point of a batch), through skopt's Optimizer so that it can ask batches of 8
  (constant liar); an ordered axis `Integer`, a categorical one `Categorical`; failures told as
  the worst value seen so far (skopt rejects inf).
- Kernel Tuner: `tune_kernel(simulation_mode=True)` on the table written in its cache format;
  sequential (one configuration at a time: Kernel Tuner has no batches, so it is counted one at a
  time); failed variants are CompilationFailedConfig; max_fevals is the space size. Kernel Tuner
  takes each parameter as a list of values and has no categorical type: an ordered axis is given
  its sorted values' indices (so neighbours are neighbouring values); a categorical one its
  indices in the space's order (an order only for enums of three or more values: the one such
  setting here is allow_expensive_optimizations).

Case classes (benchmarks/common.py Case.kind): dense (>= 1 in 8 configurations optimal),
plateau (>= a quarter of the space shares one non-optimal value), needle (the rest), trivial
(the baseline is optimal: 1 evaluation for everyone, left out of the geometric means).
A run is stopped at --cap evaluations (default 128) and charged that: on the hardest cases
most peers need hundreds, and a replay of Optuna's TPE over 500 trials takes minutes. The cap
only flatters whoever needs more than it.

    pip install 'compileiq-tuner[peers]'
    .venv/bin/python benchmarks/peers.py --tables store/search-tables.json [--seeds 10]
        [--peers compileiq,random,optuna-tpe,...] [--results store/peer-results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from common import (
    BATCH,
    CASE_KINDS,
    PeerEncoding,
    Replay,
    compileiq_strategy,
    evaluations_to_optimum,
    load_cases,
    machine,
)

from compileiq.search.searcher import SearchSettings

Strategy = Callable[[Replay, int], None]
IDLE_BATCHES = 50  # a peer that proposes nothing new for this many batches has stopped
SKOPT_TREES = 25  # forest_minimize's extra trees: 100 (refitted per batch point: minutes a run)
SKOPT_CANDIDATES = 500  # forest_minimize samples 10,000
COUNTING = "whole-batches,peer-axes"  # in --results keys: results counted otherwise are not reused


def optuna_distributions(encoding: PeerEncoding) -> dict[str, Any]:
    """Each axis as Optuna is given it: an ordered one an IntDistribution over its sorted values'
    indices, a categorical one `suggest_categorical`'s distribution over its values' indices."""
    import optuna

    return {
        a.name: optuna.distributions.IntDistribution(0, len(a.values) - 1)
        if a.ordered
        else optuna.distributions.CategoricalDistribution(tuple(range(len(a.values))))
        for a in encoding.axes
    }


def optuna_strategy(make_sampler: Callable[[int], Any]) -> Strategy:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)

    def run(replay: Replay, seed: int) -> None:
        space, encoding = replay.case.space, PeerEncoding(replay.case.space)
        distributions = optuna_distributions(encoding)
        names = list(distributions)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optuna.create_study(sampler=make_sampler(seed))
            baseline = encoding.indices(space.default_config())
            value = replay.evaluate(space.default_config().key)
            study.add_trial(
                optuna.trial.create_trial(
                    params=dict(zip(names, baseline)),
                    distributions=distributions,
                    value=value,
                    state=optuna.trial.TrialState.COMPLETE
                    if value is not None
                    else optuna.trial.TrialState.FAIL,
                )
            )
            idle = 0
            while idle < IDLE_BATCHES:
                before = replay.count
                trials = [study.ask(distributions) for _ in range(BATCH)]
                keys = [encoding.config([t.params[n] for n in names]).key for t in trials]
                for trial, value in zip(trials, replay.evaluate_batch(keys)):
                    if value is None:
                        study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    else:
                        study.tell(trial, value)
                idle = idle + 1 if replay.count == before else 0

    return run


def skopt_forest_strategy() -> Strategy:
    from skopt import Optimizer
    from skopt.learning import ExtraTreesRegressor
    from skopt.space import Categorical, Integer

    def run(replay: Replay, seed: int) -> None:
        space, encoding = replay.case.space, PeerEncoding(replay.case.space)
        optimizer = Optimizer(
            [
                Integer(0, len(a.values) - 1) if a.ordered else Categorical(list(range(len(a.values))))
                for a in encoding.axes
            ],
            base_estimator=ExtraTreesRegressor(
                n_estimators=SKOPT_TREES, min_samples_leaf=3, random_state=seed
            ),
            n_initial_points=10,
            acq_func="EI",
            acq_optimizer="sampling",
            acq_optimizer_kwargs={"n_points": SKOPT_CANDIDATES},
            acq_func_kwargs={"xi": 0.01},
            random_state=seed,
        )
        worst = 1.0

        def told(value: float | None) -> float:
            nonlocal worst
            if value is None:
                return worst
            worst = max(worst, value)
            return value

        baseline = list(encoding.indices(space.default_config()))
        optimizer.tell(baseline, told(replay.evaluate(space.default_config().key)))
        idle = 0
        while idle < IDLE_BATCHES:
            before = replay.count
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                points = optimizer.ask(n_points=BATCH)
            rows = [[int(x) for x in p] for p in points]
            values = replay.evaluate_batch([encoding.config(r).key for r in rows])
            optimizer.tell(rows, [told(v) for v in values])
            idle = idle + 1 if replay.count == before else 0

    return run


@contextlib.contextmanager
def _simulation_reports_to(replay: Replay) -> Iterator[None]:
    """Kernel Tuner's simulation runner, made to hand each configuration it serves to the
    replay's counter (which ends the run at the optimum by raising Found)."""
    from kernel_tuner.runners.simulation import SimulationRunner

    original = SimulationRunner.run
    encoding = PeerEncoding(replay.case.space)

    def run(self: Any, parameter_space: Any, tuning_options: Any) -> Any:
        configs = list(parameter_space)
        for config in configs:  # one at a time: Kernel Tuner compiles and runs sequentially
            replay.evaluate(encoding.config([int(x) for x in config]).key)
        return original(self, configs, tuning_options)

    SimulationRunner.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        SimulationRunner.run = original  # type: ignore[method-assign]


def kernel_tuner_strategy(name: str) -> Strategy:
    import kernel_tuner

    def run(replay: Replay, seed: int) -> None:
        case, encoding = replay.case, PeerEncoding(replay.case.space)
        params = {f"p{i}": list(range(len(a.values))) for i, a in enumerate(encoding.axes)}
        entries = {}
        for key, value in case.values.items():
            row = encoding.indices(json.loads(key))
            entry: dict[str, Any] = {f"p{i}": int(v) for i, v in enumerate(row)}
            entry["time"] = "CompilationFailedConfig" if value is None else float(value)
            entries[",".join(str(v) for v in row)] = entry
        cache = {
            "device_name": "table",
            "kernel_name": case.kernel,
            "problem_size": [1],
            "tune_params_keys": list(params),
            "tune_params": params,
            "objective": "time",
            "cache": entries,
        }
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "cache.json"
            path.write_text(json.dumps(cache))
            random.seed(seed)
            np.random.seed(seed)
            with warnings.catch_warnings(), _simulation_reports_to(replay):
                warnings.simplefilter("ignore")
                kernel_tuner.tune_kernel(
                    case.kernel,
                    "__global__ void k() {}",
                    1,
                    [],
                    params,
                    cache=str(path),
                    simulation_mode=True,
                    strategy=name,
                    strategy_options={"max_fevals": len(case.values)},
                    quiet=True,
                    verbose=False,
                )

    return run


def peers() -> dict[str, Callable[[], Strategy]]:
    """Each peer's name and how to build it (imports happen only for the peers asked for)."""

    def tpe(multivariate: bool) -> Callable[[], Strategy]:
        def build() -> Strategy:
            import optuna

            return optuna_strategy(
                lambda seed: optuna.samplers.TPESampler(seed=seed, multivariate=multivariate)
            )

        return build

    def optuna_sampler(name: str) -> Callable[[], Strategy]:
        def build() -> Strategy:
            import optuna

            sampler = getattr(optuna.samplers, name)
            return optuna_strategy(lambda seed: sampler(seed=seed))

        return build

    return {
        "compileiq": lambda: compileiq_strategy(SearchSettings()),
        "random": lambda: compileiq_strategy(SearchSettings("random")),
        "optuna-tpe": tpe(False),
        "optuna-tpe-mv": tpe(True),
        "optuna-cmaes": optuna_sampler("CmaEsSampler"),
        "optuna-random": optuna_sampler("RandomSampler"),
        "skopt-forest": skopt_forest_strategy,
        "kt-bayes_opt": lambda: kernel_tuner_strategy("bayes_opt"),
        "kt-genetic": lambda: kernel_tuner_strategy("genetic_algorithm"),
        "kt-annealing": lambda: kernel_tuner_strategy("simulated_annealing"),
        "kt-random": lambda: kernel_tuner_strategy("random_sample"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--objectives", default="static,spills,registers")
    parser.add_argument("--peers", default=",".join(peers()), help="comma-separated")
    parser.add_argument(
        "--tables", type=Path, help="JSON cache of the exhaustive tables (read and written)"
    )
    parser.add_argument("--cases", default="", help="only these kernel:objective cases")
    parser.add_argument(
        "--cap", type=int, default=128, help="stop a run at this many evaluations (charged that)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="JSON cache of the peers' results (every peer but compileiq), read and written",
    )
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    known = peers()
    names = args.peers.split(",")
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown peers {unknown}; choose from {', '.join(known)}")
    strategies = {name: known[name]() for name in names}
    wanted = set(filter(None, args.cases.split(",")))
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}; {args.seeds} seeds; "
          f"batch {BATCH} (Kernel Tuner: 1)")
    print(f"command: {' '.join(sys.argv)}")
    print(
        "evaluations to the optimum, median over seeds (the baseline counts as 1); whole batches: "
        f"the batch that reaches it is charged in full; runs stopped at {args.cap} evaluations count "
        f"{args.cap}; peers' encodings: numeric settings ordered (no register cap at 255), the rest "
        "categorical"
    )
    header = " ".join(f"{n[:13]:>13}" for n in names)
    print(f"{'case':22} {'kind':8} {'configs':>7} {header}")
    medians: dict[str, dict[str, list[float]]] = {
        kind: {n: [] for n in names} for kind in CASE_KINDS
    }
    seconds = dict.fromkeys(names, 0.0)
    kernels = [label.split(":")[0] for label in wanted]
    kept = json.loads(args.results.read_text()) if args.results and args.results.exists() else {}
    for case in load_cases(args.tables, args.objectives.split(","), kernels):
        label = f"{case.kernel}:{case.objective}"
        if wanted and label not in wanted:
            continue
        row = []
        for name, strategy in strategies.items():
            start = time.perf_counter()
            counts = []
            for seed in range(args.seeds):
                key = f"{name}|{label}|{seed}|{args.cap}|{COUNTING}"
                if key not in kept or name == "compileiq":
                    kept[key] = evaluations_to_optimum(case, strategy, seed, args.cap)
                    if args.results and name != "compileiq":
                        args.results.write_text(json.dumps(kept))
                counts.append(kept[key])
            median = statistics.median(counts)
            seconds[name] += time.perf_counter() - start
            medians[case.kind][name].append(median)
            row.append(f"{median:13.1f}")
        print(f"{label:22} {case.kind:8} {len(case.values):7d} {' '.join(row)}", flush=True)
    print("geometric mean of the medians per case class:")
    for kind in CASE_KINDS:
        if medians[kind][names[0]]:
            means = " ".join(f"{_geomean(medians[kind][n]):13.1f}" for n in names)
            print(f"{kind + f' ({len(medians[kind][names[0]])})':31} {'':7} {means}")
    nontrivial = {
        n: [m for k in CASE_KINDS if k != "trivial" for m in medians[k][n]] for n in names
    }
    if nontrivial[names[0]]:
        means = " ".join(f"{_geomean(nontrivial[n]):13.1f}" for n in names)
        print(f"{f'non-trivial ({len(nontrivial[names[0]])})':31} {'':7} {means}")
    print(f"{'replay seconds':31} {'':7} " + " ".join(f"{seconds[n]:13.0f}" for n in names))


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


if __name__ == "__main__":
    main()
