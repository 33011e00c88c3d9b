"""How much of a `--objective time` budget reaches the GPU: screening as it was before the second
H200 lease against screening now, side by side on the same kernels and seeds.

    python benchmarks/screening_use.py [KERNEL.cu ...] [--budget 8] [--seeds 3]

On the H200, sgemm's run stopped at screening's bound ("screened 3x the budget") with 3 of its 16
trials measured, two of them the defaults' machine code: 42 of its candidates were other tile sizes
refused for less occupancy than the defaults' tile, and reduction's random start lowered ptxas's
optimisation level in 36 of 43 candidates. This replays that part of the run without a GPU: real
nvcc/ptxas compile and screen every candidate, the real tuner, searcher and SQLite store run, and
only the measurement is a stand-in that returns the build's static score (so the counts are real
and no runtime is claimed). It prints, per policy, the trials measured (of the budget), the
distinct machine codes among them and the candidates screened out.

Policies: `before` (every candidate judged against the baseline's build; no repair), `now` (a
candidate of other macro values judged against its own tiling's build at the baseline's settings,
and one refused for a lower level alone proposed again at the default level).
Without kernels: the bundled kernels and tests/corpus_harm.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import KERNELS, machine, scratch
from compileiq.app import SharedWorkers, TuneOptions, tuning_space
from compileiq.build.compile import Build
from compileiq.build.workers import LocalWorkers
from compileiq.core.space import Config
from compileiq.core.toolchain import find_toolchain
from compileiq.evaluate import screening
from compileiq.evaluate.metrics import Evaluation, StaticEvaluator
from compileiq.search.searcher import SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.store import Store
from compileiq.tuning.progress import SilentProgress
from compileiq.tuning.request import TuneRequest
from compileiq.tuning.tuner import Tuner

POLICIES = {"before": screening.ScreeningPolicy(tilings=False, repair=False), "now": screening.ScreeningPolicy()}


class StaticStandIn:
    """The measurement's stand-in: the build's static score, labelled as what it is."""

    kind = "stand-in (static score, not a runtime)"

    def __init__(self, spec: object) -> None:
        self._static = StaticEvaluator("static", spec)

    def evaluate(self, build: Build, config: Config) -> Evaluation:
        return self._static.evaluate(build, config)


def run(kernel: Path, policy: screening.ScreeningPolicy, budget: int, seed: int) -> tuple[int, int, int]:
    """(trials measured, distinct machine codes measured, candidates screened out)."""
    spec, tools = load_spec(kernel), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=kernel))
    request = TuneRequest(spec, space, "time", budget=budget, search=SearchSettings("bayes", seed),
                          simplify=False, ablate=False, screening=policy)
    store = Store.open(f"sqlite:///{scratch('compileiq-screen-')}/bench.db")
    try:
        result = Tuner(request, store, tools, SharedWorkers(LocalWorkers), SilentProgress(), StaticStandIn(spec),
                       bundle_sources(spec, tools.nvcc)).run()
    finally:
        store.close()
    measured = [t for t in result.trials if not screening.is_screened(t)]
    codes = {t.code_hash for t in measured if t.code_hash}
    return len(measured), len(codes), len(result.trials) - len(measured)


def _column(rows: list[tuple[int, int, int]], index: int) -> str:
    return "/".join(str(row[index]) for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", type=Path)
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    kernels = args.kernels or [*KERNELS, *sorted((REPO / "tests" / "corpus_harm").glob("*.cu"))]
    print(f"# screening's use of a --objective time budget of {args.budget}, seeds 0-{args.seeds - 1}; {machine()}")
    print("| kernel | measured before | measured now | distinct codes before | distinct codes now "
          "| screened before | screened now |")
    print("|---|---|---|---|---|---|---|")
    totals: dict[str, list[tuple[int, int, int]]] = {name: [] for name in POLICIES}
    for kernel in kernels:
        cells: dict[str, list[tuple[int, int, int]]] = {name: [] for name in POLICIES}
        for seed in range(args.seeds):
            for name, policy in POLICIES.items():
                cells[name].append(run(kernel, policy, args.budget, seed))
        for name in POLICIES:
            totals[name] += cells[name]
        columns = [_column(cells[name], index) for index in range(3) for name in POLICIES]
        print(f"| {kernel.stem} | {' | '.join(columns)} |", flush=True)
    for index, what in enumerate(("trials measured", "distinct machine codes measured", "candidates screened out")):
        before = statistics.mean(row[index] for row in totals["before"])
        now = statistics.mean(row[index] for row in totals["now"])
        print(f"mean {what} per run: before {before:.2f}, now {now:.2f} (ratio {now / before:.2f})")
    full = [sum(1 for row in totals[name] if row[0] == args.budget) for name in POLICIES]
    print(f"runs that measured their whole budget: before {full[0]}/{len(totals['before'])}, "
          f"now {full[1]}/{len(totals['now'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
