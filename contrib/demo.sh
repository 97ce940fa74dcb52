#!/usr/bin/env bash
# The main job end to end: start computerd on a fresh data dir, create a
# workspace, attach a small project, change it through the file tools, run
# a command in a sandbox (streamed output, its writes as one revision),
# mount it on the host (beneath the one mount root computerd allows) and
# show the journal, the log and the diff. Run through `make demo` (as root:
# containers and FUSE).
set -euo pipefail
BIN=${BIN:-bin}
DEMO=${DEMO:-.demo}
PORT=${PORT:-7787}
rm -rf "$DEMO" && mkdir -p "$DEMO/src/pkg" "$DEMO/mnt"
MNT=$(cd "$DEMO/mnt" && pwd) # the mount root: absolute
printf 'package pkg\n\nfunc Hello() string { return "hello" }\n' > "$DEMO/src/pkg/hello.go"
printf '# demo\n' > "$DEMO/src/README.md"

"$BIN/computerd" serve --data "$DEMO/data" --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$((PORT + 1))" \
	--mount-root "$MNT" --quiet &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
export COMPUTER_URL="http://127.0.0.1:$PORT"
export COMPUTER_TOKEN=$("$BIN/computerd" token create --init --data "$DEMO/data" --scope mount demo)
# metrics GETs a page of the metrics listener (bash's /dev/tcp: no curl needed).
metrics() {
	exec 3<>"/dev/tcp/127.0.0.1/$((PORT + 1))" || return 1
	printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
	cat <&3
	exec 3<&-
}
for _ in $(seq 50); do metrics >/dev/null 2>&1 && break; sleep 0.1; done

run() { echo "\$ agentctl $*"; "$BIN/agentctl" "$@"; echo; }
run ws create demo
run attach demo "$DEMO/src"
echo 'hello from agentctl' | run write demo notes/todo.txt
run edit demo pkg/hello.go --old '"hello"' --new '"hello, world"'
run grep -n demo hello
run exec demo -- sh -c 'for i in 1 2 3; do echo "step $i: $(ls pkg)"; sleep 0.3; done; go version 2>/dev/null || true; echo built > pkg/BUILD_OK'
run execs demo
run mount demo "$MNT/demo"
echo "\$ cat $MNT/demo/pkg/BUILD_OK"; cat "$MNT/demo/pkg/BUILD_OK"; echo
echo 'written on the host' > "$MNT/demo/notes/host.txt"
run umount "$MNT/demo"
echo "\$ agentctl mount demo /usr/local/sbin   # outside the mount root: refused"
"$BIN/agentctl" mount demo /usr/local/sbin || true
echo
run ls -R demo
run log demo
run diff demo 2
run diff --stat demo 2
echo "\$ curl 127.0.0.1:$((PORT + 1))/metrics | grep -E '^computerd_(revisions|execs)'"
metrics | grep -E '^computerd_(revisions|execs)'
