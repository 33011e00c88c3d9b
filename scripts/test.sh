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
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,cluster,peers]"

# A private PostgreSQL (own folder, free port): runs in other checkouts beside this one are safe.
# Two pytest workers (pytest-xdist), each test module on one of them so that its module-scoped
# builds run once: much of the suite waits on Ray start-up and child processes rather than the CPU.
# COMPILEIQ_TEST_WORKERS=0 runs in this process; a later -n in the arguments wins.
exec scripts/with-postgres.sh .venv/bin/python -m pytest -n "${COMPILEIQ_TEST_WORKERS:-2}" --dist loadscope "$@"
