"""Search judged on recorded GPU runtimes, against peers: evaluations and simulated GPU+compile
time each strategy needs to come within 1% and 5% of a brute-forced landscape's optimum, median
over seeds; then the confidence intervals of compileiq's confirmation checked against the truth.

No kernel source and no GPU: the space is the T1 file's parameters (as tuned macros, defaults
first) with its `Conditions` as restrictions (`t1_file` reads it, Kernel Tuner's `Values` forms
included, running nothing); without a T1 file, the cache's own `tune_params`, every combination,
the first value of each the defaults (or the first recorded configuration, when those have no
time). The optimum and its targets are those of the configurations the space allows, not of the
whole cache. A strategy that raises is a row saying so; bad input is one line and exit status 2. A configuration's value is the mean of
its recorded `times` (a cache that kept only `time`: that one value, and its confirmation
intervals are not judged, a replay of one timing having no noise; an error string or Kernel
Tuner's 1e20 is a failure). The same rules for every strategy:

- Everyone starts from the defaults, counted as evaluation 1 (a run that proposes them again
  gets them free). A configuration is charged the first time it is evaluated; a repeat is free.
- A batch strategy is charged whole batches: a target reached inside a batch of 8 costs the batch.
- Simulated time = the sum, over the configurations charged, of their recorded `compile_time +
  benchmark_time` (serial, one GPU, whole batches too), in seconds.
- A run ends when it reaches the 1% target (so also 5%), when it has `--cap` evaluations, or when
  the strategy stops by itself. A target it did not reach is charged the cap + 1,
  every such run alike, whatever it spent: the cap only flatters whoever needs more than it. The table
  says how many runs reached each target.

How each strategy is driven: `landscape_peers.py`. Then compileiq's confirmation is judged
(`landscape_coverage.py`), and each landscape's table rendered (`landscape_table.py`); the
landscape, its space and the charging rules are `landscape_problem.py`'s.

    .venv/bin/python benchmarks/runtime_landscapes.py --landscape CACHE.json[.gz] [--space T1.json]
        [--landscape CACHE2 ...] [--seeds 20] [--cap 512] [--budget 64] [--confirmations 5]
        [--strategies compileiq,random,...] [--batch 8] [--json OUT]
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import BATCH, machine
from landscape_coverage import Interval, confirmed_choice, coverage, summarize_coverage
from landscape_peers import STRATEGIES, strategies
from landscape_problem import charge, landscape_parser, problems, t1_space
from landscape_table import compare, facts, render, versus
from t1_file import InputError

from compileiq.evaluate.replay import LandscapeError

__all__ = [  # what the tests take from the benchmark (each module beside it owns its part)
    "BATCH", "Interval", "charge", "compare", "confirmed_choice", "main", "problems", "render", "strategies",
    "summarize_coverage", "t1_space", "versus"]


def main(argv: Sequence[str] | None = None) -> None:
    global BATCH  # --batch: the run's batch, handed to every search it runs (and kept here after it)
    parser = landscape_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--cap", type=int, default=512, help="evaluations a run may take (a run short of the target counts cap + 1)")
    parser.add_argument("--budget", type=int, default=64, help="compileiq's evaluations after the defaults "
                        "before its confirmation (coverage)")
    parser.add_argument("--confirmations", type=int, default=5, help="confirmations per seed (coverage)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated")
    parser.add_argument("--json", type=Path, help="also write the rows and the coverage as JSON")
    parser.add_argument("--batch", type=int, default=BATCH, help="the batch strategies' batch (compileiq's "
                        "`--batch-size`; random and TPE too), charged whole")
    args = parser.parse_args(argv)
    for option in ("batch", "seeds", "cap", "budget"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1")
    if args.confirmations < 0:
        parser.error("--confirmations must be 0 or more")
    BATCH = args.batch
    names = [n for n in args.strategies.split(",") if n]
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        parser.error(f"unknown strategies {unknown}; choose from {', '.join(STRATEGIES)}")
    logging.getLogger().setLevel(logging.ERROR)
    try:
        found = problems(args.landscape, args.space)
    except (InputError, LandscapeError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"machine: {machine()}; {args.seeds} seeds; batch {BATCH} (Kernel Tuner: 1)")
    report: dict[str, Any] = {"seeds": args.seeds, "cap": args.cap, "rows": [], "coverage": {}, "replay_seconds": {},
                              "landscapes": {}}

    def write() -> None:
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))

    for problem in found:
        name = problem.landscape.name
        report["landscapes"][name] = facts(problem)
        report["replay_seconds"][name] = {}

        def kept(row: dict, seconds: float) -> None:
            report["rows"].append(row)
            report["replay_seconds"][name][row["strategy"]] = seconds  # noqa: B023 - called within this loop
            write()

        rows, _ = compare(problem, names, args.seeds, args.cap, kept, BATCH)
        covered = coverage(problem, args.seeds, args.budget, args.confirmations, BATCH) if args.confirmations else None
        report["coverage"][name] = covered if problem.landscape.repeated else (
            covered and {k: v for k, v in covered.items() if not k.startswith("coverage_")})
        write()
        print("\n".join(render(problem, rows, covered, args.cap)), flush=True)


if __name__ == "__main__":
    main()
