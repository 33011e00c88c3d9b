"""The comparison of strategies on one landscape and its table: one row per strategy (evaluations
and simulated seconds to each target, median over seeds, each peer's Mann-Whitney U test against
compileiq's per-seed counts), the header's facts of the space, and the coverage line; `--json`
records the same rows and facts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from common import BATCH
from landscape_coverage import quartiles
from landscape_peers import Run, strategies
from landscape_problem import TARGETS, Problem, charge


def compare(problem: Problem, names: Sequence[str], seeds: int, cap: int,
            on_row: Callable[[dict, float], None] = lambda row, seconds: None,
            batch: int = BATCH) -> tuple[list[dict], dict]:
    """One row per strategy (`on_row` told each as it is made), the batch strategies in batches of
    `batch`. A strategy that raises (Kernel Tuner's on a space too small for it, say) is a row
    that says so; the others still run."""
    known = strategies(batch)
    rows, spent = [], {}
    for name in names:
        start = time.perf_counter()
        row: dict[str, Any] = {"landscape": problem.landscape.name, "strategy": name,
                               "batch": batch if not name.startswith("kt-") else 1, "seeds": seeds}
        try:
            row.update(_row(problem, known[name], seeds, cap, name.startswith("kt-")))
        except Exception as error:  # noqa: BLE001 - a peer's own failure is its row, not the run's end
            row["crashed"] = f"{type(error).__name__}: {' '.join(str(error).split())}"[:200]
        rows.append(row)
        spent[name] = time.perf_counter() - start
        on_row(row, spent[name])
    return rows, spent


def _row(problem: Problem, run: Run, seeds: int, cap: int,
         checked: bool) -> dict[str, Any]:
    runs = [charge(problem, run(problem, seed, cap), cap) for seed in range(seeds)]
    row: dict[str, Any] = {}
    for target in TARGETS:
        label = f"{round(target * 100)}pct"
        counts = [r[target].evaluations for r in runs]
        seconds = [r[target].seconds for r in runs]
        row[f"median_evaluations_to_{label}"] = statistics.median(counts)
        row[f"quartiles_evaluations_to_{label}"] = quartiles(counts)
        row[f"median_seconds_to_{label}"] = statistics.median(seconds)
        row[f"reached_{label}"] = sum(r[target].reached for r in runs)
        row[f"evaluations_to_{label}"] = counts  # per seed; cap + 1 where a run fell short
    if checked:  # Kernel Tuner seeds through the global generators: checked (the others take the seed)
        row["deterministic_by_seed"] = run(problem, 0, cap) == run(problem, 0, cap)
    return row


def versus(ours: dict | None, row: dict, label: str) -> str:
    """The p-value of a two-sided Mann-Whitney U test of `row`'s per-seed evaluations to the
    target against compileiq's ("-" for compileiq itself, or without per-seed counts)."""
    key = f"evaluations_to_{label}"
    if ours is None or row is ours or key not in row or key not in ours:
        return "-"
    if set(row[key]) == set(ours[key]) and len(set(ours[key])) == 1:
        return "1"  # the same constant on both sides (both at the cap, say)
    from scipy.stats import mannwhitneyu

    return f"{mannwhitneyu(ours[key], row[key], alternative='two-sided').pvalue:.2g}"


def facts(problem: Problem) -> dict[str, Any]:
    """What the table's header states (and --json records): the space, the optimum within it and
    its targets, the defaults, and whether the optimum by mean is the steady-state best."""
    allowed, total = problem.space.macro_combinations()
    means = [problem.value(k) for k in problem.allowed]
    shown = ",".join(map(str, problem.optimum))
    steady = problem.steady_best if problem.landscape.repeated else problem.optimum
    return {"landscape": problem.landscape.name, "device": problem.landscape.device,
            "space": str(problem.t1_path) if problem.t1_path else "the cache's tune_params",
            "allowed": allowed, "combinations": total, "allowed_with_times": len(problem.allowed),
            "recorded_with_times": sum(1 for t in problem.landscape.times.values() if t),
            "optimum_ms": problem.best, "optimum": shown,
            **{f"within_{round(t * 100)}pct": sum(1 for v in means if v is not None and v <= problem.target(t))
               for t in TARGETS},
            "defaults": ",".join(map(str, problem.default)), "defaults_ms": problem.value(problem.default),
            "steady_state_best": ",".join(map(str, steady)),
            "optimum_is_steady_state_best": steady == problem.optimum}


def render(problem: Problem, rows: Sequence[dict], covered: dict | None, cap: int) -> list[str]:
    told = facts(problem)
    allowed = "?" if told["allowed"] is None else f"{told['allowed']:,}"
    head = (f"{told['landscape']} ({told['device']}): {allowed} of {told['combinations']:,} configurations "
            f"allowed, {told['allowed_with_times']:,} of them with times; optimum {told['optimum_ms']:.4f} ms "
            f"({told['within_1pct']} within 1%, {told['within_5pct']} within 5%); defaults "
            f"{told['defaults_ms']:.4f} ms; cap {cap}")
    lines = [head]
    if not told["optimum_is_steady_state_best"]:
        steady = problem.steady_best
        lines.append(f"warning: the optimum by mean ({told['optimum']}) is not the fastest once warm "
                     f"({told['steady_state_best']}: {problem.landscape.steady_mean(steady):.4f} ms against "
                     f"{problem.landscape.steady_mean(problem.optimum):.4f} ms without the first, cold launch): "
                     "with so few timings the targets may rest on a cold-launch artefact")
    lines.append(f"{'strategy':24} {'batch':>5} {'evals 1%':>9} {'reached':>7} {'s 1%':>8} {'p 1%':>6} {'evals 5%':>9} "
                 f"{'reached':>7} {'s 5%':>8} {'p 5%':>6}  deterministic")
    ours = next((row for row in rows if row["strategy"] == "compileiq" and "crashed" not in row), None)
    for row in rows:
        if "crashed" in row:
            lines.append(f"{row['strategy']:24} {row['batch']:>5} crashed: {row['crashed']}")
            continue
        p1, p5 = (versus(ours, row, label) for label in ("1pct", "5pct"))
        lines.append(
            f"{row['strategy']:24} {row['batch']:>5} {_shown(row['median_evaluations_to_1pct'], cap):>9} "
            f"{row['reached_1pct']:>4}/{row['seeds']:<2} {row['median_seconds_to_1pct']:>8.0f} {p1:>6} "
            f"{_shown(row['median_evaluations_to_5pct'], cap):>9} {row['reached_5pct']:>4}/{row['seeds']:<2} "
            f"{row['median_seconds_to_5pct']:>8.0f} {p5:>6}  {row.get('deterministic_by_seed', '-')}")
    if ours is not None and len(rows) > 1:
        lines.append("p: two-sided Mann-Whitney U test of this strategy's per-seed evaluations against compileiq's "
                     "(every run short of the target counted alike, cap + 1); under 0.05: a difference the seeds support")
    if covered:
        lines.append(_coverage_line(problem, covered))
    return lines


def _coverage_line(problem: Problem, covered: dict) -> str:
    if not problem.landscape.repeated:
        intervals = "intervals not judged (one timing per configuration: its replay has no noise)"
    elif not covered["intervals"]:
        intervals = "no interval to judge (no finalist was confirmed against the defaults)"
    else:
        intervals = (f"{covered['intervals']} intervals cover the steady-state medians' ratio "
                     f"{covered['coverage_of_medians_ratio']:.1%}, the steady-state means' ratio "
                     f"{covered['coverage_of_steady_ratio']:.1%}, the means' ratio of all recorded times "
                     f"{covered['coverage_of_means_ratio']:.1%}, the statistic's estimand "
                     f"{covered['coverage_of_estimand']:.1%}")
    quartiles = covered["quartiles_true_speedup_of_choice"]
    spread = f" (quartiles {quartiles[0]:.3f}, {quartiles[1]:.3f})" if quartiles else ""
    return (f"confirmation after {covered['budget']} evaluations: {intervals}; "
            f"true speedup of the final choice: median {covered['median_true_speedup_of_choice']:.3f}{spread}, "
            f"{covered['choices_slower_than_defaults']} of {covered['choices']} slower than the defaults, "
            f"{covered['choices_keeping_defaults']} kept them; best possible {covered['best_possible_speedup']:.3f}")


def _shown(evaluations: float, cap: int) -> str:
    """A median as the table shows it: `>cap` where half the runs or more fell short."""
    return f">{cap}" if evaluations > cap else f"{evaluations:g}"
