"""Evaluations until the whole Pareto front is found: the front search (bayes) against random search.

A small space is tuned exhaustively first (its true front, under the no-harm rules); then each
strategy runs with a budget of the whole space for a few seeds, every build a cache hit of the
exhaustive run (same database; the Bayesian search's warm start from earlier studies of the kernel
is switched off here (warm_start=False), so that each run starts cold as on a new kernel), and the number of trials until every point of the true front
was evaluated is printed. Real nvcc/ptxas; no GPU.

    PYTHONPATH=$PWD python scripts/front_benchmark.py kernels/spill_heavy/spill_heavy.cu \
        --objective registers,instructions --only ptxas.maxrregcount,ptxas.opt_level,ptxas.override_directive_values
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from compileiq import app
from compileiq.core.records import Trial
from compileiq.results import multi_objective
from compileiq.results.pareto import values_of
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress


def true_front(trials: list[Trial], objective: str) -> set[tuple[float, ...]]:
    baseline = trials[0]
    refuse = multi_objective.study_refusal(baseline, True)
    choice = multi_objective.choose(trials, baseline, multi_objective.objectives_of(objective), "knee", refuse, False)
    return {p.values for p in choice.front.points}


def first_found(trials: list[Trial], front: set[tuple[float, ...]], objective: str) -> dict[tuple[float, ...], int]:
    """Each front point's first evaluation (1-based) in the run's trial order."""
    baseline = trials[0]
    refuse = multi_objective.study_refusal(baseline, True)
    objectives = multi_objective.objectives_of(objective)
    found: dict[tuple[float, ...], int] = {}
    for count, trial in enumerate(sorted(trials, key=lambda t: t.number), 1):
        values = values_of(trial, objectives)
        if values in front and refuse(trial) is None:
            found.setdefault(values, count)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kernel", type=Path)
    parser.add_argument("--objective", default="registers,instructions")
    parser.add_argument("--only", default="ptxas.maxrregcount,ptxas.opt_level,ptxas.override_directive_values")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="front-bench-"))
    db = f"sqlite:///{folder}/bench.db"
    base = app.TuneOptions(kernel=args.kernel, objective=args.objective, workers="local", db=db,
                           only=tuple(args.only.split(",")), simplify=False, batch_size=args.batch_size,
                           budget=app.MAX_BUDGET, out=folder / "x.acf.toml", warm_start=False)  # each run cold
    report = app.tune(app.TuneOptions(**{**base.__dict__, "strategy": "exhaustive", "study": "exhaustive"}),
                      SilentProgress())
    size = report.space.size()
    store = Store.open(db)
    front = true_front(store.trials(report.result.study.id), args.objective)
    print(f"{args.kernel.name}, {args.objective}, space of {size} configurations; true front: {len(front)} points "
          f"{sorted(front)}")
    results: dict[str, list[int | None]] = {}
    per_point: dict[str, dict[tuple[float, ...], list[int | None]]] = {}
    for strategy in ("bayes", "random"):
        for seed in range(args.seeds):
            options = {**base.__dict__, "strategy": strategy, "seed": seed, "budget": size,
                       "study": f"{strategy}-{seed}"}
            run = app.tune(app.TuneOptions(**options), SilentProgress())
            trials = store.trials(run.result.study.id)
            found = first_found(trials, front, args.objective)
            results.setdefault(strategy, []).append(max(found.values()) if len(found) == len(front) else None)
            for point in front:
                per_point.setdefault(strategy, {}).setdefault(point, []).append(found.get(point))
    for strategy, counts in results.items():
        shown = ", ".join(str(c) if c is not None else f">{size}" for c in counts)
        done = [c for c in counts if c is not None]
        median = statistics.median(done) if len(done) == len(counts) else None
        print(f"{strategy:>6}: evaluations to find the whole front per seed: {shown}; median {median}")
        for point, counts_of_point in sorted(per_point[strategy].items()):
            print(f"        point {point}: first found at {counts_of_point}")
    store.close()


if __name__ == "__main__":
    main()
