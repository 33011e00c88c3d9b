"""How long the check of a shipped host -O level takes (`compileiq.build.host_check`), its front
ends run one after another against one per CPU, side by side in one run.

A bundled kernel with tuned macros (conv2d: BK and TT, three other values, so eight front ends) is
read with its tune.toml and a compile database (in a scratch folder) whose command ships `nvcc -O3`. `tune` and the
gate check that level before anything else runs: at the macros' first values and at each other
value, the kernel's front end with and without it. The kernel never reads __OPTIMIZE__, so every
front end runs (the most a check of these values costs; one that differs at the first values stops
after two). Each round runs the check once per setting, in turn (interleaved, so load on the
machine hits all alike); the verdicts must be the same. Prints the medians and each setting's
ratio to one at a time.

    .venv/bin/python benchmarks/host_check.py [--kernel kernels/conv2d/conv2d.cu] [--rounds 5]
        [--workers 1,2,0]   (0: one per CPU, the default of `tune` and the gate)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, machine, scratch

from compileiq import app
from compileiq.build.host_check import checked
from compileiq.core.toolchain import find_toolchain
from compileiq.source.shipped import HOST_OPTIMISATION

SHIPPED = "nvcc -O3 -arch=sm_90 -c {name} -o k.o"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", type=Path, default=ROOT / "kernels" / "conv2d" / "conv2d.cu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", default="1,0", help="front ends at once, comma-separated (0: one per CPU)")
    args = parser.parse_args()
    settings = [int(w) for w in args.workers.split(",")]
    kernel = args.kernel.resolve()  # in place: its tune.toml names include folders beside it
    database = scratch("compileiq-host-check-") / "compile_commands.json"
    database.write_text(json.dumps([{"directory": str(kernel.parent), "file": kernel.name,
                                     "command": SHIPPED.format(name=kernel.name)}]))
    spec = app.kernel_spec(kernel, None, database)  # checked once (unmeasured): the level set aside
    if "-O3" in spec.nvcc_flags.flags or spec.shipped is None:
        sys.exit(f"{kernel.name}: -O3 is applied (it reads __OPTIMIZE__): choose a kernel that does not")
    # as the command reads before its check (a checked level is not checked again)
    unchecked = replace(spec, shipped=replace(spec.shipped, fixed=tuple(
        replace(f, why=HOST_OPTIMISATION) if f.flag == "-O3" else f for f in spec.shipped.fixed)))
    values = sum(len(v) - 1 for _, v in spec.tuned_defines)
    nvcc = find_toolchain().nvcc
    times: dict[int, list[float]] = {w: [] for w in settings}
    for _ in range(args.rounds):
        for workers in settings:
            started = time.perf_counter()
            again = checked(unchecked, nvcc, workers=workers or None)
            times[workers].append(time.perf_counter() - started)
            assert again == spec, f"workers={workers}: another verdict"  # the same words, the same spec
    why = next(f.why for f in spec.shipped.fixed if f.flag == "-O3")
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"command: python {' '.join(sys.argv)}")
    print(f"kernel {kernel.name}: {values} other tuned values, {2 * (values + 1)} front ends; verdict: -O3 ({why})")
    serial = statistics.median(times[settings[0]])
    print(f"| front ends at once | median s | min s | max s | ratio to {settings[0] or os.cpu_count()} |")
    print("|---|---|---|---|---|")
    for workers in settings:
        median = statistics.median(times[workers])
        label = f"{workers}" if workers else f"one per CPU ({os.cpu_count()})"
        print(f"| {label} | {median:.2f} | {min(times[workers]):.2f} | {max(times[workers]):.2f} | "
              f"{serial / median:.2f}x |")


if __name__ == "__main__":
    main()
