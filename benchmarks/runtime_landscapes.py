"""Search judged on recorded GPU runtimes: evaluations compileiq's search needs to come within
1% and 5% of a brute-forced landscape's optimum, median over seeds, against random search.

No kernel source and no GPU: the space is the T1 file's parameters (as tuned macros, defaults
first) with its `Conditions` as tune.toml restrictions; a configuration's value is its recorded
mean time (a failed one is a failure). Each strategy runs as `compileiq tune` does, the defaults
first, then batches of BATCH; evaluations are counted in whole batches (a target reached inside a
batch is charged the batch); a run stopped by --cap before a target is charged the cap. (Peers such as Kernel Tuner or Optuna can be added as strategies later.)

    .venv/bin/python benchmarks/runtime_landscapes.py --landscape CACHE.json[.gz] --space T1.json
        [--seeds 5] [--cap N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from common import BATCH, machine

from compileiq.core.space import Config, SearchSpace
from compileiq.evaluate.replay import Landscape, load_landscape
from compileiq.search.searcher import Observation, Searcher, SearchSettings
from compileiq.source import restrictions

TARGETS = (0.01, 0.05)
STRATEGIES = ("bayes", "random")


def t1_space(t1: dict) -> SearchSpace:
    """The T1 tuning space as compileiq's: tuned macros (default first) under its Conditions."""
    space = t1["ConfigurationSpace"]
    tuned: dict[str, tuple[int | str, ...]] = {}
    for parameter in space["TuningParameters"]:
        values = parameter["Values"]
        values = json.loads(values) if isinstance(values, str) else list(values)
        default = parameter.get("Default", values[0])
        tuned[parameter["Name"]] = (default, *[v for v in values if v != default])
    texts = restrictions.parse([c["Expression"] for c in space.get("Conditions", [])], {}, tuned)
    base = SearchSpace(f"t1:{t1['General']['BenchmarkName']}", "", ()).with_defines(tuned)
    return base.restricted(restrictions.restrictions_of(texts, {}, tuned))


def value_of(landscape: Landscape, config: Config) -> float | None:
    return landscape.mean([config[f"define.{p}"] for p in landscape.parameters])


def evaluations(space: SearchSpace, landscape: Landscape, strategy: str, seed: int, cap: int) -> dict[float, int]:
    """Per target (a fraction above the optimum): evaluations, whole batches, until one is reached."""
    searcher = Searcher(space, SearchSettings(strategy, seed=seed))
    best, count, reached = landscape.best, 0, {}
    batch = [space.default_config()]
    while batch and len(reached) < len(TARGETS) and count < cap:
        observations = [Observation(c, value_of(landscape, c)) for c in batch]
        count += len(batch)
        for target in TARGETS:
            if target not in reached and any(o.value is not None and o.value <= best * (1 + target)
                                             for o in observations):
                reached[target] = count
        searcher.tell(observations)
        batch = searcher.ask(BATCH)
    return {target: reached.get(target, cap) for target in TARGETS}


def compare(landscape: Landscape, space: SearchSpace, seeds: int, cap: int) -> dict:
    runs = {s: [evaluations(space, landscape, s, seed, cap) for seed in range(seeds)] for s in STRATEGIES}
    medians = {s: {t: statistics.median(r[t] for r in runs[s]) for t in TARGETS} for s in STRATEGIES}
    allowed, total = space.macro_combinations()
    return {"landscape": landscape.name, "device": landscape.device, "allowed": allowed, "combinations": total,
            "recorded": sum(1 for t in landscape.times.values() if t), "optimum_ms": landscape.best,
            "seeds": seeds, "batch": BATCH, "cap": cap,
            "runs": {s: [{str(t): r[t] for t in TARGETS} for r in runs[s]] for s in STRATEGIES},
            "medians": {s: {str(t): m for t, m in medians[s].items()} for s in STRATEGIES}}


def render(found: dict) -> list[str]:
    head = (f"{found['landscape']} ({found['device']}): {found['allowed']:,} of {found['combinations']:,} "
            f"configurations allowed, {found['recorded']:,} with times; optimum {found['optimum_ms']:.4f} ms; "
            f"{found['seeds']} seeds, batch {found['batch']}, cap {found['cap']}")
    lines = [head]
    lines.append(f"{'target':>8} {'bayes':>8} {'random':>8} {'ratio':>6}")
    for target in TARGETS:
        bayes, random = found["medians"]["bayes"][str(target)], found["medians"]["random"][str(target)]
        lines.append(f"{f'{target:.0%}':>8} {bayes:>8g} {random:>8g} {bayes / random:>6.2f}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", type=Path, required=True, help="Kernel Tuner cache file (.json or .json.gz)")
    parser.add_argument("--space", type=Path, required=True, help="the tuning space in the T1 format (JSON)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cap", type=int, help="evaluations a run may take (default: every allowed configuration)")
    parser.add_argument("--json", type=Path, help="also write the runs and medians as JSON")
    args = parser.parse_args(argv)
    landscape = load_landscape(args.landscape)
    space = t1_space(json.loads(args.space.read_text()))
    names = [p.removeprefix("define.") for p in (q.name for q in space.parameters)]
    if sorted(names) != sorted(landscape.parameters):
        raise SystemExit(f"{args.space} and {args.landscape} name different parameters")
    print(f"machine: {machine()}")
    found = compare(landscape, space, args.seeds, args.cap or space.macro_combinations()[0] or 10**6)
    print("\n".join(render(found)))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
