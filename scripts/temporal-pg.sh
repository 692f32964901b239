#!/usr/bin/env bash
# A Temporal server with PostgreSQL persistence, outside Docker: the setting
# of docker-compose.yml's temporal service (temporalio/server 1.29.1 on
# PostgreSQL 12+, 4 history shards, the same dynamic config), for measuring
# Herald on the persistence a production cluster uses (docs/performance.md).
#
#   scripts/temporal-pg.sh start DIR   build the server once into .tools/bin, create a
#                                      PostgreSQL cluster with default durability
#                                      (fsync on) in DIR, Temporal's schema, the
#                                      server, the default namespace and Herald's
#                                      search attributes; prints the frontend address
#                                      (its Prometheus metrics: http://127.0.0.1:$(cat
#                                      DIR/metrics-port)/metrics, for the bench's
#                                      TEMPORAL_METRICS_URL)
#   scripts/temporal-pg.sh stop DIR    stop the server and the cluster
#   scripts/temporal-pg.sh remove DIR  stop both and delete DIR
#
# Everything listens on loopback only. The PostgreSQL server refuses to run as
# root, so as root it runs as the 'postgres' user on a directory it owns.
set -euo pipefail
export GOTOOLCHAIN=go1.27.3

cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|remove DIR" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
version=v1.29.1 # the server version of docker-compose.yml
bin="$root/.tools/bin"
# shellcheck source=scripts/ports.sh
. "$root/scripts/ports.sh"

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
[ -x "$pgbin/initdb" ] || { echo "PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

install_server() {
  [ -x "$bin/temporal-server-$version" ] && [ -x "$bin/temporal-sql-tool-$version" ] && return 0
  mkdir -p "$bin"
  local tmp; tmp=$(mktemp -d)
  echo "building temporal-server $version (a few minutes, once)" >&2
  GOBIN="$tmp" go install "go.temporal.io/server/cmd/server@$version" "go.temporal.io/server/cmd/tools/sql@$version" >&2
  mv "$tmp/server" "$bin/temporal-server-$version"
  mv "$tmp/sql" "$bin/temporal-sql-tool-$version"
  rm -rf "$tmp"
}

schema_dir() {
  local d; d="$(go env GOMODCACHE)/go.temporal.io/server@$version/schema/postgresql/v12"
  [ -d "$d" ] || go mod download "go.temporal.io/server@$version" >&2
  echo "$d"
}

start() {
  install_server
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local pgdir="$dir/pg"
  if [ ! -d "$pgdir/data" ]; then
    mkdir -p "$pgdir"
    [ "$(id -u)" = 0 ] && chown postgres "$pgdir"
    as_pg "$pgbin/initdb" -D "$pgdir/data" -U postgres --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  fi
  local pgport; pgport=$(free_port 25000 26999)
  echo "$pgport" >"$dir/pg.port"
  as_pg "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/server.log" -w \
    -o "-p $pgport -k $pgdir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
  local pw
  if [ -f "$dir/temporal.password" ]; then pw=$(cat "$dir/temporal.password"); else
    pw=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'); (umask 077; echo "$pw" >"$dir/temporal.password"); fi
  as_pg "$pgbin/psql" -h "$pgdir" -p "$pgport" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAt >/dev/null <<SQL
SELECT 'CREATE ROLE temporal' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'temporal')\gexec
ALTER ROLE temporal LOGIN CREATEDB PASSWORD '$pw';
SQL
  local schema; schema=$(schema_dir)
  local sql=("$bin/temporal-sql-tool-$version" --plugin postgres12 --ep 127.0.0.1 -p "$pgport" -u temporal --pw "$pw")
  for db in temporal temporal_visibility; do
    "${sql[@]}" --db "$db" create-database >/dev/null 2>&1 || true # exists after a restart
    "${sql[@]}" --db "$db" setup-schema -v 0.0 >"$dir/schema.log" 2>&1
  done
  "${sql[@]}" --db temporal update-schema -d "$schema/temporal/versioned" >>"$dir/schema.log" 2>&1
  "${sql[@]}" --db temporal_visibility update-schema -d "$schema/visibility/versioned" >>"$dir/schema.log" 2>&1

  # The server's ports: frontend gRPC and HTTP, and a gRPC and a membership
  # port for each of the four services. Its metrics port is checked free on
  # its own, outside that run: the server only warns when it cannot bind
  # it, and the bench would then read another server's counters.
  local base; base=$(free_port 27000 27900)
  local fe=$base
  local metrics; metrics=$(free_port 27910 27999)
  echo "$metrics" >"$dir/metrics-port"
  mkdir -p "$dir/config/dynamicconfig"
  cp "$root/deploy/temporal/dynamicconfig.yaml" "$dir/config/dynamicconfig/herald.yaml"
  cat >"$dir/config/herald.yaml" <<YAML
log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: 4
  datastores:
    default:
      sql:
        pluginName: postgres12
        databaseName: temporal
        connectAddr: 127.0.0.1:$pgport
        connectProtocol: tcp
        user: temporal
        password: "$pw"
        maxConns: 20
        maxIdleConns: 20
        maxConnLifetime: 1h
    visibility:
      sql:
        pluginName: postgres12
        databaseName: temporal_visibility
        connectAddr: 127.0.0.1:$pgport
        connectProtocol: tcp
        user: temporal
        password: "$pw"
        maxConns: 10
        maxIdleConns: 10
        maxConnLifetime: 1h
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
  metrics:
    prometheus:
      framework: tally
      listenAddress: 127.0.0.1:$metrics
services:
  frontend:
    rpc: {grpcPort: $fe, membershipPort: $((base + 1)), bindOnLocalHost: true, httpPort: $((base + 2))}
  history:
    rpc: {grpcPort: $((base + 3)), membershipPort: $((base + 4)), bindOnLocalHost: true}
  matching:
    rpc: {grpcPort: $((base + 5)), membershipPort: $((base + 6)), bindOnLocalHost: true}
  worker:
    rpc: {grpcPort: $((base + 7)), membershipPort: $((base + 8)), bindOnLocalHost: true}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: 127.0.0.1:$fe
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: $dir/config/dynamicconfig/herald.yaml
  pollInterval: 10s
YAML
  nohup "$bin/temporal-server-$version" -r "$dir" -c config -e herald --allow-no-auth start \
    >"$dir/server.log" 2>&1 </dev/null &
  echo $! >"$dir/server.pid"
  local addr="127.0.0.1:$fe" temporal="$bin/temporal"
  [ -x "$temporal" ] || temporal=$("$root/scripts/temporal.sh" install)
  for _ in $(seq 1 120); do
    if "$temporal" operator cluster health --address "$addr" >/dev/null 2>&1; then break; fi
    kill -0 "$(cat "$dir/server.pid")" 2>/dev/null || { tail -n 30 "$dir/server.log" >&2; exit 1; }
    sleep 1
  done
  "$temporal" operator namespace describe --address "$addr" --namespace default >/dev/null 2>&1 \
    || "$temporal" operator namespace create --address "$addr" --namespace default --retention 72h >/dev/null
  for sa in HeraldSubscription=Keyword HeraldApp=Keyword HeraldEventType=Keyword HeraldStatus=Keyword HeraldQueued=Int; do
    "$temporal" operator search-attribute create --address "$addr" --namespace default \
      --name "${sa%%=*}" --type "${sa#*=}" >/dev/null 2>&1 || true # exists after a restart
  done
  echo "$addr"
}

stop() {
  [ -d "$dir" ] || return 0
  if [ -f "$dir/server.pid" ]; then
    local pid; pid=$(cat "$dir/server.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/server.pid"
  fi
  [ -d "$dir/pg/data" ] && as_pg "$pgbin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  remove) stop; rm -rf "$dir" ;;
  *) echo "usage: $0 start|stop|remove DIR" >&2; exit 2 ;;
esac
