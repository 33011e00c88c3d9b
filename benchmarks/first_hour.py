"""A new user's first minute, measured side by side with an earlier release in one run: the time
from `compileiq tune KERNEL` (a fresh database) to its first line on stderr and to its first
result (the baseline's trial line), on a quiet machine and under load (busy-loop processes, one
per `--load`), with local threads and with the embedded Ray; each row ends with the ratio
earlier/this checkout.

Usage (from the repository root):
    .venv/bin/python benchmarks/first_hour.py [--previous REV] [--runs N] [--load N] [--workers local,ray]
The earlier release is exported (git archive) into a temporary folder and run with the same
interpreter and packages (PYTHONPATH picks which compileiq runs); the versions take turns run by
run, so that a change in the machine's load falls on both.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from common import ROOT, machine

KERNEL = ROOT / "kernels" / "reduction" / "reduction.cu"


def _env(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout), "NO_COLOR": "1", "TERM": "dumb"}


def _cli() -> list[str]:
    """The command line of the compileiq that PYTHONPATH names (run from a folder outside both checkouts)."""
    return [sys.executable, "-c", "import sys; from compileiq.cli import main; sys.argv[0] = 'compileiq'; main()"]


def first_seconds(checkout: Path, workers: str, folder: Path, name: str) -> tuple[float, float]:
    """Seconds from starting `compileiq tune` (a fresh database) to its first stderr line and to
    its first trial line; the run is then interrupted (Ctrl-C's path)."""
    command = [*_cli(), "tune", str(KERNEL), "--budget", "8", "--workers", workers,
               "--db", f"sqlite:///{folder / f'{name}.db'}", "--out", str(folder / f"{name}.acf.toml")]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=_env(checkout), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True, cwd=folder)
    assert process.stderr is not None
    first_line = first_result = float("nan")
    for line in process.stderr:
        if math.isnan(first_line):  # the first line
            first_line = time.perf_counter() - start
        if line.startswith("[1/"):
            first_result = time.perf_counter() - start
            break
    process.send_signal(signal.SIGINT)  # the run hands its claims back and shuts Ray down
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return first_line, first_result


@contextlib.contextmanager
def load(processes: int) -> Iterator[None]:
    """`processes` busy loops (a loaded machine) while the block runs; ended by their own ids."""
    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--previous", default="c5b7e70", help="the earlier release (default: c5b7e70, "
                        "before the searcher loaded in the background)")
    parser.add_argument("--runs", type=int, default=3, help="runs per version, load and workers (median)")
    parser.add_argument("--load", type=int, default=2, help="busy-loop processes for the loaded rounds")
    parser.add_argument("--workers", default="local,ray", help="local, ray or both (comma-separated)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="compileiq-first-hour-"))
    previous = scratch / "previous"
    previous.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.previous], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(previous)], input=archive, check=True)
    versions = {f"previous ({args.previous})": previous, "this checkout": ROOT}
    rows = []
    try:
        for busy in (0, args.load):
            with load(busy):
                for workers in args.workers.split(","):
                    seen: dict[str, list[tuple[float, float]]] = {label: [] for label in versions}
                    for run in range(args.runs):
                        for index, (label, checkout) in enumerate(versions.items()):
                            name = f"{workers}-{busy}-{run}-{index}"
                            seen[label].append(first_seconds(checkout, workers, scratch, name))
                    medians = {label: (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs))
                               for label, pairs in seen.items()}
                    rows.append((f"{busy} busy loops" if busy else "quiet", workers, *medians.values()))
        print(f"machine: {machine()}; kernel {KERNEL.name}; medians of {args.runs} `tune` runs per cell "
              "(fresh database each, versions taking turns)")
        header = ("load", "workers", "1st line before s", "1st line after s", "ratio",
                  "1st result before s", "1st result after s", "ratio")
        print(f"| {' | '.join(header)} |")
        print(f"|{'|'.join('---' for _ in header)}|")
        for label, workers, before, after in rows:
            print(f"| {label} | {workers} | {before[0]:.2f} | {after[0]:.2f} | {before[0] / after[0]:.2f}x | "
                  f"{before[1]:.2f} | {after[1]:.2f} | {before[1] / after[1]:.2f}x |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
