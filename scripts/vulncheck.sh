#!/usr/bin/env bash
# The govulncheck step of make lint: fails on a known vulnerability reachable
# from Herald's code, and says so (without failing) when the vulnerability
# database cannot be reached, as on a machine whose only way out is the Go
# module proxy. GOVULNCHECK_DB overrides the database (govulncheck -db), e.g.
# file:///path/to/a/mirror. An argument names another module's directory to
# check instead of Herald's (scripts/vulncheck_test.go uses one).
set -uo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "${1:-$root}"
govulncheck=${GOVULNCHECK:-$root/.tools/bin/govulncheck}
args=()
if [ -n "${GOVULNCHECK_DB:-}" ]; then args+=(-db "$GOVULNCHECK_DB"); fi

out=$("$govulncheck" "${args[@]}" ./... 2>&1)
rc=$?
case $rc in
  0) echo "govulncheck: no known vulnerability reachable" ;;
  3) echo "$out"; echo "govulncheck: vulnerabilities found" >&2; exit 1 ;;
  *)
    # The database could not be read: "fetching vulnerabilities: ..." for
    # vuln.go.dev, "creating client: ..." for a -db URL that did not answer.
    if reason=$(grep -m1 -E "^(govulncheck: )?(fetching vulnerabilities|creating client)" <<<"$out"); then
      echo "govulncheck: SKIPPED, vulnerability database unreachable (${GOVULNCHECK_DB:-https://vuln.go.dev}):"
      echo "  $reason"
      echo "  run make lint where it is reachable, or set GOVULNCHECK_DB to a mirror"
    else
      echo "$out" >&2
      exit "$rc"
    fi
    ;;
esac
