#!/usr/bin/env bash
# Prove the dependency floors in pyproject.toml: install every dependency at the LOWEST version
# pyproject allows (each ">=X" becomes "==X") into .venv-min, then run the tests that cover the
# CLI, the store (SQLite and PostgreSQL), the search and a real tune. CI runs it after the suite.
# Extra arguments go to pytest. Needs COMPILEIQ_TEST_POSTGRES_URL for the PostgreSQL cases
# (a private server is started for the run when it is not set).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${MIN_VENV:-.venv-min}"
PYTHON="${PYTHON:-python3}"
mapfile -t PINS < <("$PYTHON" - <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
    name, floor = re.match(r"([A-Za-z0-9_.\-\[\]]+)\s*(?:==|>=)\s*([0-9][^,;\s]*)", requirement).groups()
    print(f"{name}=={floor}")
PY
)
echo "minimum versions: ${PINS[*]}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
"$VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
    | grep -i -E "^(typer|rich|sqlalchemy|alembic|numpy|scikit-learn|scikit-optimize|ray|psycopg|tomli.w|pytest) "

# A private PostgreSQL (own folder, free port) unless the caller gives one.
run=(); [ -n "${COMPILEIQ_TEST_POSTGRES_URL:-}" ] || run=(scripts/with-postgres.sh)
"${run[@]}" "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_cli_errors.py tests/test_store.py \
    tests/test_search.py tests/test_space.py tests/test_acf.py tests/test_tune.py "$@"
