"""Benchmark (b): evaluations that Bayesian search needs to reach the exhaustive optimum of a
static objective, median over seeds, against random search, on each bundled kernel.

Every configuration of a small space is compiled once (an exhaustive `tune`, recorded in the
database); each strategy then replays the search with the tuner's own batch size against the
recorded metrics, counting evaluations (the baseline first, as `compileiq tune` does) until it
reaches the optimum. Cases where the baseline itself is optimal are trivial (1 evaluation for
every strategy) and are listed but left out of the summary ratio.

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 10] [--objectives static,spills,registers]
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import KERNELS, fresh_db, machine, tune

from compileiq.metrics import StaticMetrics, objective_value
from compileiq.search import Observation, Searcher, SearchSettings
from compileiq.space import SearchSpace
from compileiq.store import Trial, TrialState

SPACE = ("ptxas.opt_level", "ptxas.maxrregcount", "ptxas.override_directive_values", "ptxas.allow_expensive_optimizations")
BATCH = 8


def evaluations_to_optimum(space: SearchSpace, values: dict[str, float | None], settings: SearchSettings) -> int:
    target = min(v for v in values.values() if v is not None)
    searcher = Searcher(space, settings)
    batch = [space.default_config()]
    count = 0
    while batch:
        observations = [Observation(c, values[c.key]) for c in batch]
        for observation in observations:
            count += 1
            if observation.value is not None and observation.value <= target:
                return count
        searcher.tell(observations)
        batch = searcher.ask(BATCH)
    raise AssertionError("the search ended without visiting the optimum")


def value(trial: Trial, objective: str) -> float | None:
    if trial.state is not TrialState.COMPLETE:
        return None
    m = trial.metrics
    metrics = StaticMetrics(m["spill_bytes"], m["registers"], m["occupancy"], m["instructions"], m["stack_bytes"])
    return objective_value(objective, metrics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--objectives", default="static,spills,registers")
    parser.add_argument("--surrogate", default="ET")
    args = parser.parse_args()
    print(f"machine: {machine()}; {args.seeds} seeds; batch {BATCH}; surrogate {args.surrogate}")
    print(f"space: {', '.join(SPACE)} (+ each kernel's tuned macros)")
    print(f"{'kernel':12} {'objective':10} {'configs':>7} {'optima':>6} {'bayes':>7} {'random':>7} {'ratio':>6}  note")
    ratios = []
    for kernel in KERNELS:
        start = time.perf_counter()
        report = tune(kernel, fresh_db(), objective="static", strategy="exhaustive", budget=10**6,
                      workers="local", only=SPACE, batch_size=32, simplify=False)
        for objective in args.objectives.split(","):
            values = {t.config_key: value(t, objective) for t in report.result.trials}
            best = min(v for v in values.values() if v is not None)
            optima = sum(1 for v in values.values() if v == best)
            medians = {
                strategy: statistics.median(
                    evaluations_to_optimum(report.space, values, SearchSettings(strategy, seed, args.surrogate))
                    for seed in range(args.seeds)
                )
                for strategy in ("bayes", "random")
            }
            ratio = medians["bayes"] / medians["random"]
            trivial = values[report.space.default_config().key] == best
            if not trivial:
                ratios.append(ratio)
            note = "trivial: the baseline is optimal" if trivial else ""
            print(f"{kernel.stem:12} {objective:10} {len(values):7d} {optima:6d} {medians['bayes']:7.1f} "
                  f"{medians['random']:7.1f} {ratio:6.2f}  {note}", flush=True)
        print(f"{'':12} (exhaustive compile + replays: {time.perf_counter() - start:.0f} s)", flush=True)
    if ratios:
        print(f"non-trivial cases: {len(ratios)}; median ratio bayes/random {statistics.median(ratios):.2f}; "
              f"geometric mean {statistics.geometric_mean(ratios):.2f} (target <= 0.33)")


if __name__ == "__main__":
    main()
