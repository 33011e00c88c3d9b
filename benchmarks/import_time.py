"""How long `compileiq flags FILE` spends importing, for one or more checkouts side by side.

`compileiq flags` runs once per kernel in a build, so its start-up is a cost every build pays.
Each round runs every checkout once, in turn (interleaved, so load on the machine hits all alike),
as `python -X importtime -m compileiq flags ACF`; the total is the sum of every module's own
import time. Prints the medians and each checkout's ratio to the first.

    python benchmarks/import_time.py --acf store/k.acf.toml --tree . --tree ../old-checkout [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one_run(tree: Path, acf: Path) -> tuple[float, float]:
    """(import time in ms, wall time in ms) of one `compileiq flags` process importing ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "compileiq", "flags", str(acf)], env=env, cwd=tree,
                          capture_output=True, text=True, check=True)
    wall = (time.perf_counter() - started) * 1000
    total_us = sum(int(line.split("|")[0].split(":")[1]) for line in done.stderr.splitlines()
                   if line.startswith("import time:") and line.split("|")[0].split(":")[1].strip().isdigit())
    return total_us / 1000, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--acf", type=Path, required=True)
    parser.add_argument("--tree", type=Path, action="append", required=True, help="a checkout's root (repeat)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree]
    runs: dict[Path, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for tree in trees:  # one unmeasured run each: the first one compiles bytecode
        one_run(tree, args.acf)
    for _ in range(args.rounds):
        for tree in trees:
            runs[tree].append(one_run(tree, args.acf))
    first = statistics.median(r[0] for r in runs[trees[0]])
    print(f"{'checkout':50} {'imports ms':>11} {'wall ms':>9} {'ratio':>7}   ({args.rounds} rounds, medians)")
    for tree in trees:
        imports = statistics.median(r[0] for r in runs[tree])
        wall = statistics.median(r[1] for r in runs[tree])
        print(f"{tree!s:50} {imports:11.1f} {wall:9.1f} {imports / first:7.3f}")


if __name__ == "__main__":
    main()
