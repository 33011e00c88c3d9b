#!/usr/bin/env bash
# GPU acceptance check, one prepared script (sized for < 8 minutes on one H200):
#   1. a venv with compileiq (reuses .venv; else creates one, offline from ./.whl if present),
#   2. pytest -m gpu (harness smoke, graph batch, A/A, unwritten output, a bundled kernel),
#   3. `compileiq tune --objective time` of a few bundled kernels with a small budget,
#   4. the measuring library end to end per kernel (baseline + flag variants: screen, then
#      confirm the best against the baseline with the interleaved statistic) and an A/A,
#   5. one table. Logs go under $OUT (or /tmp/compileiq-gpu-check).
# Environment: GPU_CHECK_KERNELS (default "reduction transpose softmax"), GPU_CHECK_BUDGET (8).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${OUT:-/tmp/compileiq-gpu-check}"
mkdir -p "$LOG"
KERNELS="${GPU_CHECK_KERNELS:-reduction transpose softmax}"
BUDGET="${GPU_CHECK_BUDGET:-8}"
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1

if ! .venv/bin/python -c "import compileiq" 2>/dev/null; then
    python3 -m venv .venv
    if [ -d .whl ]; then
        .venv/bin/python -m pip install -q --no-index --find-links .whl -e ".[test]"
    else
        .venv/bin/python -m pip install -q -e ".[test]"
    fi
fi
{ nvidia-smi -L; nvcc --version | tail -n 2; } 2>&1 | tee "$LOG/machine.txt"

echo "== pytest -m gpu"
timeout 240 .venv/bin/python -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$LOG/pytest-gpu.txt"

echo "== compileiq tune --objective time"
for k in $KERNELS; do
    timeout 150 .venv/bin/compileiq tune "kernels/$k/$k.cu" --objective time --budget "$BUDGET" \
        --workers local --db "sqlite:///$LOG/gpu-check.db" --out "$LOG/$k.acf.toml" \
        >"$LOG/tune-$k.txt" 2>&1
    echo "$k: exit $? ($(tail -n 1 "$LOG/tune-$k.txt"))"
done

echo "== measuring library: screen + confirm, and an A/A"
timeout 300 .venv/bin/python - "$LOG" $KERNELS <<'PY' 2>&1 | tee "$LOG/table.txt"
import shutil, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from compileiq.compile import ExecutableJob, build_executable
from compileiq.confirm import Candidate, confirm, executable_sampler, relative_noise
from compileiq.kernel import bundle_sources, load_spec
from compileiq.measure import LocalMeasurer, compare_outputs

log, kernels = Path(sys.argv[1]), sys.argv[2:]
VARIANTS = {"baseline": ((), ()), "ptxas -O1": ((), ("-O1",)), "maxrregcount=32": ((), ("--maxrregcount=32",)),
            "dlcm=cg": ((), ("-dlcm=cg",)), "extra-device-vectorization": (("--extra-device-vectorization",), ())}
measurer, nvcc = LocalMeasurer(), shutil.which("nvcc") or "nvcc"
rows, aa_verdict = [], "-"
for name in kernels:
    spec = load_spec(Path("kernels") / name / f"{name}.cu")
    bundle = bundle_sources(spec)
    jobs = {label: ExecutableJob(nvcc, bundle, spec.arch, (*fe, *spec.fixed_define_args()), px, 300)
            for label, (fe, px) in VARIANTS.items()}
    with ThreadPoolExecutor(8) as pool:
        builds = dict(zip(jobs, pool.map(build_executable, jobs.values())))
    base = measurer.measure(builds["baseline"].executable, [*spec.run_args, "--quick"], 30)
    if base.failure:
        rows.append((name, f"baseline failed: {base.failure}")); continue
    screened = []
    for i, (label, build) in enumerate(builds.items()):
        if label == "baseline" or not build.ok:
            continue
        run = measurer.measure(build.executable, [*spec.run_args, "--quick"], 30)
        ok = run.failure is None and compare_outputs(base.dump, base.harness.outputs, run.dump,
                                                     run.harness.outputs, spec.rtol, spec.atol).passed
        if ok:
            screened.append((Candidate(i, label, run.harness.median_ms, True), build.executable))
    screened.sort(key=lambda c: c[0].screen_ms)
    a = executable_sampler(measurer, builds["baseline"].executable, spec.run_args)
    finalists = [(c, executable_sampler(measurer, exe, spec.run_args)) for c, exe in screened[:1]]
    result = confirm(a, finalists, samples=10, schedule=(10, 20))
    if aa_verdict == "-":
        aa = confirm(a, [(Candidate(0, "A", 0, True), a)], samples=10, schedule=(10, 20))
        aa_verdict = f"{aa.confirmed[0].comparison.verdict.value} (delta {aa.delta:.1%})"
    noise = relative_noise(base.harness.samples_ms)
    if result.winner is None:
        rows.append((name, f"{base.harness.median_ms:.4f}", "-", "1.00 (kept baseline)", "baseline", f"{noise:.1%}"))
    else:
        c = result.winner.comparison
        rows.append((name, f"{base.harness.median_ms:.4f}", f"{base.harness.median_ms * c.estimate:.4f}",
                     f"{c.speedup:.2f} [{1 / c.high:.2f}, {1 / c.low:.2f}]", result.winner.candidate.code_hash,
                     f"{noise:.1%}"))
header = ("kernel", "baseline ms", "best ms", "speedup [95%]", "chosen flags", "rel. noise (IQR/median)")
for row in [header, *rows]:
    print(" | ".join(str(cell) for cell in row))
print(f"A/A verdict: {aa_verdict}")
PY
echo "logs: $LOG"
