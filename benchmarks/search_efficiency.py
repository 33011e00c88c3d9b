"""Benchmark (b): evaluations that Bayesian search needs to reach the exhaustive optimum of a
static objective, median over seeds, against random search, on each bundled kernel.

Every configuration of a small space is compiled once (exhaustive tune, cached in the database);
then each strategy replays the search with the tuner's own batch size against those recorded
values, counting evaluations (the baseline first, as `compileiq tune` does) until the optimum.

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 10] [--objective static]
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import KERNELS, fresh_db, machine, tune

from compileiq.search import Observation, Searcher, SearchSettings
from compileiq.space import Config, SearchSpace
from compileiq.store import TrialState

SPACE = ("ptxas.opt_level", "ptxas.maxrregcount", "ptxas.override_directive_values", "ptxas.register_usage_level")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--objective", default="static")
    parser.add_argument("--surrogate", default="ET")
    args = parser.parse_args()
    print(f"machine: {machine()}; objective {args.objective}; space: {', '.join(SPACE)} (+ each kernel's tuned macros)")
    print(f"{'kernel':12} {'configs':>7} {'optima':>6} {'bayes':>6} {'random':>6} {'ratio':>6} {'seconds':>8}")
    ratios = []
    for kernel in KERNELS:
        start = time.perf_counter()
        report = tune(kernel, fresh_db(), objective=args.objective, strategy="exhaustive", budget=10**6,
                      workers="local", only=SPACE, batch_size=32)
        space = report.space
        values = {t.config_key: (t.value if t.state is TrialState.COMPLETE else None) for t in report.result.trials}
        best = min(v for v in values.values() if v is not None)
        optima = sum(1 for v in values.values() if v == best)
        runs = {}
        for strategy in ("bayes", "random"):
            runs[strategy] = statistics.median(
                evaluations_to_optimum(space, values, SearchSettings(strategy, seed, args.surrogate))
                for seed in range(args.seeds)
            )
        ratio = runs["bayes"] / runs["random"]
        ratios.append(ratio)
        print(f"{kernel.stem:12} {len(values):7d} {optima:6d} {runs['bayes']:6.1f} {runs['random']:6.1f} "
              f"{ratio:6.2f} {time.perf_counter() - start:8.1f}")
    print(f"median ratio bayes/random over kernels: {statistics.median(ratios):.2f} (target <= 0.33)")


if __name__ == "__main__":
    _ = Config  # the replay works on the space's own configs
    main()
