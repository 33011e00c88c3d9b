#!/usr/bin/env bash
# Fill .whl/ with the wheels a GPU machine without a package registry needs to run compileiq:
# exactly the packages its image lacks (sqlalchemy, alembic, mako, scikit-optimize, pyaml, tomli-w;
# the image already has numpy, scipy, scikit-learn, typer, rich, pyyaml, pytest, markupsafe, ...),
# plus a wheel of compileiq itself. Ray is left out: on one machine `--workers local` needs none.
#
# Usage: scripts/device-kit.sh [--python-version 3.12] [--dest .whl]
# The GPU machine's python3 is 3.12 (x86_64, manylinux); the rehearsal builds a kit for the
# Python it rehearses with. Prints the kit's size; fails when it passes KIT_LIMIT_MIB (20).
set -euo pipefail
cd "$(dirname "$0")/.."

PYVER=3.12
DEST=.whl
while [ $# -gt 0 ]; do
    case "$1" in
        --python-version) PYVER="$2"; shift 2 ;;
        --dest) DEST="$2"; shift 2 ;;
        *) echo "device-kit: unknown argument $1" >&2; exit 2 ;;
    esac
done
LIMIT_MIB="${KIT_LIMIT_MIB:-20}"
PIP="${PIP:-python3 -m pip}"

# What the GPU image lacks, pinned to the versions the project is tested with.
MISSING=(
    "sqlalchemy==2.1.9"
    "alembic==1.20.1"
    "mako==1.4.3"
    "scikit-optimize==0.10.2"
    "pyaml==26.7.0"
    "tomli-w==1.2.0"
)
PLATFORMS=(manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64
           manylinux_2_24_x86_64 manylinux1_x86_64)

rm -rf "$DEST"
mkdir -p "$DEST"
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
$PIP download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "$PYVER" --implementation cp "${platform_args[@]}" -d "$DEST" "${MISSING[@]}"
$PIP wheel -q --disable-pip-version-check --no-deps -w "$DEST" .

count=$(find "$DEST" -name '*.whl' | wc -l)
bytes=$(du -cb "$DEST"/*.whl | tail -n 1 | cut -f1)
mib=$(python3 -c "print(f'{$bytes / 2**20:.1f}')")
echo "device kit: $count wheels, $mib MiB in $DEST (limit $LIMIT_MIB MiB)"
if [ "$bytes" -gt $((LIMIT_MIB * 1024 * 1024)) ]; then
    echo "device kit: larger than $LIMIT_MIB MiB" >&2
    exit 1
fi
