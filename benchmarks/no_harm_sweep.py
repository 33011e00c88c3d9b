"""The no-harm sweep: tune kernels with every static objective and count the ACFs a careful engineer
could not apply blind: a lowered ptxas optimisation level, more spill bytes than the defaults, or,
for `static`, lower occupancy than the defaults; and the candidates to time the runs listed.

    python benchmarks/no_harm_sweep.py [KERNEL.cu ...] [--budget 16] [--objectives static,spills,...]

Without kernels: the bundled kernels and tests/corpus_harm (register-hungry kernels written to
tempt a static objective into harm). Each kernel is tuned in a fresh SQLite database with local
workers; a kernel that does not build with its defaults is reported and skipped.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from compileiq import app
from compileiq.core.errors import CompileIQError
from compileiq.evaluate import eligibility
from compileiq.results import acf
from compileiq.tuning.progress import SilentProgress

OBJECTIVES = ("static", "spills", "registers", "occupancy", "instructions")


def sweep_one(kernel: Path, objective: str, budget: int, folder: Path) -> dict[str, object]:
    name = f"{kernel.parent.name}-{kernel.stem}"  # two kernels of one stem (transform.cu) in other folders
    out = folder / f"{name}.{objective}.acf.toml"
    options = app.TuneOptions(kernel=kernel, objective=objective, budget=budget, workers="local",
                              db=f"sqlite:///{folder}/{name}.db", out=out)
    report = app.tune(options, SilentProgress())
    found = acf.read(out)
    best, base = found.evidence["best"], found.evidence["baseline"]
    lowered = eligibility.lowered_optimisation(found.controls, report.space.default_config().as_dict())
    return {"lowered": bool(lowered), "more_spills": best["spill_bytes"] > base["spill_bytes"],
            "static_worse": objective == "static" and best["occupancy"] < base["occupancy"],
            "changed": bool(found.controls), "to_time": len(found.evidence.get("to_time", []))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kernels", nargs="*", type=Path)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--objectives", default=",".join(OBJECTIVES))
    args = parser.parse_args()
    kernels = args.kernels or [*sorted((REPO / "kernels").glob("*/*.cu")), *sorted((REPO / "tests" / "corpus_harm").glob("*.cu"))]
    objectives = args.objectives.split(",")
    rows = []
    with tempfile.TemporaryDirectory(prefix="compileiq-sweep-") as folder:
        for kernel in kernels:
            for objective in objectives:
                try:
                    rows.append((kernel.stem, objective, sweep_one(kernel.resolve(), objective, args.budget, Path(folder))))
                except CompileIQError as error:
                    print(f"{kernel.stem} {objective}: skipped: {str(error).splitlines()[0]}")
    print(f"{'kernel':16} {'objective':13} changed lowered more-spills static-worse to-time")
    for name, objective, row in rows:
        print(f"{name:16} {objective:13} {row['changed']!s:7} {row['lowered']!s:7} {row['more_spills']!s:11} "
              f"{row['static_worse']!s:12} {row['to_time']}")
    count = len(rows)
    print(f"\n{count} ACFs over {len(kernels)} kernels x {len(objectives)} objectives (budget {args.budget}): "
          f"{sum(r['changed'] for _, _, r in rows)} change a setting, "
          f"{sum(r['lowered'] for _, _, r in rows)} lower the optimisation level, "
          f"{sum(r['more_spills'] for _, _, r in rows)} spill more than the defaults, "
          f"{sum(r['static_worse'] for _, _, r in rows)} `static` ACFs lower occupancy; "
          f"{sum(bool(r['to_time']) for _, _, r in rows)} list candidates to time "
          f"({sum(int(str(r['to_time'])) for _, _, r in rows)} candidates)")


if __name__ == "__main__":
    main()
