#!/usr/bin/env bash
# Stop the throwaway PostgreSQL started by start-postgres.sh and delete its data directory.
# Usage: scripts/stop-postgres.sh [DATADIR] [--keep]   (default /tmp/compileiq-pg)
set -euo pipefail

DATADIR="${1:-${COMPILEIQ_PG_DIR:-/tmp/compileiq-pg}}"
KEEP="${2:-}"
[ -f "$DATADIR/PG_VERSION" ] || { echo "no PostgreSQL data directory at $DATADIR" >&2; exit 0; }

BINDIR=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
if [ "$(id -u)" -eq 0 ]; then as_pg() { runuser -u postgres -- "$@"; }; else as_pg() { "$@"; }; fi

if as_pg "$BINDIR/pg_ctl" -D "$DATADIR" status >/dev/null 2>&1; then
    as_pg "$BINDIR/pg_ctl" -D "$DATADIR" -w -m fast stop >&2
fi
[ "$KEEP" = "--keep" ] || rm -rf "$DATADIR"
