#!/usr/bin/env bash
# Install compileiq with its test extras into .venv, start a throwaway PostgreSQL on loopback,
# and run the whole test suite (extra arguments go to pytest). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v strace >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    # strace lets the loopback test prove Ray stays on 127.0.0.1; the test skips without it.
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace) >&2 || true
fi
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    # headless Chromium opens the HTML report in the report tests (they fail under CI=true without it).
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >&2 || true
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,cluster]"

COMPILEIQ_TEST_POSTGRES_URL="$(scripts/start-postgres.sh | tail -n 1)"
export COMPILEIQ_TEST_POSTGRES_URL
trap 'scripts/stop-postgres.sh >/dev/null 2>&1 || true' EXIT

.venv/bin/python -m pytest "$@"
