#!/usr/bin/env bash
# A throwaway PostgreSQL for the durable layer's tests.
#
#   bash durable/pg/throwaway_postgres.sh start DIR   # initdb into DIR/data, start, print the DSN
#   bash durable/pg/throwaway_postgres.sh stop DIR    # stop it at once and remove DIR
#
# The server listens on a Unix socket inside DIR only (listen_addresses is empty: no TCP port is
# opened at all), trusts local connections of its one role `td`, and holds one database `tdtest`.
# It keeps fsync on: the crash tests and the benchmark measure real commits. As root (CI runs as
# root), the server runs as the `postgres` user that Debian's package creates: initdb refuses root.
set -euo pipefail

find_bin() {
  local dir
  if command -v pg_ctl >/dev/null 2>&1; then dirname "$(readlink -f "$(command -v pg_ctl)")"; return; fi
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$dir" ] || [ ! -x "$dir/pg_ctl" ]; then echo "no pg_ctl: install PostgreSQL first" >&2; exit 1; fi
  echo "$dir"
}

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

action=${1:-}
dir=${2:-}
if [ -z "$dir" ] || [ "${dir#/}" = "$dir" ]; then echo "usage: $0 start|stop ABSOLUTE_DIR" >&2; exit 2; fi
bin=$(find_bin)

case $action in
  start)
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres "$dir"; fi
    as_owner "$bin/initdb" -D "$dir/data" -U td -A trust -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses='' -k $dir -c max_connections=80 -c shared_buffers=32MB" start >/dev/null
    as_owner "$bin/createdb" -h "$dir" -U td tdtest
    echo "postgresql://td@/tdtest?host=$dir"
    ;;
  stop)
    if [ -d "$dir/data" ]; then as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true; fi
    rm -rf "$dir"
    ;;
  *)
    echo "usage: $0 start|stop ABSOLUTE_DIR" >&2; exit 2 ;;
esac
