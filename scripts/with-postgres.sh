#!/usr/bin/env bash
# Run a command beside a private, throwaway PostgreSQL: its own data folder under /tmp and a free
# port on 127.0.0.1, so two checkouts' test runs side by side never share, or delete, each other's
# server. The command sees the URL as COMPILEIQ_TEST_POSTGRES_URL; the server stops and its folder
# is deleted when the command ends (whatever its exit status, which is this script's).
# Usage: scripts/with-postgres.sh COMMAND [ARGS...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

datadir=$(mktemp -d /tmp/compileiq-pg.XXXXXX)
cleanup() { "$here/stop-postgres.sh" "$datadir" >/dev/null 2>&1 || true; rm -rf "$datadir"; }
trap cleanup EXIT INT TERM
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
COMPILEIQ_TEST_POSTGRES_URL="$(COMPILEIQ_PG_PORT="$port" "$here/start-postgres.sh" "$datadir" | tail -n 1)"
export COMPILEIQ_TEST_POSTGRES_URL
echo "PostgreSQL for this run: 127.0.0.1:$port, data in $datadir (deleted at the end)" >&2
"$@"
