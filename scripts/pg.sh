#!/usr/bin/env bash
# Throwaway PostgreSQL cluster for make dev, make test and CI.
#
#   scripts/pg.sh start DIR   create (once) and start a cluster in DIR on a free
#                             loopback port; prints its URL on stdout
#   scripts/pg.sh stop DIR    stop it (fast shutdown)
#   scripts/pg.sh remove DIR  stop it and delete its files
#   scripts/pg.sh url DIR     print the URL of a running cluster
#
# The server binaries refuse to run as root, so as root they run as the
# 'postgres' user on a data directory that user owns.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|remove|url DIR" >&2; exit 2; }

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$pgbin" ] && command -v pg_ctl >/dev/null 2>&1; then pgbin=$(dirname "$(command -v pg_ctl)"); fi
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
  cat >&2 <<'MSG'
PostgreSQL server binaries (initdb, pg_ctl) were not found.
Either install them (Debian/Ubuntu: apt-get install postgresql),
or point Herald at an existing server with HERALD_DATABASE_URL=postgres://...,
or run the whole stack with: docker compose up
MSG
  exit 1
fi

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# shellcheck source=scripts/ports.sh
. "$(dirname "$0")/ports.sh"

url_of() { echo "postgres://herald@127.0.0.1:$(cat "$dir/port")/herald?sslmode=disable"; }

# home prints the folder for the server's own files (data, socket, log): DIR
# itself, or, when the postgres user cannot reach DIR (a checkout under a
# private folder such as one made by mktemp -d), a folder of its own in /tmp
# whose path DIR/home records.
home() {
  if [ -f "$dir/home" ]; then cat "$dir/home"; return; fi
  local h="$dir"
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$dir" 2>/dev/null; then
    h=$(mktemp -d /tmp/herald-pg-XXXXXX)
    chmod 755 "$h"
    chown postgres: "$h"
  fi
  echo "$h" >"$dir/home"
  echo "$h"
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    chmod 755 "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    h=$(home)
    if [ ! -f "$h/data/PG_VERSION" ]; then
      as_pg "$pgbin/initdb" -D "$h/data" -U herald --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    if as_pg "$pgbin/pg_ctl" -D "$h/data" status >/dev/null 2>&1; then url_of; exit 0; fi
    # Another process may take the same free port at the same moment: try a few.
    started=""
    # A restart keeps the cluster's port (clients keep their URL) while it is free.
    prev=$(cat "$dir/port" 2>/dev/null || true)
    for _ in 1 2 3 4 5; do
      if [ -n "$prev" ] && ! (exec 3<>"/dev/tcp/127.0.0.1/$prev") 2>/dev/null; then port=$prev; else port=$(free_port 20000 24999); fi
      prev=""
      echo "$port" >"$dir/port"
      if as_pg "$pgbin/pg_ctl" -D "$h/data" -l "$h/server.log" -w -t 60 \
        -o "-p $port -k $h -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off -c synchronous_commit=off" \
        start >/dev/null; then started=1; break; fi
    done
    [ -n "$started" ] || { tail -n 20 "$h/server.log" >&2; exit 1; }
    as_pg "$pgbin/psql" -h 127.0.0.1 -p "$port" -U herald -d postgres -qtAc \
      "SELECT 1 FROM pg_database WHERE datname = 'herald'" | grep -q 1 \
      || as_pg "$pgbin/createdb" -h 127.0.0.1 -p "$port" -U herald herald
    url_of
    ;;
  stop)
    [ -f "$dir/home" ] && h=$(cat "$dir/home") && [ -d "$h/data" ] \
      && as_pg "$pgbin/pg_ctl" -D "$h/data" -m fast -w stop >/dev/null 2>&1 || true
    ;;
  remove)
    # Stop, then delete the server's files wherever they are.
    "$0" stop "$dir"
    [ -f "$dir/home" ] && h=$(cat "$dir/home") && [ "$h" != "$dir" ] && rm -rf "$h"
    rm -rf "$dir"
    ;;
  url)
    url_of
    ;;
  *) echo "usage: $0 start|stop|remove|url DIR" >&2; exit 2 ;;
esac
