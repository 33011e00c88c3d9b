"""Merge single-timing Kernel Tuner caches of one landscape into one cache with repeated timings.

Some published landscapes keep one timing per configuration per file: the GPU benchmarking paper's
`irace_tune/stochastic_cache_files/<kernel>_<gpu>_processed_run<k>.json` holds, for every
configuration, the k-th of the 32 timings that were recorded (benchmarks/runtime_landscapes.py's
(h2)). Judged on run k alone, a search is judged on one noisy draw; merged, each configuration
gets its runs as ``times`` (in the order the files are given) and their mean as ``time``, which is
what Kernel Tuner's simulation and compileiq's replay both read:

    .venv/bin/python benchmarks/merge_runs.py pnpoly_A100_processed_run2.json pnpoly_A100_processed_run3.json \
        --out pnpoly_A100_runs2-3.json.gz

A configuration that failed (or is missing) in any run is recorded as failed in the merge. Give
the runs in their recorded order: a replay leaves each configuration's first timing out as a cold
launch (`compileiq.evaluate.replay.WARMUP`), which run 1 is (on pnpoly's A100 recording it is
slower than run 2 in 74% of the configurations, by a median 0.4%).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from compileiq.evaluate.replay import LandscapeError, load_landscape, read_cache

FAILED = "RuntimeFailedConfig"  # Kernel Tuner's record of a configuration that failed to run


def merge(paths: Sequence[Path]) -> dict:
    """One cache: the first file's header, each configuration's timings from every file."""
    header = {k: v for k, v in read_cache(paths[0]).items() if k != "cache"}
    landscapes = [load_landscape(path) for path in paths]
    if any(land.parameters != landscapes[0].parameters for land in landscapes):
        raise SystemExit("the files name different parameters (tune_params_keys): not runs of one landscape")
    keys = sorted(set().union(*(land.times for land in landscapes)))
    cache: dict[str, dict] = {}
    for key in keys:
        runs = [land.times.get(key, ()) for land in landscapes]
        name = ",".join(map(str, key))
        entry: dict = dict(zip(landscapes[0].parameters, key))
        if all(len(r) == 1 for r in runs):
            times = [r[0] for r in runs]
            entry.update(time=statistics.fmean(times), times=times)
        else:  # failed or missing in one run, or not a single-timing file
            entry.update(time=FAILED)
        cache[name] = entry
    return {**header, "merged_from": [p.name for p in paths], "cache": cache}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="single-timing caches of one landscape")
    parser.add_argument("--out", type=Path, required=True, help="the merged cache (.json or .json.gz)")
    args = parser.parse_args(argv)
    try:
        data = merge(args.runs)
    except LandscapeError as error:
        raise SystemExit(str(error)) from None
    text = json.dumps(data).encode()
    args.out.write_bytes(gzip.compress(text) if args.out.name.endswith(".gz") else text)
    merged = sum(1 for e in data["cache"].values() if e["time"] != FAILED)
    print(f"{args.out}: {merged:,} configurations timed in all {len(args.runs)} runs, "
          f"{len(data['cache']) - merged:,} failed or missing in one")


if __name__ == "__main__":
    main()
