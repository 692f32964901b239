#!/bin/sh
# Prepares a running Temporal server for Herald: waits until the frontend
# serves, ensures the namespace exists and registers Herald's search
# attributes in it. Every step is idempotent, so the docker-compose service
# temporal-setup runs this on every `docker compose up`.
#
# Environment:
#   TEMPORAL_ADDRESS     frontend host:port (required)
#   TEMPORAL_NAMESPACE   namespace to ensure (default: default)
#   NAMESPACE_RETENTION  retention of closed workflows when creating it (default: 72h)
#   SEARCH_ATTRIBUTES    space-separated NAME=Type pairs (required)
#   SETUP_ATTEMPTS       attempts per step, 2 s apart (default: 90)
set -eu

address=${TEMPORAL_ADDRESS:?TEMPORAL_ADDRESS must name the Temporal frontend (host:port)}
namespace=${TEMPORAL_NAMESPACE:-default}
retention=${NAMESPACE_RETENTION:-72h}
attributes=${SEARCH_ATTRIBUTES:?SEARCH_ATTRIBUTES must list NAME=Type pairs}
attempts=${SETUP_ATTEMPTS:-90}

for pair in $attributes; do
  case $pair in
    ?*=?*) ;;
    *) echo "temporal-setup: SEARCH_ATTRIBUTES entry \"$pair\" is not NAME=Type" >&2; exit 2 ;;
  esac
done

# retry runs its arguments until they succeed, at most $attempts times.
retry() {
  n=1
  until "$@"; do
    if [ "$n" -ge "$attempts" ]; then
      echo "temporal-setup: giving up after $n attempts: $*" >&2
      return 1
    fi
    n=$((n + 1))
    sleep 2
  done
}

serving() {
  temporal operator cluster health --address "$address" 2>/dev/null | grep -q SERVING
}

namespace_exists() {
  temporal operator namespace describe --namespace "$namespace" --address "$address" >/dev/null 2>&1
}

# A namespace created moments ago is not known to every part of the server
# yet (up to ~15 s); listing its search attributes works once it is.
namespace_ready() {
  temporal operator search-attribute list --namespace "$namespace" --address "$address" >/dev/null 2>&1
}

echo "temporal-setup: waiting for the Temporal frontend at $address"
retry serving

if namespace_exists; then
  echo "temporal-setup: namespace $namespace exists"
else
  echo "temporal-setup: creating namespace $namespace (retention $retention)"
  # Another set-up run may create it at the same moment: only its existence matters.
  temporal operator namespace create --namespace "$namespace" --retention "$retention" \
    --address "$address" || namespace_exists
fi

retry namespace_ready

for pair in $attributes; do
  name=${pair%%=*}
  type=${pair#*=}
  # The CLI skips an attribute that exists with this type and fails on one
  # that exists with another type.
  temporal operator search-attribute create --namespace "$namespace" --address "$address" \
    --name "$name" --type "$type"
  echo "temporal-setup: search attribute $name ($type) registered in $namespace"
done
echo "temporal-setup: done"
