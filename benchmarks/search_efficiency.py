"""Benchmark (b): evaluations that Bayesian search needs to reach the exhaustive optimum of a
static objective, median over seeds, against random search, on each bundled kernel.

Every configuration of a small space is compiled once (an exhaustive `tune`, recorded in the
database); each strategy then replays the search with the tuner's own batch size against the
recorded metrics, counting evaluations (the baseline first, as `compileiq tune` does) until it
reaches the optimum. Cases where the baseline itself is optimal are trivial (1 evaluation for
every strategy) and are listed but left out of the summary ratio. Cases where at least one
configuration in eight is optimal are dense: random search finds the optimum within its first
batch or two, before any model could act, so they are summarised apart as well as with the rest.

    .venv/bin/python benchmarks/search_efficiency.py [--seeds 10] [--objectives static,spills,registers]
        [--tables store/search-tables.json]   # keep the exhaustive tables: a rerun replays without compiling
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common import KERNELS, fresh_db, machine, tune

from compileiq import app
from compileiq.kernel import bundle_sources, load_spec
from compileiq.metrics import StaticMetrics, objective_value
from compileiq.search import Observation, Searcher, SearchSettings
from compileiq.space import SearchSpace
from compileiq.store import TrialState
from compileiq.toolchain import find_toolchain

SPACE = (
    "ptxas.opt_level",
    "ptxas.maxrregcount",
    "ptxas.override_directive_values",
    "ptxas.allow_expensive_optimizations",
)
BATCH = 8


def evaluations_to_optimum(
    space: SearchSpace, values: dict[str, float | None], settings: SearchSettings
) -> int:
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


def value(metrics: dict | None, objective: str) -> float | None:
    if metrics is None:
        return None
    m = metrics
    static = StaticMetrics(
        m["spill_bytes"], m["registers"], m["occupancy"], m["instructions"], m["stack_bytes"]
    )
    return objective_value(objective, static)


def exhaustive_table(
    kernel: Path, cache: dict, only: tuple[str, ...] = SPACE
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
            budget=10**6,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--objectives", default="static,spills,registers")
    parser.add_argument("--surrogate", default="ET")
    parser.add_argument(
        "--tables", type=Path, help="JSON cache of the exhaustive tables (read and written)"
    )
    args = parser.parse_args()
    cache = json.loads(args.tables.read_text()) if args.tables and args.tables.exists() else {}
    print(f"machine: {machine()}; {args.seeds} seeds; batch {BATCH}; surrogate {args.surrogate}")
    print(f"space: {', '.join(SPACE)} (+ each kernel's tuned macros)")
    print(
        f"{'kernel':12} {'objective':10} {'configs':>7} {'optima':>6} {'bayes':>7} {'random':>7} {'ratio':>6}  note"
    )
    ratios = []
    for kernel in KERNELS:
        start = time.perf_counter()
        cached = len(cache)
        space, table = exhaustive_table(kernel, cache)
        if args.tables and len(cache) > cached:
            args.tables.write_text(json.dumps(cache))
        for objective in args.objectives.split(","):
            values = {key: value(metrics, objective) for key, metrics in table.items()}
            best = min(v for v in values.values() if v is not None)
            optima = sum(1 for v in values.values() if v == best)
            medians = {
                strategy: statistics.median(
                    evaluations_to_optimum(
                        space, values, SearchSettings(strategy, seed, args.surrogate)
                    )
                    for seed in range(args.seeds)
                )
                for strategy in ("bayes", "random")
            }
            ratio = medians["bayes"] / medians["random"]
            trivial = values[space.default_config().key] == best
            dense = optima * BATCH >= len(values)
            if not trivial:
                ratios.append((ratio, dense))
            note = "trivial: the baseline is optimal" if trivial else ""
            note = note or ("dense: >= 1 in 8 configs is optimal" if dense else "")
            print(
                f"{kernel.stem:12} {objective:10} {len(values):7d} {optima:6d} {medians['bayes']:7.1f} "
                f"{medians['random']:7.1f} {ratio:6.2f}  {note}",
                flush=True,
            )
        print(
            f"{'':12} (exhaustive compile + replays: {time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    summarise("non-trivial cases", [ratio for ratio, _ in ratios])
    summarise("of which not dense", [ratio for ratio, dense in ratios if not dense])


def summarise(label: str, ratios: list[float]) -> None:
    if ratios:
        print(
            f"{label}: {len(ratios)}; median ratio bayes/random {statistics.median(ratios):.2f}; "
            f"geometric mean {statistics.geometric_mean(ratios):.2f}; worst {max(ratios):.2f} (target <= 0.33)"
        )


if __name__ == "__main__":
    main()
