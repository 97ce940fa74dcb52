#!/usr/bin/env bash
# The product end to end, on a fresh data directory: attach a small
# project, edit it, run commands in sandboxes (streamed output, one
# revision each), read the log and a diff, fork and restore, kill -9 the
# daemon in the middle of writes and find every acknowledged one, mount
# the workspace on the host, and let an agent fix a failing test against
# a scripted model. Every command is printed so that it can be copied.
# Run through `make demo` (as root: containers and FUSE).
set -euo pipefail
BIN=${BIN:-bin}
DEMO=${DEMO:-.demo}
PORT=${PORT:-7787}
started=$(date +%s)

# A port something already answers on is refused, rather than talking to it.
for p in "$PORT" "$((PORT + 1))"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		echo "demo: port $p on 127.0.0.1 is taken by another program; run it on others: PORT=8787 make demo" >&2
		exit 1
	fi
done

rm -rf "$DEMO" && mkdir -p "$DEMO/src/pkg" "$DEMO/mnt" "$DEMO/agent"
DEMO=$(cd "$DEMO" && pwd)
MNT=$DEMO/mnt # the mount root
printf 'package pkg\n\nfunc Hello() string { return "hello" }\n' >"$DEMO/src/pkg/hello.go"
printf '# demo\n' >"$DEMO/src/README.md"
printf '#!/bin/sh\necho "hello, $1"\n' >"$DEMO/agent/greet.sh"
printf '#!/bin/sh\ngot=$(sh greet.sh world)\n[ "$got" = "Hello, world!" ] && echo PASS || { echo "FAIL: greet.sh world printed: $got"; exit 1; }\n' >"$DEMO/agent/test.sh"
go build -o "$DEMO/demomodel" ./contrib/demomodel

export COMPUTER_URL="http://127.0.0.1:$PORT"
SERVER=
MODEL=
cleanup() {
	[[ -n $MODEL ]] && kill "$MODEL" 2>/dev/null
	[[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
	true
}
trap cleanup EXIT
serve() {
	"$BIN/computerd" serve --data "$DEMO/data" --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$((PORT + 1))" \
		--mount-root "$MNT" --quiet &
	SERVER=$!
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return
		kill -0 "$SERVER" 2>/dev/null || { echo "demo: computerd serve exited" >&2; exit 1; }
		sleep 0.1
	done
	echo "demo: computerd did not answer at $COMPUTER_URL" >&2
	exit 1
}
# say prints a heading; run prints a command, quoted as a shell would
# take it, then runs it.
say() { printf '\n\033[1m## %s\033[0m\n' "$*"; }
run() {
	local line="$" a
	for a in agentctl "$@"; do
		if [[ $a =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
			line+=" $a"
		else
			line+=" '${a//\'/\'\\\'\'}'"
		fi
	done
	echo "$line"
	"$BIN/agentctl" "$@"
}

say "start computerd on a fresh data directory, make a token"
echo "\$ computerd serve --data $DEMO/data --listen 127.0.0.1:$PORT --mount-root $MNT &"
serve
echo "\$ export COMPUTER_TOKEN=\$(computerd token create --data $DEMO/data --scope mount demo)"
COMPUTER_TOKEN=$("$BIN/computerd" token create --data "$DEMO/data" --scope mount demo)
export COMPUTER_TOKEN
run status

say "a workspace: attach a project (one revision), write and edit files"
run ws create demo
run attach demo "$DEMO/src"
echo 'hello from agentctl' | run write demo notes/todo.txt
run edit demo pkg/hello.go --old '"hello"' --new '"hello, world"'
run grep -n demo hello

say "a command in a fresh container: output streams, its writes are one revision"
run exec demo -- sh -c 'for i in 1 2 3; do echo "step $i: $(ls pkg)"; sleep 0.3; done; echo built > pkg/BUILD_OK'
run execs demo
run log demo
run diff --stat demo 2 5
run diff demo 4 5

say "fork (no bytes copied) and restore (an old revision as a new one)"
run ws fork demo demo-try
run exec demo-try -- sh -c 'rm -r pkg && echo "pkg removed in the fork"'
run ls demo-try
run ls demo
run restore demo --rev 2
run ls -R demo
run log demo

say "kill -9 of computerd in the middle of writes: every acknowledged write is kept"
acked=$DEMO/acked
: >"$acked"
(
	for i in $(seq 1 100000); do
		echo "write $i" | "$BIN/agentctl" write demo "crash/w$i.txt" >/dev/null 2>&1 || exit 0
		echo "$i" >>"$acked"
	done
) &
WRITER=$!
sleep 1.5
echo "\$ kill -9 \$(pidof computerd)    # after $(wc -l <"$acked") acknowledged writes"
kill -9 "$SERVER"
wait "$SERVER" 2>/dev/null || true
wait "$WRITER" 2>/dev/null || true
n=$(wc -l <"$acked")
serve
missing=0
got=$("$BIN/agentctl" ls --json demo crash | grep -o '"w[0-9]*\.txt"' | wc -l)
while read -r i; do
	[[ $("$BIN/agentctl" read demo "crash/w$i.txt" 2>/dev/null) == "write $i" ]] || missing=$((missing + 1))
done <"$acked"
echo "after the restart: $n writes were acknowledged, $got files are there, $missing acknowledged ones missing"
((missing == 0)) || { echo "demo: acknowledged writes were lost" >&2; exit 1; }

say "the workspace as a host directory (beneath the mount root computerd allows)"
run mount demo "$MNT/demo"
echo "\$ cat $MNT/demo/pkg/hello.go"
cat "$MNT/demo/pkg/hello.go"
echo "\$ echo 'written on the host' > $MNT/demo/host.txt"
echo 'written on the host' >"$MNT/demo/host.txt"
run umount "$MNT/demo"
run read demo host.txt

say "an agent fixes a failing test (a scripted model speaking OpenAI's API)"
"$DEMO/demomodel" >"$DEMO/model.url" &
MODEL=$!
for _ in $(seq 50); do [[ -s $DEMO/model.url ]] && break; sleep 0.1; done
run ws create greet
run attach greet "$DEMO/agent"
run agent run greet "make test.sh pass" --base-url "$(cat "$DEMO/model.url")" --model scripted
run exec greet -- sh test.sh

say "done in $(($(date +%s) - started)) s"
echo "The data is in $DEMO/data; computerd stops with this script. Next: README.md,"
echo "Quickstart (your own daemon and token), docs/OPERATING.md to run it for others."
