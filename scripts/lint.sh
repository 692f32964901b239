#!/usr/bin/env bash
# make lint: gofmt, go vet, staticcheck (with the chaos suite's build tag, so
# its files are checked too), Temporal's workflowcheck on the workflow
# package and govulncheck (scripts/vulncheck.sh: skipped, saying so, when the
# vulnerability database is unreachable). The linters are pinned and built once into .tools/bin.
set -euo pipefail
export GOTOOLCHAIN=go1.27.3
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin="$root/.tools/bin"
staticcheck_version=v0.8.2
workflowcheck_version=v0.6.0
govulncheck_version=v1.9.0

# tool NAME MODULE VERSION: build NAME at VERSION into .tools/bin once.
tool() {
  local name=$1 module=$2 version=$3
  if [ ! -x "$bin/$name" ] || [ "$(cat "$bin/$name.version" 2>/dev/null)" != "$version" ]; then
    echo "building $name $version" >&2
    GOBIN="$bin" go install "$module@$version"
    echo "$version" >"$bin/$name.version"
  fi
}
tool staticcheck honnef.co/go/tools/cmd/staticcheck "$staticcheck_version"
tool workflowcheck go.temporal.io/sdk/contrib/tools/workflowcheck "$workflowcheck_version"
tool govulncheck golang.org/x/vuln/cmd/govulncheck "$govulncheck_version"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tools/*'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
echo "== go vet"
go vet ./...
go vet -tags chaos ./chaos/
echo "== staticcheck $staticcheck_version"
"$bin/staticcheck" -tags chaos ./...
echo "== workflowcheck $workflowcheck_version"
"$bin/workflowcheck" ./workflows/...
echo "== govulncheck $govulncheck_version"
GOVULNCHECK="$bin/govulncheck" scripts/vulncheck.sh
echo "lint: clean"
