"""Benchmark (issue 26, item 5): a study warm-started from other kernels' studies against a cold
start, on the DEFAULT search space, judged on kernels the search design was NOT tuned on.

A team database is filled with studies of the bundled kernels (kernels/*/*.cu: the kernels the
design was tuned on; objective static, a modest budget, as `compileiq tune` records them). Then
each judged kernel (third-party kernels of the tests) is searched twice per seed and objective:
cold (the searcher alone, as benchmarks/full_space.py replays it) and warm (the prior the tuner
computes from that database, `compileiq.tuning.cross_kernel.other_kernels_prior`: its proposals
first in the batch after the baseline, the settings the others refused proposed later), as
`Tuner._candidates` orders them. Every configuration either run compiled is pooled in one table per
kernel (full_space's tables: a repeat compiles once); the reference is the pooled best, and each run
is charged the evaluations to reach it in WHOLE BATCHES (the baseline alone, then batches of 8: a
target reached inside a batch costs the whole batch). A run that never reaches it is censored.

    nice -n 10 .venv/bin/python benchmarks/warm_start.py --tables store/warm-start/tables.json
        [--kernels chemistry,noinline_callee,tile_gemm,blur] [--objectives static,registers]
        [--seeds 5] [--budget 65] [--fill-budget 32] [--fill-objectives static,registers] [--db URL]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import KERNELS as TUNED_ON
from common import ROOT, machine, tune
from full_space import (
    BATCH,
    Run,
    Table,
    default_space,
    observation,
    reference_value,
    replay,
    save,
    table_key,
    tuner_compiler,
    value,
)

from compileiq.core.space import Config, SearchSpace
from compileiq.core.toolchain import find_toolchain
from compileiq.search import transfer
from compileiq.search.searcher import Searcher, SearchSettings
from compileiq.source.kernel import bundle_sources, load_spec
from compileiq.store import Store
from compileiq.tuning.cross_kernel import other_kernels_prior
from compileiq.tuning.request import TuneRequest, study_key

JUDGED = {  # third-party kernels of the tests: never used to tune the search design
    "chemistry": ROOT / "tests/corpus_harm/chemistry.cu",
    "noinline_callee": ROOT / "tests/corpus_harm/noinline_callee.cu",
    "tile_gemm": ROOT / "tests/corpus_harm/tile_gemm.cu",
    "blur": ROOT / "tests/corpus/include_dirs/blur.cu",
    "fir": ROOT / "store/warm-start/judged/fir/fir.cu",  # tests/helpers.py's SPILLING_KERNEL
    "sgemm_template": ROOT / "store/warm-start/judged/sgemm_template/inst.cu",  # tests/corpus/kernel_template
    # public third-party kernels with register pressure (tests/corpus_warm/README.md)
    "cfd_euler3d": ROOT / "tests/corpus_warm/cfd_euler3d/cfd_euler3d.cu",  # Rodinia
    "cfd_euler3d_double": ROOT / "tests/corpus_warm/cfd_euler3d_double/cfd_euler3d_double.cu",  # Rodinia
    "llmc_matmul_forward": ROOT / "tests/corpus_warm/llmc_matmul_forward/llmc_matmul_forward.cu",  # llm.c
    "bf16_tc_gemm": ROOT / "tests/corpus_warm/bf16_tc_gemm/bf16_tc_gemm.cu",  # cuda-samples
}


def judged_kernel(name: str) -> Path:
    """A judged kernel's file; the two that the tests write from their own text are written here."""
    path = JUDGED.get(name) or Path(name)
    if name == "fir" and not path.exists():
        sys.path.insert(0, str(ROOT / "tests"))
        from helpers import SPILLING_KERNEL

        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SPILLING_KERNEL)
    if name == "sgemm_template" and not path.exists():  # as tests/test_real_code.py instantiates it
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "sgemm.cuh").write_text((ROOT / "tests/corpus/kernel_template/sgemm.cuh").read_text())
        path.write_text('#include "sgemm.cuh"\ntemplate __global__ void sgemmTiled<32, 32, 8>(int, int, int, '
                        "const float*, const float*, float*);\n")
    return path


def fill(db: str, budget: int, objectives: Sequence[str]) -> None:
    """Studies of the bundled kernels (seed 0), one per objective, those the database lacks."""
    store = Store.open(db)
    try:
        done = {(s.key.kernel, s.key.objective) for s in store.list_studies()}
    finally:
        store.close()
    for objective in objectives:
        for kernel in TUNED_ON:
            if (load_spec(kernel).name, objective) not in done:
                start = time.perf_counter()
                tune(kernel, db, objective=objective, budget=budget, workers="local", warm_start=False)
                print(f"filled: {kernel.relative_to(ROOT)} {objective} ({time.perf_counter() - start:.0f} s)", flush=True)


def prior_for(kernel: Path, space: SearchSpace, db: str) -> transfer.Prior:
    """The prior `compileiq tune` would start this kernel's study from (objective static)."""
    spec, toolchain = load_spec(kernel), find_toolchain()
    request = TuneRequest(kernel=spec, space=space, objective="static", budget=1)
    key = study_key(request, bundle_sources(spec, toolchain.nvcc), toolchain)
    store = Store.open(db)
    try:
        return other_kernels_prior(store, key, space, space.default_config(), max(BATCH // 2, 1))
    finally:
        store.close()


def replay_warm(space: SearchSpace, table: Table, prior: transfer.Prior, objective: str, seed: int,
                budget: int) -> Run:
    """`full_space.replay` with the tuner's warm start: the prior's proposals first after the
    baseline (as `Tuner._candidates`), the searcher told which settings to propose later."""
    default = space.default_config()
    (baseline,) = table.lookup([default])
    searcher = Searcher(space, SearchSettings("bayes", seed))
    searcher.discourage(prior.discouraged)
    waiting = [c for c in prior.first if c.key != default.key]
    values: list[float | None] = []
    seen: set[str] = set()
    batch = [default]
    while batch:
        observations = [observation(objective, c, m, baseline, default) for c, m in zip(batch, table.lookup(batch))]
        values += [o.value for o in observations]
        seen.update(c.key for c in batch)
        searcher.tell(observations)
        if (left := budget - len(values)) <= 0:
            break
        count = min(BATCH, left)
        first = [c for c in waiting if c.key not in seen][:count]
        waiting = [c for c in waiting if c.key not in seen and c not in first]
        batch = first + searcher.ask(count - len(first), exclude=[c.key for c in first]) if count > len(first) else first
    return Run("warm", objective, seed, tuple(values))


def charged(evaluations: int | None) -> int | None:
    """Whole batches: the baseline alone, then batches of BATCH; reaching the target inside one
    costs all of it."""
    if evaluations is None or evaluations <= 1:
        return evaluations
    return 1 + BATCH * math.ceil((evaluations - 1) / BATCH)


def shown(runs: Sequence[Run], reference: float, budget: int) -> str:
    counts = [charged(r.evaluations_to(reference)) for r in runs]
    finite = [float(c) if c is not None else math.inf for c in counts]
    median = statistics.median(finite)
    per_seed = ",".join("-" if c is None else str(c) for c in counts)
    return f"{'>' + str(budget) if math.isinf(median) else f'{median:g}'} ({sum(c is not None for c in counts)}/{len(counts)}) [{per_seed}]"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kernels", default=",".join(JUDGED))
    parser.add_argument("--objectives", default="static,registers")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=65, help="evaluations per run: the baseline and 8 batches")
    parser.add_argument("--fill-budget", type=int, default=32, help="each bundled kernel's study in the team database")
    parser.add_argument("--fill-objectives", default="static,registers", help="the bundled kernels' studies")
    parser.add_argument("--db", default=f"sqlite:///{ROOT / 'store/warm-start/team.db'}", help="the team database")
    parser.add_argument("--tables", type=Path, help="JSON cache of the compiled configurations (read and written)")
    args = parser.parse_args(argv)
    (ROOT / "store/warm-start").mkdir(parents=True, exist_ok=True)
    fill(args.db, args.fill_budget, args.fill_objectives.split(","))
    tables: dict = json.loads(args.tables.read_text()) if args.tables and args.tables.exists() else {}
    print(f"machine: {machine()}; {args.seeds} seeds; batch {BATCH} (whole batches charged); "
          f"budget {args.budget} evaluations per run; team database: {len(TUNED_ON)} bundled kernels' studies "
          f"({args.fill_objectives}, budget {args.fill_budget})")
    print(f"{'kernel':16} {'objective':10} {'table':>6} {'baseline':>9} {'reference':>9}  {'cold':>24}  {'warm':>24}"
          "   (median evaluations to the reference, runs reaching it, [per seed])")
    for name in args.kernels.split(","):
        kernel = judged_kernel(name)
        start = time.perf_counter()
        space = default_space(kernel)
        prior = prior_for(kernel, space, args.db)
        print(f"{kernel.stem}: prior of {prior.studies} studies: first {[_changed(c, space) for c in prior.first]}; "
              f"later {sorted(prior.discouraged, key=str)}", flush=True)
        entries = tables.setdefault(table_key(kernel, space), {})
        compile_missing = tuner_compiler(kernel, space, ROOT / "store/warm-start" / f"{kernel.stem}.db")
        table = Table(entries, compile_missing, lambda: save(args.tables, tables))
        runs = []
        for seed in range(args.seeds):
            for objective in args.objectives.split(","):
                runs.append(replay(space, table, "compileiq", objective, seed, args.budget))
                runs.append(replay_warm(space, table, prior, objective, seed, args.budget))
        save(args.tables, tables)
        for objective in args.objectives.split(","):
            reference = reference_value(space, table, objective)
            default = space.default_config()
            built = table.entries[default.key]
            baseline = value(objective, default, built, built, default)
            cold = [r for r in runs if r.objective == objective and r.strategy == "compileiq"]
            warm = [r for r in runs if r.objective == objective and r.strategy == "warm"]
            if reference is None:
                print(f"{kernel.stem:16} {objective:10} no configuration built")
                continue
            print(f"{kernel.stem:16} {objective:10} {len(table.entries):6d} {_number(baseline):>9} {_number(reference):>9}  "
                  f"{shown(cold, reference, args.budget):>24}  {shown(warm, reference, args.budget):>24}"
                  + ("   trivial: the baseline is the best known" if baseline == reference else ""), flush=True)
        print(f"{'':16} ({table.compiled} compiled now; {time.perf_counter() - start:.0f} s)", flush=True)


def _changed(config: Config, space: SearchSpace) -> dict:
    default = space.default_config().as_dict()
    return {k: v for k, v in config.as_dict().items() if default.get(k) != v}


def _number(x: float | None) -> str:
    return "failed" if x is None else f"{x:g}"


if __name__ == "__main__":
    main()
