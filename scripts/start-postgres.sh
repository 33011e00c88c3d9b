#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the store tests (idempotent).
# Usage: scripts/start-postgres.sh [DATADIR]   (default /tmp/compileiq-pg)
# The last line on stdout is the URL to export as COMPILEIQ_TEST_POSTGRES_URL.
set -euo pipefail

DATADIR="${1:-${COMPILEIQ_PG_DIR:-/tmp/compileiq-pg}}"
PORT="${COMPILEIQ_PG_PORT:-54329}"
ROLE=compileiq
PASSWORD=compileiq-test

find_bindir() {
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir; return
    fi
    local d
    d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

BINDIR=$(find_bindir || true)
if [ -z "$BINDIR" ]; then
    echo "PostgreSQL not found; installing it" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y postgresql >&2
    BINDIR=$(find_bindir)
fi

# The server refuses to run as root: run it as the postgres OS user then.
if [ "$(id -u)" -eq 0 ]; then
    as_pg() { runuser -u postgres -- "$@"; }
    mkdir -p "$DATADIR"
    chown postgres: "$DATADIR"
else
    as_pg() { "$@"; }
    mkdir -p "$DATADIR"
fi
chmod 700 "$DATADIR"

if [ ! -f "$DATADIR/PG_VERSION" ]; then
    as_pg "$BINDIR/initdb" -D "$DATADIR" -U postgres --auth-local=trust \
        --auth-host=scram-sha-256 -E UTF8 --no-sync >&2
    cat >> "$DATADIR/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DATADIR'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
CONF
fi

if ! as_pg "$BINDIR/pg_ctl" -D "$DATADIR" status >/dev/null 2>&1; then
    as_pg "$BINDIR/pg_ctl" -D "$DATADIR" -w -l "$DATADIR/server.log" start >&2
fi

psql_admin() { as_pg "$BINDIR/psql" -h "$DATADIR" -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
psql_admin -d postgres >&2 <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
    CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
  ELSE
    ALTER ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
  END IF;
END \$\$;
SQL
if [ "$(psql_admin -d postgres -c "SELECT 1 FROM pg_database WHERE datname = '$ROLE'")" != "1" ]; then
    psql_admin -d postgres -c "CREATE DATABASE $ROLE OWNER $ROLE" >&2
fi

echo "postgresql+psycopg://$ROLE:$PASSWORD@127.0.0.1:$PORT/$ROLE"
