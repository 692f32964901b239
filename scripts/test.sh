#!/usr/bin/env bash
# make test: lint (gofmt, vet, staticcheck, workflowcheck), then every test with the race detector against a real
# PostgreSQL and a real Temporal dev server. Both are started here (and
# stopped afterwards) unless HERALD_DATABASE_URL / TEMPORAL_ADDRESS are set.
set -euo pipefail
# go.mod's toolchain, which a go command set to GOTOOLCHAIN=local would ignore.
export GOTOOLCHAIN=go1.27.3
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
state="$root/.dev/test"
mkdir -p "$state"

started_pg=""; started_temporal=""
cleanup() {
  [ -n "$started_temporal" ] && scripts/temporal.sh stop "$state/temporal" || true
  [ -n "$started_pg" ] && scripts/pg.sh remove "$state/pg" || true
}
trap cleanup EXIT

if [ -z "${HERALD_DATABASE_URL:-}" ]; then
  scripts/pg.sh remove "$state/pg"
  HERALD_DATABASE_URL=$(scripts/pg.sh start "$state/pg"); started_pg=1
  export HERALD_DATABASE_URL
fi
if [ -z "${TEMPORAL_ADDRESS:-}" ]; then
  rm -rf "$state/temporal"
  TEMPORAL_ADDRESS=$(scripts/temporal.sh start "$state/temporal" --headless); started_temporal=1
  # The server's own counters, which the bench's tests read.
  TEMPORAL_METRICS_URL="http://127.0.0.1:$(cat "$state/temporal/metrics-port")/metrics"
  export TEMPORAL_ADDRESS TEMPORAL_METRICS_URL
fi
echo "PostgreSQL: $HERALD_DATABASE_URL"
echo "Temporal:   $TEMPORAL_ADDRESS"

# make lint: gofmt, vet, staticcheck, workflowcheck.
scripts/lint.sh
echo "== promtool (deploy/prometheus)"
if command -v promtool >/dev/null 2>&1; then
  promtool check rules deploy/prometheus/alerts.yml
  promtool test rules deploy/prometheus/alerts_test.yml
else
  echo "promtool not installed: alert rules NOT checked (apt-get install prometheus)"
fi
echo "== go test -race"
go test -race -count=1 -timeout 20m "${@:-./...}"
if [ $# -eq 0 ]; then
  echo "== go test -race ./workflows, first attempts as regular activities (runs recorded before workflows.FirstAttemptChange)"
  go test -race -count=1 ./workflows -args -regular-first-attempt
fi
