#!/usr/bin/env bash
# Throwaway PostgreSQL cluster for make dev, make test and CI.
#
#   scripts/pg.sh start DIR   create (once) and start a cluster in DIR on a free
#                             loopback port; prints its URL on stdout
#   scripts/pg.sh stop DIR    stop it (fast shutdown)
#   scripts/pg.sh remove DIR  stop it and delete its files
#   scripts/pg.sh url DIR     print the URL of a running cluster (the owner role)
#   scripts/pg.sh runtime-url DIR
#                             print the URL of the runtime role
#
# The cluster runs with fsync and synchronous_commit off: its data is
# throwaway and a crash may lose it. HERALD_PG_DURABLE=1 at start runs it as
# production does (both on), for figures whose cost is the WAL flush of a
# commit (BenchmarkConcurrentPublish).
#
# Two roles, as in production (docs/production.md): herald owns the
# database and Herald's tables and runs the migrations (and, with CREATEROLE,
# the tests that make roles of their own); herald_app is the runtime role of
# the workers and the starter CLI, granted its privileges by
# `starter migrate --runtime-role herald_app`. Both log in over TCP with a
# password generated for this cluster (DIR/owner.password,
# DIR/runtime.password, mode 0600), checked with scram-sha-256. The
# superuser has no password: it connects only through the Unix socket, as the
# operating system user of the same name (peer authentication). No local user
# is trusted blindly.
#
# The server binaries refuse to run as root, so as root they run as the
# 'postgres' user on a data directory that user owns.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|remove|url|runtime-url DIR" >&2; exit 2; }

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

url_of() { echo "postgres://herald:$(cat "$dir/owner.password")@127.0.0.1:$(cat "$dir/port")/herald?sslmode=disable"; }
runtime_url_of() { echo "postgres://herald_app:$(cat "$dir/runtime.password")@127.0.0.1:$(cat "$dir/port")/herald?sslmode=disable"; }

# The superuser is the operating system user the server runs as, so that peer
# authentication on the socket lets exactly that user in.
superuser() { if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi; }

# password FILE: print the password in FILE, generating it the first time.
password() {
  if [ ! -s "$1" ]; then
    (umask 077; od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$1")
  fi
  cat "$1"
}

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
    su=$(superuser)
    if [ ! -f "$h/data/PG_VERSION" ]; then
      as_pg "$pgbin/initdb" -D "$h/data" -U "$su" --auth-local=peer --auth-host=scram-sha-256 \
        -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
      echo "$su" >"$dir/superuser"
    elif [ ! -f "$dir/superuser" ]; then
      echo "the cluster in $dir was made by an older scripts/pg.sh that trusted every local user;" \
        "remove it (scripts/pg.sh remove $dir) and start again" >&2
      exit 1
    fi
    owner_pw=$(password "$dir/owner.password")
    runtime_pw=$(password "$dir/runtime.password")
    want_durable=0; [ "${HERALD_PG_DURABLE:-}" = 1 ] && want_durable=1
    if as_pg "$pgbin/pg_ctl" -D "$h/data" status >/dev/null 2>&1; then
      # Already running: it keeps the durability it was started with.
      if [ "$(cat "$dir/durable" 2>/dev/null || echo 0)" != "$want_durable" ]; then
        echo "pg.sh: the cluster in $dir is already running with HERALD_PG_DURABLE=$(cat "$dir/durable" 2>/dev/null || echo 0); stop it first to start it with HERALD_PG_DURABLE=$want_durable" >&2
      fi
      url_of; exit 0
    fi
    # Another process may take the same free port at the same moment: try a few.
    started=""
    durability="-c fsync=off -c synchronous_commit=off"
    if [ "$want_durable" = 1 ]; then durability="-c fsync=on -c synchronous_commit=on"; fi
    echo "$want_durable" >"$dir/durable"
    # A restart keeps the cluster's port (clients keep their URL) while it is free.
    prev=$(cat "$dir/port" 2>/dev/null || true)
    for _ in 1 2 3 4 5; do
      if [ -n "$prev" ] && ! (exec 3<>"/dev/tcp/127.0.0.1/$prev") 2>/dev/null; then port=$prev; else port=$(free_port 20000 24999); fi
      prev=""
      echo "$port" >"$dir/port"
      if as_pg "$pgbin/pg_ctl" -D "$h/data" -l "$h/server.log" -w -t 60 \
        -o "-p $port -k $h -c listen_addresses=127.0.0.1 -c max_connections=200 $durability" \
        start >/dev/null; then started=1; break; fi
    done
    [ -n "$started" ] || { tail -n 20 "$h/server.log" >&2; exit 1; }
    # Roles and database, on every start (idempotent), as the superuser over
    # the socket. The passwords travel on stdin, never on a command line.
    as_pg "$pgbin/psql" -h "$h" -p "$port" -U "$su" -d postgres -v ON_ERROR_STOP=1 -qAt >/dev/null <<SQL
SELECT 'CREATE ROLE herald' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald')\gexec
ALTER ROLE herald LOGIN NOSUPERUSER CREATEROLE PASSWORD '$owner_pw';
SELECT 'CREATE ROLE herald_app' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'herald_app')\gexec
ALTER ROLE herald_app LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB PASSWORD '$runtime_pw';
SELECT 'CREATE DATABASE herald OWNER herald' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'herald')\gexec
SQL
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
  runtime-url)
    runtime_url_of
    ;;
  *) echo "usage: $0 start|stop|remove|url|runtime-url DIR" >&2; exit 2 ;;
esac
