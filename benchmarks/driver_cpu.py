"""The tuner's own CPU beside its compilers', for one or more checkouts side by side.

On a machine with as many cores as compile slots, every CPU second `compileiq tune` spends itself
(imports, refits, asks, recording) is taken from ptxas: the share of the ptxas-bound limit a run can
reach is at most compilers / (compilers + its own CPU). Each round runs every checkout once, in turn
(interleaved, so load on the machine hits all alike), as a child `python driver_cpu.py --child ...`
that runs `compileiq tune` in its own process and reports `getrusage` at exit: its own CPU (every
thread) and its children's (the compilers). Every run writes a fresh database. Prints each run and
the medians.

    python benchmarks/driver_cpu.py --tree . --tree ../old-checkout [--rounds 2] [--budget 480] [-- TUNE ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ONLY = ("ptxas.allow_expensive_optimizations,ptxas.def_load_cache,ptxas.def_store_cache,"
        "ptxas.disable_optimizer_constants,ptxas.maxntid,ptxas.maxrregcount,ptxas.minnctapersm,ptxas.opt_level,"
        "ptxas.optimize_float_atomics,ptxas.override_directive_values,ptxas.register_usage_level")


def _child(argv: list[str], report: str) -> None:
    """Run `compileiq ARGV` here; at exit write this process's CPU and its children's to `report`."""
    import atexit
    import time

    start = time.perf_counter()

    def write() -> None:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        Path(report).write_text(json.dumps({"own": own.ru_utime + own.ru_stime, "children": kids.ru_utime + kids.ru_stime,
                                            "wall": time.perf_counter() - start}))

    atexit.register(write)
    sys.argv = ["compileiq", *argv]
    runpy.run_module("compileiq", run_name="__main__")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="a checkout (its compileiq is imported)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=int, default=480)
    parser.add_argument("--kernel", default="kernels/spill_heavy/spill_heavy.cu")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.add_argument("tune_args", nargs="*", help="more arguments for tune (default: the ptxas settings only)")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {tree: [] for tree in args.tree}
    with tempfile.TemporaryDirectory(prefix="driver-cpu-") as scratch:
        for round_ in range(args.rounds):
            for index, tree in sorted(enumerate(args.tree), key=lambda it: (it[0] - round_) % len(args.tree)):  # the order rotates
                report = Path(scratch) / f"r{round_}-{index}.json"
                tune = ["tune", args.kernel, "--objective", "static", "--budget", str(args.budget), "--workers", "local",
                        "--db", f"sqlite:///{scratch}/r{round_}-{index}.db", "--out", f"{scratch}/r{round_}-{index}.acf.toml",
                        *(args.tune_args or ["--only", ONLY])]
                env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
                subprocess.run([sys.executable, __file__, "--tree", tree, "--child", str(report), *tune], env=env,
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                found = json.loads(report.read_text())
                runs[tree].append(found)
                print(f"round {round_ + 1} {tree}: own CPU {found['own']:.2f} s, compilers {found['children']:.2f} s, "
                      f"wall {found['wall']:.1f} s", flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for tree, found in runs.items():
        own, kids = statistics.median(r["own"] for r in found), statistics.median(r["children"] for r in found)
        wall = statistics.median(r["wall"] for r in found)
        print(f"{tree}: median own CPU {own:.2f} s, compilers {kids:.2f} s: at most {kids / (kids + own):.1%} "
              f"of the compilers' limit on cores they share with the tuner; median wall {wall:.1f} s")


if __name__ == "__main__":
    if "--child" in sys.argv:
        where = sys.argv.index("--child")
        _child(sys.argv[where + 2:], sys.argv[where + 1])
    else:
        main()
