"""A user's first minutes, measured side by side with an earlier release in one run:
`compileiq flags` wall time (Make calls it once per kernel) and the time from `compileiq tune` to
its first trial line, with local threads and with the embedded Ray; with Ray also the time to the
second trial line (the first one the started Ray compiles, since the baseline no longer waits for it).

Usage (from the repository root):
    .venv/bin/python benchmarks/first_hour.py [--previous REV]... [--runs N] [--tune-runs N]
Each earlier release is exported (git archive) into a temporary folder and run with the same
interpreter and packages (PYTHONPATH picks which compileiq runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, machine

KERNEL = ROOT / "kernels" / "spill_heavy" / "spill_heavy.cu"


def _env(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout), "NO_COLOR": "1", "TERM": "dumb"}


def _cli(checkout: Path) -> list[str]:
    """The command line of `checkout`'s compileiq (run from a folder outside both checkouts)."""
    return [sys.executable, "-c", "import sys; from compileiq.cli import main; sys.argv[0] = 'compileiq'; main()"]


def make_acf(checkout: Path, folder: Path) -> Path:
    """A small ACF written by this version itself (formats differ between versions)."""
    acf = folder / "flags.acf.toml"
    subprocess.run([*_cli(checkout), "tune", str(KERNEL), "--budget", "2", "--workers", "local", "--only",
                    "ptxas.opt_level", "--db", f"sqlite:///{folder / 'flags.db'}", "--out", str(acf)],
                   env=_env(checkout), check=True, capture_output=True, cwd=folder)
    return acf


def flags_seconds(checkout: Path, acf: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([*_cli(checkout), "flags", str(acf)], env=_env(checkout), check=True, capture_output=True,
                       cwd=acf.parent)  # not the repository root: `python -c` would import its compileiq
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def trial_seconds(checkout: Path, workers: str, folder: Path, run: int) -> tuple[float, float]:
    """Seconds from starting `compileiq tune` (a fresh database) to its first and second trial lines."""
    name = f"{workers}-{run}"
    command = [*_cli(checkout), "tune", str(KERNEL), "--objective", "spills", "--budget", "8", "--workers", workers,
               "--db", f"sqlite:///{folder / f'{name}.db'}", "--out", str(folder / f"{name}.acf.toml")]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=_env(checkout), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True, cwd=folder)
    assert process.stderr is not None
    seen: list[float] = []
    for line in process.stderr:
        if line.startswith(("[1/", "[2/")):
            seen.append(time.perf_counter() - start)
            if len(seen) == 2:
                break
    process.send_signal(signal.SIGINT)  # Ctrl-C's path: the run hands its claims back and shuts Ray down
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    seen += [float("nan")] * (2 - len(seen))
    return seen[0], seen[1]


def median_pair(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--previous", action="append", help="an earlier release to compare with (repeatable); "
                        "default: db8d4bf (before the first-hour work) and afde6c7 (before this round)")
    parser.add_argument("--runs", type=int, default=10, help="runs of `flags` per version (median)")
    parser.add_argument("--tune-runs", type=int, default=3, help="runs of `tune` per version and workers (median)")
    args = parser.parse_args()
    previous = args.previous or ["db8d4bf", "afde6c7"]
    scratch = Path(tempfile.mkdtemp(prefix="compileiq-first-hour-"))
    checkouts = [(f"previous ({rev})", scratch / f"previous-{rev}") for rev in previous]
    for rev, (_, folder) in zip(previous, checkouts, strict=True):
        folder.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    try:
        rows = []
        for index, (label, checkout) in enumerate([*checkouts, ("this checkout", ROOT)]):
            folder = scratch / f"run-{index}"
            folder.mkdir()
            local = median_pair([trial_seconds(checkout, "local", folder, run) for run in range(args.tune_runs)])
            ray = median_pair([trial_seconds(checkout, "ray", folder, run) for run in range(args.tune_runs)])
            rows.append((label, flags_seconds(checkout, make_acf(checkout, folder), args.runs), local[0], *ray))
        print(f"machine: {machine()}; kernel {KERNEL.name}; medians of {args.runs} `flags` runs and "
              f"{args.tune_runs} `tune` runs (fresh database each)")
        header = ("version", "flags s", "1st trial local s", "1st trial ray s", "2nd trial ray s")
        print(f"| {' | '.join(header)} |")
        print(f"|{'|'.join('---' for _ in header)}|")
        for label, flags, local_first, ray_first, ray_second in rows:
            print(f"| {label} | {flags:.2f} | {local_first:.2f} | {ray_first:.2f} | {ray_second:.2f} |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
