#!/usr/bin/env bash
# Pinned Temporal CLI and its dev server, for make dev, make test and CI.
#
#   scripts/temporal.sh install            build the pinned CLI into .tools/bin once; prints its path
#   scripts/temporal.sh start DIR [--headless] [start-dev flags…]
#                                          start a dev server on loopback with a SQLite file in DIR,
#                                          Herald's search attributes and otherwise the server's
#                                          default settings; further flags go to start-dev as they
#                                          are (make bench adds --dynamic-config-value
#                                          system.enableActivityEagerExecution=true for its second
#                                          configuration); prints host:port. The server's
#                                          Prometheus metrics are on loopback at the port in
#                                          DIR/metrics-port (http://127.0.0.1:PORT/metrics)
#   scripts/temporal.sh stop DIR           stop it
set -euo pipefail
# The Go release Herald builds with (go.mod's toolchain line); the go command fetches it.
export GOTOOLCHAIN=go1.27.3

version=v1.5.1
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.tools/bin/temporal"

install() {
  # go install reports no module version in the binary, so a stamp file records it.
  if [ -x "$bin" ] && [ "$(cat "$bin.version" 2>/dev/null)" = "$version" ]; then echo "$bin"; return; fi
  echo "building the Temporal CLI $version (a few minutes, once)..." >&2
  mkdir -p "$root/.tools/bin"
  GOBIN="$root/.tools/bin" GOFLAGS=-buildvcs=false go install "github.com/temporalio/cli/cmd/temporal@$version" >&2
  echo "$version" >"$bin.version"
  echo "$bin"
}

# shellcheck source=scripts/ports.sh
. "$(dirname "$0")/ports.sh"

cmd=${1:-}
case "$cmd" in
  install) install ;;
  start)
    dir=${2:?usage: $0 start DIR [--headless] [start-dev flags...]}; shift 2
    install >/dev/null
    mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then echo "127.0.0.1:$(cat "$dir/port")"; exit 0; fi
    # A restart keeps the ports (workers reconnect to the same address) while they are free.
    port=$(cat "$dir/port" 2>/dev/null || true); ui=$(cat "$dir/ui-port" 2>/dev/null || true)
    metrics=$(cat "$dir/metrics-port" 2>/dev/null || true)
    if [ -z "$port" ] || (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then port=$(free_port 25000 30999); fi
    # Each port is checked free on its own: draw again until they differ.
    while [ -z "$ui" ] || [ "$ui" = "$port" ] || (exec 3<>"/dev/tcp/127.0.0.1/$ui") 2>/dev/null; do ui=$(free_port 25000 30999); done
    # Metrics on a port of its own choosing the server would only name in
    # its log: make bench reads Temporal's own counters here.
    while [ -z "$metrics" ] || [ "$metrics" = "$port" ] || [ "$metrics" = "$ui" ] || (exec 3<>"/dev/tcp/127.0.0.1/$metrics") 2>/dev/null; do
      metrics=$(free_port 25000 30999)
    done
    echo "$port" >"$dir/port"; echo "$ui" >"$dir/ui-port"; echo "$metrics" >"$dir/metrics-port"
    uiflag=(--ui-port "$ui")
    if [ "${1:-}" = "--headless" ]; then uiflag=(--headless); shift; fi
    # No tuning of the server for Herald: its defaults (eager activity
    # execution off among them) are what a new user's server has.
    setsid "$bin" server start-dev --ip 127.0.0.1 --port "$port" "${uiflag[@]}" \
      --db-filename "$dir/temporal.db" --log-level warn --metrics-port "$metrics" \
      --search-attribute HeraldSubscription=Keyword --search-attribute HeraldApp=Keyword \
      --search-attribute HeraldEventType=Keyword --search-attribute HeraldStatus=Keyword \
      --search-attribute HeraldQueued=Int \
      "$@" >"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    for _ in $(seq 1 120); do
      if "$bin" operator cluster health --address "127.0.0.1:$port" 2>/dev/null | grep -qi serving; then
        echo "127.0.0.1:$port"; exit 0
      fi
      kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
      sleep 0.5
    done
    echo "the Temporal dev server did not come up; its log:" >&2; tail -n 30 "$dir/server.log" >&2; exit 1
    ;;
  stop)
    dir=${2:?usage: $0 stop DIR}
    if [ -f "$dir/pid" ]; then
      pid=$(cat "$dir/pid"); kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true; rm -f "$dir/pid"
    fi
    ;;
  *) echo "usage: $0 install | start DIR [--headless] [start-dev flags...] | stop DIR" >&2; exit 2 ;;
esac
