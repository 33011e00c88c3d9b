"""The CI gate's timed A/B statistic judged on GPU runtimes recorded by others: how often does
`compileiq gate --device` cry regression on an unchanged build, and how often does it catch a
build that became s slower?

No kernel source and no GPU: the landscapes and spaces of `runtime_landscapes.py` (Kernel Tuner
cache files, their T1 spaces). Per seed, an ACF is made as `compileiq tune --objective time`
makes one:

- the product's `Searcher` proposes `--budget` configurations after the defaults, in batches of 8
  (told the recorded means, as in `runtime_landscapes.py`);
- each one is screened as the product screens it: the median of 10 samples replayed from its
  steady-state timings (`ReplayMeasurer`), the value a trial records;
- the product's `choose_finalists` and `confirm` (A/A threshold, interleaved rounds) pick the
  winner, or keep the defaults. The ACF records the winner's screening median as
  `objective.best` and its median over all its confirmation samples as
  `objective.confirmed_median`.

The gate is the product's `compare_timing` over `executable_sampler`s of a fresh
`ReplayMeasurer` (`--repeats` per ACF, each with its own draws), as `gate --device` runs it: the
ACF's build against the defaults, then against the recorded time. Three readings of each ACF,
side by side on the same ACFs and draws: the recorded time as `best` (what the gate read before)
or as `confirmed_median` (what it reads now; `best` where the defaults were kept), with the
gate's fixed δ of 2%; and `confirmed_median` with δ = max(2%, the ACF's `confirmation_delta`),
design.md's rule for the statistic (2 × the A/A noise its tune measured), which the gate does not
follow: this benchmark is why. Two situations:

- unchanged: the ACF's build runs as the chosen configuration. A SLOWER verdict (either
  comparison) is a false alarm: a CI run failed for nothing.
- regressed by s (1%, 2%, 3%, 5%, 10%, 20%): the build now runs s slower, as a driver or compiler
  update could make it: its samples are drawn from the chosen configuration's own recorded
  timings, each times (1 + s), so the noise is the recorded one and the slowdown exactly s. Caught
  when the gate's verdict against the recorded median is SLOWER (the gate's exit 1). Below δ
  nothing should be caught. (Another recorded configuration about s slower would carry its own
  noise; on the A4000 many configurations are bimodal, a clock change inside the recording, and
  such a build is about as often faster as slower than the chosen one.)

    .venv/bin/python benchmarks/gate_landscapes.py --landscape CACHE.json[.gz] [--space T1.json]
        [--landscape CACHE2 ...] [--seeds 20] [--budget 64] [--repeats 5] [--json OUT]
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common import BATCH, machine
from landscape_coverage import compileiq_evaluated, confirmed_choice, marker
from landscape_problem import Key, Problem, landscape_parser, problems

from compileiq.evaluate.confirm import executable_sampler
from compileiq.evaluate.replay import QUICK_SAMPLES, Landscape, ReplayMeasurer
from compileiq.evaluate.stats import MIN_DELTA, TimingSamplers, Verdict
from compileiq.gating.timing_rules import compare_timing

SLOWDOWNS = (0.01, 0.02, 0.03, 0.05, 0.10, 0.20)


@dataclass(frozen=True)
class Acf:
    """What one seed's tune wrote: the chosen configuration, its screening median (`best`), its
    median over the confirmation's rounds (`confirmed_median`; None when it kept the defaults)
    and the confirmation's A/A threshold (`confirmation_delta`)."""

    chosen: Key
    best_ms: float
    confirmed_median_ms: float | None
    confirmation_delta: float


@dataclass(frozen=True)
class Reading:
    """How a gate reads an ACF: the recorded time it holds a rebuild to, and its threshold δ."""

    label: str
    recorded: str  # "best" or "confirmed_median" (`best` where there is none)
    acf_delta: bool  # δ = max(2%, the ACF's A/A threshold), else the gate's fixed 2%

    def of(self, acf: Acf) -> tuple[float, float]:
        recorded = acf.best_ms if self.recorded == "best" or acf.confirmed_median_ms is None else acf.confirmed_median_ms
        measured = acf.confirmation_delta if math.isfinite(acf.confirmation_delta) else MIN_DELTA
        return recorded, max(MIN_DELTA, measured) if self.acf_delta else MIN_DELTA


READINGS = (Reading("`best`, δ 2% (before)", "best", False),
            Reading("`confirmed_median`, δ 2% (now)", "confirmed_median", False),
            Reading("`confirmed_median`, δ = max(2%, the ACF's A/A threshold) (design.md's rule, not adopted)",
                    "confirmed_median", True))


def made_acf(problem: Problem, seed: int, budget: int) -> Acf:
    evaluated = compileiq_evaluated(problem, seed, budget)
    screening = ReplayMeasurer(problem.landscape, seed=seed)
    screened = {k: statistics.median(executable_sampler(screening, marker(k))(QUICK_SAMPLES))
                for k in evaluated if problem.landscape.timed(k)}
    choice = confirmed_choice(problem, evaluated, seed, screened)
    return Acf(choice.key, screened[choice.key], choice.confirmed_median, choice.delta)


def slowed(landscape: Landscape, key: Key, slowdown: float) -> tuple[Landscape, Key]:
    """The landscape with one more configuration: `key`'s recorded timings times (1 + slowdown),
    under a key of its own (the defaults' build is left as it was, even when `key` is theirs)."""
    build = (*key, -1)
    times = {**landscape.times, build: tuple(t * (1 + slowdown) for t in landscape.times[key])}
    return replace(landscape, times=times), build


def gate(landscape: Landscape, default: Key, build: Key, recorded_ms: float, delta: float,
         seed: int) -> tuple[Verdict, Verdict]:
    """The gate's two verdicts (against the defaults, against the recorded time) for an ACF
    whose rebuilt program runs as `build`."""
    measurer = ReplayMeasurer(landscape, seed=seed)
    samplers = TimingSamplers(executable_sampler(measurer, marker(build)),
                              executable_sampler(measurer, marker(default)), recorded_ms)
    timing = compare_timing(samplers, delta=delta, seed=seed)
    assert timing.vs_recorded is not None
    return timing.vs_default.verdict, timing.vs_recorded.verdict


def judge(problem: Problem, seeds: int, budget: int, repeats: int) -> dict[str, Any]:
    acfs = [made_acf(problem, seed, budget) for seed in range(seeds)]
    judged: dict[str, Any] = {}
    for reading in READINGS:
        situations: dict[str, dict[str, Any]] = {}
        for name, slowdown in (("unchanged", 0.0), *((f"regressed {s:.0%}", s) for s in SLOWDOWNS)):
            vs_default: Counter[str] = Counter()
            vs_recorded: Counter[str] = Counter()
            for seed, acf in enumerate(acfs):
                landscape, build = slowed(problem.landscape, acf.chosen, slowdown)
                recorded, delta = reading.of(acf)
                for repeat in range(repeats):
                    verdicts = gate(landscape, problem.default, build, recorded, delta, 10_000 + seed * repeats + repeat)
                    vs_default[verdicts[0].value] += 1
                    vs_recorded[verdicts[1].value] += 1
            slower = Verdict.SLOWER.value
            situations[name] = {
                "slowdown": slowdown, "gates": len(acfs) * repeats,
                "caught": vs_recorded[slower] + (vs_default[slower] if slowdown == 0 else 0),
                "vs_recorded": dict(vs_recorded), "vs_default": dict(vs_default),
            }
        bias = [reading.of(acf)[0] / statistics.median(problem.landscape.timed(acf.chosen)) - 1 for acf in acfs]
        deltas = [reading.of(acf)[1] for acf in acfs]
        judged[reading.label] = {"against_steady_median": {"median": statistics.median(bias), "min": min(bias),
                                                           "max": max(bias)},
                                 "delta": {"median": statistics.median(deltas), "max": max(deltas)},
                                 "situations": situations}
    return {"landscape": problem.landscape.name, "seeds": seeds, "budget": budget, "repeats": repeats,
            "kept_defaults": sum(a.confirmed_median_ms is None for a in acfs), "readings": judged}


def render(problem: Problem, judged: dict[str, Any]) -> list[str]:
    lines = [(f"{problem.landscape.name} ({problem.landscape.device}): {judged['seeds']} ACFs "
              f"({judged['kept_defaults']} kept the defaults), {judged['repeats']} gates each")]
    for label, found in judged["readings"].items():
        bias, delta = found["against_steady_median"], found["delta"]
        lines += [(f"held to {label}: the recorded time against the chosen configuration's steady-state median "
                   f"{bias['median']:+.2%} (median), {bias['min']:+.2%} to {bias['max']:+.2%}; δ median "
                   f"{delta['median']:.1%}, at most {delta['max']:.1%}"),
                  (f"  {'situation':16} {'gates':>6} {'SLOWER':>7} {'share':>6}   "
                   f"{'vs recorded (verdicts)':44} vs defaults (verdicts)")]
        for name, row in found["situations"].items():
            counts = [" ".join(f"{v} {row[side].get(v, 0)}" for v in (x.value for x in Verdict))
                      for side in ("vs_recorded", "vs_default")]
            lines.append(f"  {name:16} {row['gates']:>6} {row['caught']:>7} {row['caught'] / row['gates']:>6.0%}   "
                         f"{counts[0]:44} {counts[1]}")
    lines.append("SLOWER: gates that exit 1 (unchanged: either comparison, a false alarm; regressed: the comparison "
                 "with the recorded time, a catch)")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = landscape_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=20, help="ACFs per landscape (one tune each)")
    parser.add_argument("--budget", type=int, default=64, help="evaluations after the defaults per tune")
    parser.add_argument("--repeats", type=int, default=5, help="gate runs per ACF and situation")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    args = parser.parse_args(argv)
    if min(args.seeds, args.budget, args.repeats) < 1:
        parser.error("--seeds, --budget and --repeats must be at least 1")
    print(f"machine: {machine()}; batch {BATCH}; {args.seeds} seeds, budget {args.budget}, {args.repeats} gates "
          "per ACF and situation")
    report: dict[str, Any] = {"landscapes": []}
    for problem in problems(args.landscape, args.space):
        if not problem.landscape.repeated:
            print(f"{problem.landscape.name}: one timing per configuration, no noise to judge a gate on: skipped")
            continue
        judged = judge(problem, args.seeds, args.budget, args.repeats)
        print("\n".join(render(problem, judged)), flush=True)
        report["landscapes"].append(judged)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
