"""Benchmark (a): variants evaluated per minute by `compileiq tune --objective static`, side by
side with what a plain script does with the same compilers, and as a share of the ptxas-bound
limit, over the very same configurations.

Methods, interleaved over --rounds rounds (the order rotates each round), medians reported:

- compileiq tune (workers local / ray): the real CLI (`python -m compileiq tune KERNEL
  --objective static --budget N --workers W --json`) in a process of its own, timed from its
  start to its exit (interpreter start-up, imports, bundling, the database and Ray's start all
  included). Its variants are every trial it recorded.
- two-stage script: what one would write by hand: one `nvcc -ptx` per distinct front end (the
  macros and nvcc-side flags of the configurations compileiq evaluated in the first, warm-up
  run), then `ptxas -v` per variant on its front end's PTX, in a thread pool as wide as
  compileiq's local workers (the CPU count); each variant's ptxas starts as soon as its PTX is
  there.
- ptxas-bound limit: the same variants' ptxas runs one at a time, each one's CPU time (user +
  system, from the rusage of the waited child) summed, divided by the CPU count: the rate at which
  the ptxas work alone would finish on every core at once. compileiq's share of it is the headline.
  The front ends' CPU time is measured the same way and shown (a compile-bound limit: nvcc -ptx +
  ptxas CPU / cores); a tuner must run them too, so nobody reaches the ptxas-bound limit unless
  the front ends are negligible.
- --full-nvcc adds a loop of full `nvcc -cubin` per variant (the front end rebuilt for every
  variant): a labelled extra row, not the reference.

    .venv/bin/python benchmarks/throughput.py [--kernel kernels/sgemm/sgemm.cu] [--budget 48]
        [--rounds 3] [--workers local,ray,local+stream] [--full-nvcc]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from common import ROOT, fresh_db, machine, scratch

from compileiq.app import TuneOptions, tuning_space
from compileiq.core.processes import run_tool
from compileiq.core.space import Config, SearchSpace
from compileiq.core.toolchain import Toolchain, find_toolchain
from compileiq.source.harness import harness_include_dir
from compileiq.source.kernel import load_spec
from compileiq.source.spec import KernelSpec
from compileiq.store import Store


@dataclass(frozen=True)
class Timed:
    method: str
    variants: int
    seconds: float
    load: float  # 1-minute load average when the run started
    notes: str = ""
    cpu: float | None = None  # CPU seconds of the whole process tree (compilers included), if known

    @property
    def per_minute(self) -> float:
        return self.variants / self.seconds * 60


@dataclass(frozen=True)
class Recipe:
    """How a plain script builds one kernel's variants: the same compilers, the same arguments."""

    kernel: Path
    spec: KernelSpec
    tools: Toolchain
    space: SearchSpace

    def frontend_argv(self, config: Config, out: Path) -> list[str]:
        includes = [f"-I{d}" for d in (*self.spec.include_dirs, harness_include_dir())]
        return [self.tools.nvcc, f"-arch={self.spec.arch}", "-ptx", *self.spec.nvcc_flags.flags,
                *self.space.frontend_args(config), *self.spec.fixed_define_args(), *includes,
                str(self.kernel), "-o", str(out)]

    def ptxas_argv(self, config: Config, ptx: Path, out: Path) -> list[str]:
        return [self.tools.ptxas, f"-arch={self.spec.arch}", "-v", *self.space.ptxas_args(config), str(ptx),
                "-o", str(out)]

    def full_nvcc_argv(self, config: Config, out: Path) -> list[str]:
        includes = [f"-I{d}" for d in (*self.spec.include_dirs, harness_include_dir())]
        return [self.tools.nvcc, f"-arch={self.spec.arch}", "-cubin", "-Xptxas=-v", *self.spec.nvcc_flags.flags,
                *self.space.nvcc_args(config), *self.spec.fixed_define_args(), *includes, str(self.kernel),
                "-o", str(out)]

    def frontends(self, configs: Sequence[Config]) -> dict[tuple[str, ...], list[int]]:
        """Each distinct front end (its nvcc arguments) and the indices of its variants."""
        groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for index, config in enumerate(configs):
            groups[self.space.frontend_args(config)].append(index)
        return groups


def recipe(kernel: Path, only: tuple[str, ...] = ()) -> Recipe:
    spec, tools = load_spec(kernel), find_toolchain()
    return Recipe(kernel, spec, tools, tuning_space(spec, tools, TuneOptions(kernel=kernel, only=only)))


def _must(argv: list[str]) -> None:
    """A front end that fails stops the benchmark: none of its variants could be built."""
    run = run_tool(argv, 300)
    if run.returncode != 0:
        raise SystemExit(f"{Path(argv[0]).name} failed in the reference script: {run.output[:500]}")


def _variant(argv: list[str]) -> bool:
    """A variant's ptxas may fail (a register cap too tight for the kernel's code): a script
    records that and goes on, as compileiq records the failure as a variant's result; its CPU
    time counts toward the limit as compileiq's does."""
    return run_tool(argv, 300).returncode == 0


def compileiq_tune(kernel: Path, budget: int, workers: str, only: tuple[str, ...] = ()) -> tuple[Timed, list[Config]]:
    """The real CLI in a process of its own; its variants read back from its database. `workers`
    is a backend, or BACKEND+stream for `--stream`."""
    db = fresh_db()
    out = scratch("compileiq-acf-") / f"{kernel.stem}.acf.toml"
    backend, _, stream = workers.partition("+")
    argv = [sys.executable, "-m", "compileiq", "tune", str(kernel), "--objective", "static", "--budget",
            str(budget), "--workers", backend, "--db", db, "--out", str(out), "--json",
            *(["--stream"] if stream else []), *(["--only", ",".join(only)] if only else [])]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if run.returncode != 0:
        raise SystemExit(f"compileiq tune failed: {run.stderr[-800:]}")
    report = json.loads(run.stdout)
    store = Store.open(db)
    try:
        (study,) = store.list_studies()
        configs = [Config.of(t.config) for t in store.trials(study.id)]
    finally:
        store.close()
    counters = report["counters"]
    notes = (f"nvcc -ptx {counters['frontend_calls']}, ptxas {counters['ptxas_calls']}, "
             f"tune's own wall {report['wall_seconds']:.1f} s, worker start {counters['worker_start_seconds']:.1f} s")
    flags = f"--workers {backend}" + (" --stream" if stream else "")
    return Timed(f"compileiq tune {flags}", len(configs), seconds, load, notes, cpu), configs


def two_stage(plan: Recipe, configs: Sequence[Config], threads: int) -> Timed:
    """One `nvcc -ptx` per front end, `ptxas -v` per variant, `threads` at a time."""
    folder = scratch("compileiq-two-stage-")
    groups = plan.frontends(configs)
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        variants: list[Future[bool]] = []

        def front_done(number: int, members: list[int]) -> Callable[[Future[None]], None]:
            def then(done: Future[None]) -> None:
                done.result()
                ptx = folder / f"{number}.ptx"
                variants.extend(pool.submit(_variant, plan.ptxas_argv(configs[i], ptx, folder / f"{i}.cubin"))
                                for i in members)
            return then

        fronts = []
        for number, members in enumerate(groups.values()):
            front = pool.submit(_must, plan.frontend_argv(configs[members[0]], folder / f"{number}.ptx"))
            front.add_done_callback(front_done(number, members))
            fronts.append(front)
        for front in fronts:
            front.result()
        while len(variants) < len(configs):  # the last callbacks may still be submitting
            time.sleep(0.001)
        failed = sum(not variant.result() for variant in variants)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(f"two-stage script ({threads} at a time)", len(configs), seconds, load,
                 f"nvcc -ptx {len(groups)}, ptxas {len(configs)}" + (f" ({failed} failed)" if failed else ""), cpu)


def _cpu_seconds(argv: list[str], run: Callable[[list[str]], object] = _must) -> float:
    """User + system CPU seconds of one compiler run (and its children), run alone."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run(argv)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cpu_pass(plan: Recipe, configs: Sequence[Config]) -> tuple[float, float]:
    """CPU seconds of the front ends and of the ptxas runs, one compiler at a time."""
    folder = scratch("compileiq-limit-")
    frontend = ptxas = 0.0
    for number, members in enumerate(plan.frontends(configs).values()):
        ptx = folder / f"{number}.ptx"
        frontend += _cpu_seconds(plan.frontend_argv(configs[members[0]], ptx))
        for i in members:
            ptxas += _cpu_seconds(plan.ptxas_argv(configs[i], ptx, folder / f"{i}.cubin"), _variant)
    return frontend, ptxas


def full_nvcc(plan: Recipe, configs: Sequence[Config], threads: int) -> Timed:
    folder = scratch("compileiq-full-nvcc-")
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        built = list(pool.map(_variant, [plan.full_nvcc_argv(c, folder / f"{i}.cubin") for i, c in enumerate(configs)]))
    failed = built.count(False)
    return Timed(f"extra: full nvcc -cubin per variant ({threads} at a time)", len(configs),
                 time.perf_counter() - start, load,
                 "the front end rebuilt for every variant" + (f" ({failed} failed)" if failed else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kernel", type=Path, default=ROOT / "kernels/sgemm/sgemm.cu")
    parser.add_argument("--budget", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="local,ray", help="compileiq's worker backends, comma-separated; BACKEND+stream adds --stream")
    parser.add_argument("--only", default="", help="search only these parameters (comma-separated, as `compileiq tune --only`)")
    parser.add_argument("--full-nvcc", action="store_true", help="add the old loop of full nvcc builds (an extra row)")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    only = tuple(n for n in args.only.split(",") if n)
    plan = recipe(args.kernel, only)
    print(f"machine: {machine()}; kernel {args.kernel.name}, budget {args.budget}, objective static"
          f"{', only ' + args.only if only else ', the full default space'}; "
          f"{args.rounds} rounds, methods interleaved, medians")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    warm, configs = compileiq_tune(args.kernel, args.budget, "local", only)  # fixes the variants; warms the caches
    print(f"warm-up (not counted): {warm.variants} variants, {warm.seconds:.1f} s, load {warm.load:.1f}", flush=True)
    methods: list[Callable[[], Timed]] = [
        *(lambda w=w: compileiq_tune(args.kernel, args.budget, w, only)[0] for w in args.workers.split(",")),
        lambda: two_stage(plan, configs, cores),
        *([lambda: full_nvcc(plan, configs, cores)] if args.full_nvcc else []),
    ]
    timed: dict[str, list[Timed]] = defaultdict(list)
    cpu: list[tuple[float, float, float]] = []
    for round_ in range(args.rounds):
        order = methods[round_ % len(methods):] + methods[: round_ % len(methods)]
        for method in order:
            result = method()
            timed[result.method].append(result)
            cpu_text = f", {result.cpu:.1f} CPU s" if result.cpu is not None else ""
            print(f"  round {round_ + 1}: {result.method}: {result.variants} variants, {result.seconds:.1f} s"
                  f"{cpu_text}, {result.per_minute:.0f}/min, load {result.load:.1f}", flush=True)
        load = os.getloadavg()[0]
        frontend, ptxas = cpu_pass(plan, configs)
        cpu.append((frontend, ptxas, load))
        print(f"  round {round_ + 1}: CPU pass: nvcc -ptx {frontend:.1f} s, ptxas {ptxas:.1f} s "
              f"(CPU seconds, one at a time), load {load:.1f}", flush=True)
    frontend = statistics.median(c[0] for c in cpu)
    ptxas = statistics.median(c[1] for c in cpu)
    limit = len(configs) / (ptxas / cores) * 60
    bound = len(configs) / ((frontend + ptxas) / cores) * 60
    two = statistics.median(t.per_minute for t in timed[f"two-stage script ({cores} at a time)"])
    print()
    print("columns: wall seconds and CPU seconds of the whole process tree (compilers included), median of the")
    print("rounds; per min = variants per minute of wall time; the load averages of the rounds (CPU-bound runs on a")
    print(f"shared machine slow down by about load/{cores}); 'of limit' = share of the ptxas-bound limit, 'of bound' =")
    print("share of the compile-bound rate (front ends + ptxas CPU / cores)")
    print(f"{'method':46} {'variants':>8} {'seconds':>8} {'CPU s':>6} {'per min':>8} {'vs 2-stage':>10} "
          f"{'of limit':>8} {'of bound':>8}  load  notes")
    for name, runs in timed.items():
        rate = statistics.median(t.per_minute for t in runs)
        seconds = statistics.median(t.seconds for t in runs)
        known = [t.cpu for t in runs if t.cpu is not None]
        cpu_s = f"{statistics.median(known):6.1f}" if known else f"{'':6}"
        loads = "/".join(f"{t.load:.1f}" for t in runs)
        print(f"{name:46} {runs[0].variants:8d} {seconds:8.1f} {cpu_s} {rate:8.1f} {rate / two:9.2f}x "
              f"{rate / limit:8.0%} {rate / bound:8.0%}  {loads}  {runs[-1].notes}")
    print(f"{'ptxas-bound limit (ptxas CPU s / ' + str(cores) + ' cores)':46} {len(configs):8d} "
          f"{ptxas / cores:8.1f} {ptxas:6.1f} {limit:8.1f} {limit / two:9.2f}x {1:8.0%} {limit / bound:8.0%}  "
          f"{'/'.join(f'{c[2]:.1f}' for c in cpu)}  ptxas alone, one at a time")
    print(f"{'compile-bound (nvcc -ptx + ptxas CPU s / cores)':46} {len(configs):8d} "
          f"{(frontend + ptxas) / cores:8.1f} {frontend + ptxas:6.1f} {bound:8.1f} {bound / two:9.2f}x "
          f"{bound / limit:8.0%} {1:8.0%}  {'':3}  front ends {frontend:.1f} CPU s for "
          f"{len(plan.frontends(configs))} of them")


if __name__ == "__main__":
    main()
