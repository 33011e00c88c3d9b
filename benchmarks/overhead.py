"""Benchmark (c): the tool's own time per trial (everything but waiting for the compiler) at 50
and 200 trials, and its share of the run's wall time, for each skopt surrogate.

Overhead = wall time - time spent waiting for compile results - worker start-up (reported
apart: Ray's start is a fixed cost, not a per-trial one). Simplification is off so the trial
count is exact.

    .venv/bin/python benchmarks/overhead.py [--kernel kernels/reduction/reduction.cu]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from common import ROOT, fresh_db, machine, tune

RUNS = (("ET", 50), ("ET", 200), ("RF", 50), ("RF", 200), ("GP", 50))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", type=Path, default=ROOT / "kernels/spill_heavy/spill_heavy.cu")
    parser.add_argument("--workers", default="local")
    args = parser.parse_args()
    print(
        f"machine: {machine()}; kernel {args.kernel.name}; workers {args.workers}; objective static"
    )
    print(
        f"{'surrogate':9} {'trials':>6} {'wall s':>7} {'compile wait s':>14} {'overhead s':>10} "
        f"{'per trial ms':>12} {'share':>6} {'best':>10}"
    )
    for surrogate, budget in RUNS:
        report = tune(
            args.kernel,
            fresh_db(),
            objective="static",
            budget=budget,
            workers=args.workers,
            surrogate=surrogate,
            simplify=False,
        )
        result, counters = report.result, report.result.counters
        wall = result.wall_seconds - counters.worker_start_seconds
        overhead = wall - counters.compile_wait_seconds
        trials = counters.new_trials
        print(
            f"{surrogate:9} {trials:6d} {wall:7.1f} {counters.compile_wait_seconds:14.1f} {overhead:10.1f} "
            f"{overhead / trials * 1000:12.0f} {overhead / wall:6.1%} {result.winner.value:10g}"
        )


if __name__ == "__main__":
    main()
