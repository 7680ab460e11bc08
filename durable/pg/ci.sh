#!/usr/bin/env bash
# CI extras for the durable layer: its suite against a real PostgreSQL.
#
# Installs what is missing (Debian's postgresql when no pg_ctl is found; psycopg, pinned, into a
# virtual environment outside the checkout), starts a throwaway server (durable/pg/throwaway_postgres.sh:
# a temporary directory, a Unix socket only), runs the PostgreSQL suite in the four test modes, the
# README's three commands with --store, and the benchmark on both backends; then stops the server and
# removes its directory, whatever happened. Under CI=true the suite fails rather than skips.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export PYTHONDONTWRITEBYTECODE=1
PSYCOPG_PIN='psycopg[binary]==3.3.9'

if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  echo "NOTE installing Debian's postgresql (no pg_ctl on this machine)"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null || {
    echo "FAIL could not install postgresql"; exit 1; }
fi

venv=${TMPDIR:-/tmp}/td-durable-pg-venv
if [ ! -x "$venv/bin/python" ]; then "$(command -v python || command -v python3)" -m venv "$venv" || exit 1; fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$PSYCOPG_PIN" || { echo "FAIL pip install"; exit 1; }
py="$venv/bin/python"

dir=$(mktemp -d "${TMPDIR:-/tmp}/td-pg.XXXXXX")
trap 'bash durable/pg/throwaway_postgres.sh stop "$dir"' EXIT  # widened below, once the temporary files exist
dsn=$(bash durable/pg/throwaway_postgres.sh start "$dir") || { echo "FAIL the throwaway server did not start"; exit 1; }
export DURABLE_PG_DSN=$dsn
echo "NOTE the PostgreSQL suite runs on Python $("$py" -c "import sys; print(sys.version.split()[0])"), server $(psql "$dsn" -Atc "SHOW server_version" 2>/dev/null || echo unknown)"

status=0
failures=$(mktemp "${TMPDIR:-/tmp}/td-pg-failures.XXXXXX")
out=$(mktemp "${TMPDIR:-/tmp}/td-pg-out.XXXXXX")
trap 'bash durable/pg/throwaway_postgres.sh stop "$dir"; rm -f "$failures" "$out"' EXIT
# Each command's output is shown whole; a failing one's test names and assertion lines are also
# kept, and printed together at the very end, where a reader of only the last lines finds them.
run() {
  local start=$(date +%s)
  if "$@" >"$out" 2>&1; then
    cat "$out"; echo "ok   $(( $(date +%s) - start ))s  ${*:2}"
  else
    status=1; cat "$out"; echo "FAIL $(( $(date +%s) - start ))s  ${*:2}"
    { echo "FAIL ${*:2}"
      grep -E '^(FAIL|ERROR):|Error:|^Ran |^FAILED' "$out" | head -n 12 | sed 's/^/  /'
      tail -n 3 "$out" | sed 's/^/  | /'; } >>"$failures"
  fi
}
run "$py" -B -m unittest discover -s durable -p 'test_durable_postgres.py'
run "$py" -O -B -m unittest discover -s durable -p 'test_durable_postgres.py'
run "$py" -B -W error -m unittest discover -s durable -p 'test_durable_postgres.py'
run "$py" -O -B -W error -m unittest discover -s durable -p 'test_durable_postgres.py'
# The README's three commands, on the server: a schema of its own for the demo.
psql "$dsn" -qc 'CREATE SCHEMA demo' >/dev/null
demo="$dsn&options=-csearch_path%3Ddemo"
run "$py" -B -W error durable/durable_dispatcher.py run --fixture tool-cases.json --store "$demo"
run "$py" -B -W error durable/durable_dispatcher.py recover --store "$demo"
run "$py" -B -W error durable/durable_dispatcher.py verify-chain --store "$demo"
run "$py" -B -W error durable/bench_durable.py --quick --pg "$dsn"
# The MCP guard's ledger on the same server: a restarted guard replays instead of writing again.
psql "$dsn" -qc 'CREATE SCHEMA guard' >/dev/null
GUARD_PG_DSN="$dsn&options=-csearch_path%3Dguard" run "$py" -B -W error -m unittest discover -s mcp_bridge \
  -p 'test_guard.py' -k postgresql
if [ "$status" -ne 0 ]; then echo "== what failed"; cat "$failures"; fi
exit $status
