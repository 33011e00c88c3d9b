"""A user's first minutes, measured side by side with an earlier release in one run:
`compileiq flags` wall time (Make calls it once per kernel) and the time from `compileiq tune` to
its first trial line, with local threads and with the embedded Ray.

Usage (from the repository root): .venv/bin/python benchmarks/first_hour.py [--previous REV] [--runs N]
The earlier release is checked out into a temporary git worktree and run with the same
interpreter and packages (PYTHONPATH picks which compileiq runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
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


def first_trial_seconds(checkout: Path, workers: str, folder: Path) -> float:
    """Seconds from starting `compileiq tune` to its first trial line on stderr."""
    command = [*_cli(checkout), "tune", str(KERNEL), "--objective", "spills", "--budget", "8", "--workers", workers,
               "--db", f"sqlite:///{folder / f'{workers}.db'}", "--out", str(folder / f"{workers}.acf.toml")]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=_env(checkout), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True, cwd=folder)
    assert process.stderr is not None
    seconds = float("nan")
    for line in process.stderr:
        if line.startswith("[1/"):
            seconds = time.perf_counter() - start
            break
    process.kill()
    process.wait()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--previous", default="db8d4bf", help="the earlier release to compare with")
    parser.add_argument("--runs", type=int, default=10, help="runs of `flags` per version (median)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="compileiq-first-hour-"))
    previous = scratch / "previous"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(previous), args.previous],
                   check=True, capture_output=True)
    try:
        rows = []
        for index, (label, checkout) in enumerate(((f"previous ({args.previous})", previous), ("this checkout", ROOT))):
            folder = scratch / f"run-{index}"
            folder.mkdir()
            first_local = first_trial_seconds(checkout, "local", folder)
            first_ray = first_trial_seconds(checkout, "ray", folder)
            rows.append((label, flags_seconds(checkout, make_acf(checkout, folder), args.runs), first_local, first_ray))
        print(f"machine: {machine()}; kernel {KERNEL.name}; flags: median of {args.runs} runs")
        print(f"{'version':28} {'flags s':>8} {'first trial (local) s':>22} {'first trial (ray) s':>20}")
        for label, flags, local, ray in rows:
            print(f"{label:28} {flags:8.2f} {local:22.2f} {ray:20.2f}")
        (old, new) = rows
        print(f"ratio previous/this: flags {old[1] / new[1]:.1f}x, first trial local {old[2] / new[2]:.1f}x, "
              f"ray {old[3] / new[3]:.1f}x")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(previous)], check=False,
                       capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
