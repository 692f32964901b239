#!/usr/bin/env bash
# make dev: the whole system on this machine with demo data.
#
# Starts (or reuses, via HERALD_DATABASE_URL / TEMPORAL_ADDRESS) PostgreSQL and
# the Temporal dev server with its Web UI, the Herald worker and the example
# subscriber; applies the example manifests, publishes demo events and prints
# where to look and how to recover a stuck key. Stays in the foreground;
# Ctrl-C stops everything it started. `scripts/dev.sh stop` stops a leftover run.
set -euo pipefail
# go.mod's toolchain, which a go command set to GOTOOLCHAIN=local would ignore.
export GOTOOLCHAIN=go1.27.3
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
state="$root/.dev"
bin="$state/bin"
mkdir -p "$state"

worker_addr=127.0.0.1:8088
subscriber_addr=127.0.0.1:8089 # the example manifests point here
api_addr=127.0.0.1:8090        # the publishing API (POST /v1/events)

stop_all() {
  for p in worker subscriber; do
    if [ -f "$state/$p.pid" ]; then kill "$(cat "$state/$p.pid")" 2>/dev/null || true; rm -f "$state/$p.pid"; fi
  done
  [ -f "$state/temporal/pid" ] && scripts/temporal.sh stop "$state/temporal" || true
  [ -f "$state/pg/home" ] && scripts/pg.sh stop "$state/pg" || true
}

if [ "${1:-}" = "stop" ]; then stop_all; exit 0; fi

port_busy() { (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; }
for a in "$worker_addr" "$subscriber_addr" "$api_addr"; do
  if port_busy "$a"; then
    echo "make dev: $a is already in use (a previous make dev? run: scripts/dev.sh stop)" >&2
    exit 1
  fi
done

trap 'echo; echo "stopping..."; stop_all' EXIT
trap 'exit 130' INT TERM

echo "== PostgreSQL"
# The throwaway cluster has two roles, as in production: herald owns the
# tables and migrates; the worker, the subscriber demo and every starter
# command below run as herald_app, which may only append to the audit trail.
# A database given in HERALD_DATABASE_URL is used for both.
owner_url=""
if [ -z "${HERALD_DATABASE_URL:-}" ]; then
  owner_url=$(scripts/pg.sh start "$state/pg")
  HERALD_DATABASE_URL=$(scripts/pg.sh runtime-url "$state/pg")
fi
export HERALD_DATABASE_URL
echo "   $HERALD_DATABASE_URL"

echo "== Temporal dev server (SQLite file in .dev/temporal, Web UI)"
ui_url=""
if [ -z "${TEMPORAL_ADDRESS:-}" ]; then
  TEMPORAL_ADDRESS=$(scripts/temporal.sh start "$state/temporal")
  ui_url="http://127.0.0.1:$(cat "$state/temporal/ui-port")"
fi
export TEMPORAL_ADDRESS
export TEMPORAL_NAMESPACE=${TEMPORAL_NAMESPACE:-default}
# The demo delivers to loopback, which the address guard refuses unless allowed.
export HERALD_ALLOW_NETWORKS=${HERALD_ALLOW_NETWORKS:-127.0.0.0/8,::1/128}
temporal_cli=$(scripts/temporal.sh install)
echo "   $TEMPORAL_ADDRESS"

echo "== building"
CGO_ENABLED=0 go build -trimpath -o "$bin/" ./workers ./starter ./examples/subscriber
starter="$bin/starter"

if ! ls "$state/keys/"*.pem >/dev/null 2>&1; then
  echo "== generating a signing key (.dev/keys, never committed)"
  "$starter" keys generate --out "$state/keys" >/dev/null
fi
if [ ! -s "$state/secret.key" ]; then
  echo "== generating a dev secret encryption key (.dev/secret.key, never committed)"
  (umask 077; head -c32 /dev/urandom | base64 >"$state/secret.key")
fi
export HERALD_SECRET_KEY="@$state/secret.key"
if [ -n "$owner_url" ]; then
  HERALD_OWNER_DATABASE_URL=$owner_url "$starter" migrate --runtime-role herald_app >/dev/null
else
  "$starter" migrate >/dev/null
fi

echo "== example subscriber on $subscriber_addr (fails subject person-3 with 422 to show holding)"
"$bin/subscriber" -addr "$subscriber_addr" -jwks "http://$worker_addr/.well-known/jwks.json" \
  -apps contacts,billing,audit-log -record "$state/received.ndjson" \
  -fail-status 422 -fail-subjects person-3 >"$state/subscriber.log" 2>&1 &
echo $! >"$state/subscriber.pid"

echo "== Herald worker on $worker_addr"
HERALD_HTTP_ADDR=$worker_addr HERALD_API_ADDR=$api_addr HERALD_SIGNING_KEY="$state/keys" \
  HERALD_TEMPORAL_UI_URL=${HERALD_TEMPORAL_UI_URL:-$ui_url} \
  HERALD_RETRY_SCHEDULE=${HERALD_RETRY_SCHEDULE:-1s,2s,4s} \
  "$bin/workers" >"$state/worker.log" 2>&1 &
echo $! >"$state/worker.pid"
for _ in $(seq 1 100); do
  curl -fsS "http://$worker_addr/readyz" >/dev/null 2>&1 && break
  kill -0 "$(cat "$state/worker.pid")" 2>/dev/null || { echo "the worker exited; its log:" >&2; tail -n 30 "$state/worker.log" >&2; exit 1; }
  sleep 0.3
done

echo "== applying examples/manifests"
"$starter" apps apply examples/manifests

echo "== publishing demo events"
for i in 1 2 3 4 5; do
  for v in 1 2 3 4; do
    "$starter" publish --app contacts --type contacts.person.updated --version 1 --subject "person-$i" \
      --data "{\"id\":\"person-$i\",\"name\":\"Person $i (v$v)\",\"email\":\"p$i@example.com\"}" >/dev/null
  done
done
for i in 1 2 3; do
  "$starter" publish --app billing --type billing.invoice.paid --version 1 --subject "invoice-$i" \
    --data "{\"invoiceId\":\"invoice-$i\",\"personId\":\"person-$i\",\"amount\":$((i * 1250)),\"currency\":\"EUR\"}" >/dev/null
done
"$starter" publish --app contacts --type contacts.person.updated --version 1 --subject person-1 --data '{"name":42}' || true

echo "== publishing over HTTP with a token of contacts (kept in .dev/api-token, never shown)"
"$starter" apps token revoke contacts dev >/dev/null 2>&1 || true # a token left by a previous run
(umask 077; "$starter" apps token create contacts --name dev 2>/dev/null >"$state/api-token")
curl -fsS -H "Authorization: Bearer $(cat "$state/api-token")" -H 'Content-Type: application/json' \
  --data '{"type":"contacts.person.updated","version":1,"subject":"person-6","data":{"id":"person-6","name":"Person 6 (HTTP)"}}' \
  "http://$api_addr/v1/events"
echo
sleep 5

echo
echo "== catalog"
"$starter" catalog
echo
echo "== status"
"$starter" status || true
echo
echo "== the subscriber received (last 10 of $(wc -l <"$state/received.ndjson" 2>/dev/null || echo 0))"
tail -n 10 "$state/subscriber.log" || true

stuck='deliver:billing:contacts.person.updated@1:person-3'
sub='billing:contacts.person.updated@1'
me=$(id -un)
cat <<MSG

Herald is running.
  Temporal UI:   ${ui_url:-"(your Temporal's UI)"}  — list stuck keys with the query  HeraldStatus="failed"
  Worker:        http://$worker_addr/readyz  /metrics  /.well-known/jwks.json
  Publish API:   POST http://$api_addr/v1/events  (token of contacts in .dev/api-token; see api/openapi.yaml)
  Console:       http://$api_addr/console  (read-only; sign in with .dev/api-token, or: starter tokens create --operator --name me)
  Logs:          .dev/worker.log  .dev/subscriber.log  (received events: .dev/received.ndjson)

In another terminal:
  export HERALD_DATABASE_URL='$HERALD_DATABASE_URL' TEMPORAL_ADDRESS=$TEMPORAL_ADDRESS HERALD_SECRET_KEY='$HERALD_SECRET_KEY' HERALD_ALLOW_NETWORKS='$HERALD_ALLOW_NETWORKS' PATH=\$PWD/.dev/bin:\$PATH

Publish over HTTP (202 with the accepted id; refusals are application/problem+json):
  curl -H "Authorization: Bearer \$(cat .dev/api-token)" -H 'Content-Type: application/json' \\
    --data '{"type":"contacts.person.updated","version":1,"subject":"person-7","data":{"id":"person-7","name":"Seven"}}' \\
    http://$api_addr/v1/events

The subscriber rejects subject person-3 (422), so that key holds as failed.
  starter status                                        # relay lag, rejections, keys per status, worker readiness
  starter deliveries --status failed                    # the stuck keys
  starter inspect --subscription $sub --subject person-3
  curl -fsS -X POST http://$subscriber_addr/control/ok              # "fix" the subscriber, then either:
  starter redeliver --subscription $sub --subject person-3 --reason "fixed the handler"
  starter cancel    --subscription $sub --subject person-3 --reason "skip it"
  starter redeliver --subscription $sub --all-failed --reason "fixed"   # every failed key at once
  starter pause     --subscription $sub --subject person-1 --reason "maintenance"
  starter resume    --subscription $sub --subject person-1
  starter audit --target 'deliver:*'

The same with the Temporal CLI:
  $temporal_cli workflow query  --address $TEMPORAL_ADDRESS --workflow-id '$stuck' --type state
  $temporal_cli workflow update execute --address $TEMPORAL_ADDRESS --workflow-id '$stuck' --name redeliver --input '{"actor":"$me","reason":"fixed the handler"}'   # answers what changed
  $temporal_cli workflow signal --address $TEMPORAL_ADDRESS --workflow-id '$stuck' --name redeliver --input '{"actor":"$me","reason":"fixed the handler"}'          # the same, no answer
  $temporal_cli workflow signal --address $TEMPORAL_ADDRESS --workflow-id '$stuck' --name cancel --input '{"actor":"$me","reason":"skip it"}'
  $temporal_cli workflow list   --address $TEMPORAL_ADDRESS --query 'HeraldStatus="failed"'

Ctrl-C stops everything.
MSG
wait
