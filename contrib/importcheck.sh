#!/usr/bin/env bash
# Checks the import rules docs/ARCHITECTURE.md states, with `go list -deps`:
# each line below names packages and what they must never link, directly or
# through anything they import. `make test` runs it; a broken rule fails CI.
set -euo pipefail
cd "$(dirname "$0")/.."

sqlite='modernc\.org/sqlite'
fuse='github\.com/hanwen/go-fuse'
runc='github\.com/opencontainers/runc'
daemon='computerd/computerd(/|$)'
cli='computerd/agentctl(/|$)'

# package pattern | forbidden import paths (extended regexp; . forbids all
# but the standard library)
rules=$(cat <<RULES
./core            | .
./wire            | ^computerd/(fsstore|syncproto|computerd|agentctl)(/|$)|$sqlite|$fuse|$runc
./fsstore         | ^computerd/(syncproto|wire|computerd|agentctl)(/|$)|$fuse|$runc
./syncproto       | ^$daemon|^$cli|$fuse|$runc
./agentctl/...    | ^computerd/(fsstore|syncproto)(/|$)|^$daemon|$sqlite|$fuse|$runc
./client          | ^computerd/(fsstore|syncproto)(/|$)|^$daemon|^$cli|$sqlite|$fuse|$runc
./tools           | ^computerd/(fsstore|syncproto)(/|$)|^$daemon|^$cli|$sqlite|$fuse|$runc
./mcpserver       | ^computerd/(fsstore|syncproto)(/|$)|^$daemon|^$cli|$sqlite|$fuse|$runc
./computerd/...   | ^$cli
./computerd/loopfs | ^computerd/
./internal/testheap | .
./internal/version | .
./internal/durable | .
./internal/clihelp | ^computerd/
./internal/powercut | ^computerd/
RULES
)

status=0
while IFS='|' read -r pkgs forbidden; do
	pkgs=$(echo "$pkgs" | xargs) forbidden=$(echo "$forbidden" | xargs)
	for p in $(go list "$pkgs"); do
		# The package's non-standard dependencies, itself excluded.
		bad=$(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' "$p" | grep -vx "$p" | grep -E "$forbidden" || true)
		if [[ -n "$bad" ]]; then
			echo "import rule broken: $p links" $bad >&2
			status=1
		fi
	done
done <<<"$rules"
exit $status
