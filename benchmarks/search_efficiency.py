"""Benchmark (b): evaluations that Bayesian search needs to reach the exhaustive optimum of a
static objective, median over seeds, against random search, on each bundled kernel.

Every configuration of a small space is compiled once (an exhaustive `tune`, recorded in the
database); each strategy then replays the search with the tuner's own batch size against the
recorded metrics, counting evaluations (the baseline first, alone, as `compileiq tune` does)
until it reaches the optimum, in whole batches: the batch of 8 in which a strategy reaches the
optimum is charged in full, since its 8 configurations are compiled side by side (so counts are
1, 9, 17, ...; a median of two seeds may fall between). Cases where the baseline itself is optimal are trivial (1 evaluation for
every strategy) and are listed but left out of the summary ratio. Cases where at least one
configuration in eight is optimal are dense: random search finds the optimum within its first
batch or two, before any model could act, so they are summarised apart as well as with the rest.
benchmarks/peers.py replays other tuners on the same tables.

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 10] [--objectives static,spills,registers]
        [--tables store/search-tables.json]   # keep the exhaustive tables: a rerun replays without compiling
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from common import (
    BATCH,
    TABLE_SPACE,
    compileiq_strategy,
    evaluations_to_optimum,
    load_cases,
    machine,
)

from compileiq.search.searcher import SearchSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--objectives", default="static,spills,registers")
    parser.add_argument("--surrogate", default="ET")
    parser.add_argument(
        "--tables", type=Path, help="JSON cache of the exhaustive tables (read and written)"
    )
    args = parser.parse_args()
    print(
        f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}; {args.seeds} seeds; "
        f"batch {BATCH}, whole batches counted; surrogate {args.surrogate}"
    )
    print(f"command: {' '.join(sys.argv)}")
    print(f"space: {', '.join(TABLE_SPACE)} (+ each kernel's tuned macros)")
    print(
        f"{'kernel':12} {'objective':10} {'configs':>7} {'optima':>6} {'bayes':>7} {'random':>7} {'ratio':>6}  kind"
    )
    ratios = []
    for case in load_cases(args.tables, args.objectives.split(",")):
        medians = {
            strategy: statistics.median(
                evaluations_to_optimum(
                    case,
                    compileiq_strategy(SearchSettings(strategy, surrogate=args.surrogate)),
                    seed,
                )
                for seed in range(args.seeds)
            )
            for strategy in ("bayes", "random")
        }
        ratio = medians["bayes"] / medians["random"]
        if case.kind != "trivial":
            ratios.append((ratio, case.kind))
        print(
            f"{case.kernel:12} {case.objective:10} {len(case.values):7d} {case.optima:6d} "
            f"{medians['bayes']:7.1f} {medians['random']:7.1f} {ratio:6.2f}  {case.kind}",
            flush=True,
        )
    summarise("non-trivial cases", [ratio for ratio, _ in ratios])
    summarise("of which not dense", [ratio for ratio, kind in ratios if kind != "dense"])


def summarise(label: str, ratios: list[float]) -> None:
    if ratios:
        print(
            f"{label}: {len(ratios)}; median ratio bayes/random {statistics.median(ratios):.2f}; "
            f"geometric mean {statistics.geometric_mean(ratios):.2f}; worst {max(ratios):.2f} (target <= 0.33)"
        )


if __name__ == "__main__":
    main()
