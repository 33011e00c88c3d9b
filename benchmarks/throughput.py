"""Benchmark (a): variants evaluated per minute, `compileiq tune --objective static` against a
plain loop that runs a full `nvcc -cubin` per variant over the very same configurations.

    .venv/bin/python benchmarks/throughput.py [--kernel kernels/sgemm/sgemm.cu] [--budget 48]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, fresh_db, machine, tune

from compileiq.app import TuneOptions, tuning_space
from compileiq.core.processes import run_tool
from compileiq.core.space import Config
from compileiq.core.toolchain import find_toolchain
from compileiq.source.harness import harness_include_dir
from compileiq.source.kernel import load_spec


def naive_loop(kernel: Path, configs: list[Config], threads: int) -> float:
    """Seconds for one full `nvcc -cubin -Xptxas -v` per configuration."""
    spec, tools = load_spec(kernel), find_toolchain()
    space = tuning_space(spec, tools, TuneOptions(kernel=kernel))
    out_dir = Path(fresh_db().removeprefix("sqlite:///")).parent

    def build(item: tuple[int, Config]) -> int:
        index, config = item
        includes = [f"-I{d}" for d in (*spec.include_dirs, harness_include_dir())]
        argv = [
            tools.nvcc,
            f"-arch={spec.arch}",
            "-cubin",
            "-Xptxas=-v",
            *space.nvcc_args(config),
            *spec.fixed_define_args(),
            *includes,
            str(kernel),
            "-o",
            str(out_dir / f"{index}.cubin"),
        ]
        run = run_tool(argv, 300)
        if run.returncode != 0:
            raise SystemExit(f"the reference loop's nvcc failed: {run.output[:500]}")
        return run.returncode

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(build, enumerate(configs)))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", type=Path, default=ROOT / "kernels/sgemm/sgemm.cu")
    parser.add_argument("--budget", type=int, default=48)
    args = parser.parse_args()
    print(
        f"machine: {machine()}; kernel {args.kernel.name}, budget {args.budget}, objective static"
    )
    rows = []
    configs: list[Config] = []
    for workers in ("local", "ray"):
        report = tune(
            args.kernel, fresh_db(), objective="static", budget=args.budget, workers=workers
        )
        result = report.result
        configs = [Config.of(t.config) for t in result.trials]
        counters = result.counters
        rows.append(
            (
                f"compileiq tune (workers={workers})",
                len(configs),
                result.wall_seconds,
                (
                    f"nvcc -ptx {counters.frontend_calls}, ptxas {counters.ptxas_calls}, "
                    f"worker start {counters.worker_start_seconds:.1f} s"
                ),
            )
        )
    for threads in (1, 2):
        seconds = naive_loop(args.kernel, configs, threads)
        rows.append((f"loop of full nvcc -cubin ({threads} at a time)", len(configs), seconds, ""))
    reference = rows[-2][1] / rows[-2][2]
    print(f"{'method':44} {'variants':>8} {'seconds':>8} {'per min':>8} {'vs loop':>8}  notes")
    for name, count, seconds, notes in rows:
        rate = count / seconds * 60
        print(
            f"{name:44} {count:8d} {seconds:8.1f} {rate:8.1f} {rate / (reference * 60):7.1f}x  {notes}"
        )


if __name__ == "__main__":
    main()
