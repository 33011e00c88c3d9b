#!/usr/bin/env bash
# The GPU acceptance check, in one call (under a deadline of 9 minutes; logs and summary.md
# under $OUT, or /tmp/compileiq-gpu-check):
#   scripts/gpu-check.sh              on a machine with a GPU and no package registry: installs the
#                                     offline kit in .whl/ (scripts/device-kit.sh made it) over the
#                                     machine's python3, then runs scripts/gpu_check.py;
#   scripts/gpu-check.sh --rehearse   here, without a GPU: the same install, offline (unshare -n),
#                                     over a venv holding only the GPU image's package set, then
#                                     every step that needs no GPU.
# Environment: GPU_CHECK_KERNELS ("reduction sgemm"), GPU_CHECK_BUDGET (8),
# GPU_CHECK_GATE_REPEATS (2), GPU_CHECK_DEADLINE_S (540), GPU_CHECK_PYTHON (python3),
# GPU_CHECK_SKIP (steps to leave out, e.g. "kernels" on a rerun).
set -euo pipefail
cd "$(dirname "$0")/.."

REHEARSE=0
[ "${1:-}" = "--rehearse" ] && REHEARSE=1
OUT="${OUT:-/tmp/compileiq-gpu-check}"
mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/compileiq-gpu-check-env.XXXXXX)"
SITE="$WORK/site"
trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1

# The packages the GPU machine's image already has (its python3 is 3.12), of those compileiq uses.
IMAGE_PACKAGES=(numpy scipy scikit-learn joblib threadpoolctl packaging typer click rich pygments
                markdown-it-py mdurl shellingham pyyaml markupsafe typing-extensions pytest)

if [ "$REHEARSE" = 1 ]; then
    PY_BASE="${GPU_CHECK_PYTHON:-}"
    if [ -z "$PY_BASE" ]; then  # the image's Python is 3.12: rehearse with one where there is one
        for candidate in python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 python3; do
            if "$candidate" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
                PY_BASE="$candidate"; break
            fi
        done
    fi
    PYVER="$("$PY_BASE" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    echo "== rehearsal: image venv ($PY_BASE, Python $PYVER) from the registry" | tee "$OUT/install.log"
    "$PY_BASE" -m venv "$WORK/image"
    "$WORK/image/bin/python" -m pip install -q --disable-pip-version-check "${IMAGE_PACKAGES[@]}" \
        >>"$OUT/install.log" 2>&1
    PY="$WORK/image/bin/python"
    KIT="$WORK/kit"
    scripts/device-kit.sh --python-version "$PYVER" --dest "$KIT" 2>>"$OUT/install.log" | tee -a "$OUT/install.log"
    OFFLINE=(unshare -n)
    command -v unshare >/dev/null && unshare -n true 2>/dev/null || OFFLINE=()
else
    PY="${GPU_CHECK_PYTHON:-python3}"
    KIT=.whl
    OFFLINE=()
    if [ ! -d "$KIT" ]; then
        echo "gpu-check: no offline kit in .whl/ (run scripts/device-kit.sh where a registry is reachable)" >&2
        exit 2
    fi
fi

echo "== installing the kit offline (--no-index --no-deps) into $SITE" | tee -a "$OUT/install.log"
"${OFFLINE[@]}" "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
    --no-cache-dir --target "$SITE" "$KIT"/*.whl >>"$OUT/install.log" 2>&1
export PYTHONPATH="$SITE" PATH="$SITE/bin:$PATH"
"$PY" -c "import compileiq.cli, sqlalchemy, alembic, skopt; print('compileiq imports offline')" | tee -a "$OUT/install.log"
if "$PY" -c "import ray" 2>/dev/null; then echo "(ray is present: not needed here)"; fi

ARGS=(--out "$OUT" --kernels ${GPU_CHECK_KERNELS:-reduction sgemm}
      --budget "${GPU_CHECK_BUDGET:-8}" --gate-repeats "${GPU_CHECK_GATE_REPEATS:-2}"
      --deadline-s "${GPU_CHECK_DEADLINE_S:-540}")
[ "$REHEARSE" = 1 ] && ARGS+=(--rehearse)
[ -n "${GPU_CHECK_SKIP:-}" ] && ARGS+=(--skip $GPU_CHECK_SKIP)
"$PY" scripts/gpu_check.py "${ARGS[@]}"
