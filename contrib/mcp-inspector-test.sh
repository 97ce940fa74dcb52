#!/usr/bin/env bash
# Checks computerd's MCP server against another implementation of the
# protocol: the MCP inspector's command-line client (npm
# @modelcontextprotocol/inspector, pinned below) lists and calls tools
# through both transports, stdio (`agentctl mcp WS`, configured through
# COMPUTER_URL and COMPUTER_TOKEN as a harness would) and streamable HTTP
# (/v1/mcp?workspace=WS with a bearer header). `make test` runs it after
# the Go tests. It installs the inspector into a cache directory once
# (node and npm through apt-get when they are missing, as root on Debian),
# builds computerd and agentctl, and serves a fresh data directory.
# Without root (no sandbox) the exec call is left out.
set -euo pipefail
cd "$(dirname "$0")/.."

# 0.16.8: its CLI takes --header (0.15.0, the last release that declares no
# Node version, does not). npm warns that it asks for Node >= 22.7.5; its
# CLI runs on Node 20 (Debian's, and CI's), which every run of this checks.
VERSION=0.16.8
CACHE=${MCP_INSPECTOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/computerd/mcp-inspector-$VERSION}
# A free port unless told (python3 is among what make deps installs).
PORT=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		echo "mcp-inspector-test: needs node and npm (install them, or run as root on Debian)" >&2
		exit 1
	fi
	echo "installing: nodejs npm" >&2
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
INSPECTOR="$CACHE/node_modules/.bin/mcp-inspector"
if [[ ! -x $INSPECTOR ]]; then
	mkdir -p "$CACHE"
	npm install --prefix "$CACHE" --no-audit --no-fund --no-save --loglevel=error --engine-strict=false \
		"@modelcontextprotocol/inspector@$VERSION" >&2
fi

WORK=$(mktemp -d)
SERVER=
cleanup() {
	if [[ -n $SERVER ]]; then
		kill "$SERVER" 2>/dev/null || true
		wait "$SERVER" 2>/dev/null || true
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT
go build -o "$WORK/computerd" ./computerd
go build -o "$WORK/computerd-sandbox" ./computerd/sandboxd
go build -o "$WORK/agentctl" ./agentctl

"$WORK/computerd" serve --data "$WORK/data" --listen "127.0.0.1:$PORT" --metrics-listen "" --quiet &
SERVER=$!
export COMPUTER_URL="http://127.0.0.1:$PORT"
export COMPUTER_TOKEN=$("$WORK/computerd" token create --init --data "$WORK/data" inspector)
for _ in $(seq 100); do
	kill -0 "$SERVER" 2>/dev/null || { echo "mcp-inspector-test: computerd did not start" >&2; exit 1; }
	"$WORK/agentctl" ws ls >/dev/null 2>&1 && break
	sleep 0.1
done
"$WORK/agentctl" ws create w >/dev/null

# inspect TRANSPORT ARGS...: one inspector call through stdio or http.
inspect() {
	local transport=$1
	shift
	if [[ $transport == stdio ]]; then
		timeout 60 "$INSPECTOR" --cli "$WORK/agentctl" mcp w "$@"
	else
		timeout 60 "$INSPECTOR" --cli "$COMPUTER_URL/v1/mcp?workspace=w" --transport http \
			--header "Authorization: Bearer $COMPUTER_TOKEN" "$@"
	fi
}

# expect TRANSPORT WANT ARGS...: the call's JSON answer must contain WANT.
fails=0
expect() {
	local transport=$1 want=$2
	shift 2
	local out
	if ! out=$(inspect "$transport" "$@" 2>&1) || [[ $out != *"$want"* ]]; then
		echo "FAIL $transport $*: want $want in:" >&2
		echo "$out" >&2
		fails=$((fails + 1))
		return
	fi
	echo "ok   $transport $*"
}

for t in stdio http; do
	expect "$t" '"exec_show"' --method tools/list
	expect "$t" "wrote $t.txt" --method tools/call --tool-name write --tool-arg "path=$t.txt" "content=hello over $t"
	expect "$t" "1\\thello over $t" --method tools/call --tool-name read --tool-arg "path=$t.txt"
	expect "$t" '"isError": true' --method tools/call --tool-name read --tool-arg path=missing.txt
	expect "$t" 'error (not_found)' --method tools/call --tool-name read --tool-arg path=missing.txt
	if [[ $(id -u) == 0 && -e /dev/fuse ]]; then
		expect "$t" '"exit_code": 0' --method tools/call --tool-name exec --tool-arg "command=cat $t.txt"
	fi
done
expect http "forked w" --method tools/call --tool-name fork --tool-arg name=w2
expect stdio "1\\thello over http" --method tools/call --tool-name read --tool-arg path=http.txt workspace=w2
if ((fails)); then
	echo "mcp-inspector-test: $fails failed" >&2
	exit 1
fi
echo "mcp-inspector-test: the inspector $VERSION agrees over stdio and http"
