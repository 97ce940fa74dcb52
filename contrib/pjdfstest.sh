#!/usr/bin/env bash
# Runs pjdfstest (github.com/pjd/pjdfstest: a POSIX file system suite that
# runs as root and switches users) against ext4 (a directory under WORK)
# and against a computerd host mount on the same machine, and prints, per
# test directory, the subtests each passed and failed (docs/FUSE.md keeps
# the figures).
#
#   contrib/pjdfstest.sh [WORK]          # default WORK: /tmp/computerd-pjdfstest
#
# Needs root, gcc, autoconf, automake and network access to clone
# pjdfstest, unless PJDFSTEST names a checkout (it is built there if
# needed). TESTS="chmod chown" runs only those test directories;
# TARGETS="computerd" (or "ext4") runs one side only. WORK must be on ext4
# for the ext4 column to mean ext4. pjdfstest is not part of computerd and
# is not committed; CI has no network, so it runs go-fuse's posixtest and
# the Go tests of each permission rule instead.
set -euo pipefail
[[ $(id -u) == 0 ]] || { echo "pjdfstest.sh: run as root (pjdfstest switches users)" >&2; exit 1; }
cd "$(dirname "$0")/.."
WORK=$(realpath -m "${1:-/tmp/computerd-pjdfstest}")
PJDFSTEST=${PJDFSTEST:-$WORK/pjdfstest}
TARGETS=${TARGETS:-ext4 computerd}
PORT=${PORT:-7797}
mkdir -p "$WORK"

if [[ ! -d $PJDFSTEST ]]; then
	git clone -q https://github.com/pjd/pjdfstest "$PJDFSTEST"
fi
if [[ ! -x $PJDFSTEST/pjdfstest ]]; then
	(cd "$PJDFSTEST" && autoreconf -ifs >/dev/null 2>&1 && ./configure -q && make -s pjdfstest)
fi
TESTS=${TESTS:-$(cd "$PJDFSTEST/tests" && for d in */; do echo "${d%/}"; done)}

# pjdfstest picks some tests by file system type (df -T): rename/22.t, that
# rename moves the ctime, runs on EXT4, UFS and ZFS only. The computerd run
# uses a copy of the tests whose configuration says EXT4, so both sides run
# the same tests.
ASEXT4=$WORK/pjdfstest-as-ext4
rm -rf "$ASEXT4" && mkdir -p "$ASEXT4"
cp -r "$PJDFSTEST/tests" "$ASEXT4/tests"
ln -s "$PJDFSTEST/pjdfstest" "$ASEXT4/pjdfstest"
echo 'fs=EXT4' >>"$ASEXT4/tests/conf"

# runsuite DIR NAME SUITE: runs every test file of $TESTS (SUITE/tests)
# with DIR as its working directory, and writes "testdir passed failed
# todo" lines to $WORK/NAME.counts, "file planned ok not-ok" lines to
# $WORK/NAME.files and the failures to $WORK/NAME.failures. A subtest a
# test file planned but never reported counts as failed; "todo" counts,
# apart from both, the failures pjdfstest itself expects on Linux
# ("not ok N # TODO ...", which prove counts as passed).
runsuite() {
	local dir=$1 name=$2 suite=$3 t out plan ok notok todo missing
	: >"$WORK/$name.counts"
	: >"$WORK/$name.failures"
	: >"$WORK/$name.files"
	for td in $TESTS; do
		local pass=0 fail=0 todos=0
		for t in "$suite/tests/$td"/*.t; do
			out=$(cd "$dir" && timeout 600 sh "$t" 2>/dev/null) || true
			plan=$(sed -n 's/^1\.\.\([0-9]*\).*/\1/p' <<<"$out" | head -1)
			ok=$(grep -c '^ok ' <<<"$out" || true)
			notok=$(grep -c '^not ok ' <<<"$out" || true)
			todo=$(grep -c '^not ok .*# TODO' <<<"$out" || true)
			echo "$td/$(basename "$t") ${plan:-0} $ok $notok" >>"$WORK/$name.files"
			missing=$((${plan:-0} - ok - notok))
			pass=$((pass + ok))
			todos=$((todos + todo))
			fail=$((fail + notok - todo + (missing > 0 ? missing : 0)))
			grep '^not ok ' <<<"$out" | grep -v '# TODO' | sed "s|^|$td/$(basename "$t"): |" >>"$WORK/$name.failures" || true
		done
		echo "$td $pass $fail $todos" >>"$WORK/$name.counts"
		echo "$name $td: $pass passed, $fail failed, $todos expected failures (TODO)" >&2
	done
}

for target in $TARGETS; do
	case $target in
	ext4)
		rm -rf "$WORK/ext4" && mkdir -p "$WORK/ext4"
		runsuite "$WORK/ext4" ext4 "$PJDFSTEST"
		;;
	computerd)
		go build -o "$WORK/bin/computerd" ./computerd
		go build -o "$WORK/bin/agentctl" ./agentctl
		rm -rf "$WORK/data" "$WORK/mnt" && mkdir -p "$WORK/mnt"
		"$WORK/bin/computerd" serve --data "$WORK/data" --listen "127.0.0.1:$PORT" --metrics-listen "" --no-exec --quiet &
		server=$!
		trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
		export COMPUTER_URL="http://127.0.0.1:$PORT"
		COMPUTER_TOKEN=$("$WORK/bin/computerd" token create --init --data "$WORK/data" pjdfstest)
		export COMPUTER_TOKEN
		for _ in $(seq 100); do "$WORK/bin/agentctl" ws ls >/dev/null 2>&1 && break; sleep 0.1; done
		"$WORK/bin/agentctl" ws create pjd >/dev/null
		"$WORK/bin/agentctl" mount pjd "$WORK/mnt" >/dev/null
		runsuite "$WORK/mnt" computerd "$ASEXT4"
		"$WORK/bin/agentctl" umount "$WORK/mnt" >/dev/null
		kill $server && wait $server 2>/dev/null || true
		trap - EXIT
		;;
	*)
		echo "pjdfstest.sh: unknown target $target (ext4, computerd)" >&2
		exit 1
		;;
	esac
done

# The table: one line per test directory, both targets side by side
# (passed / failed / TODO).
printf '| tests | ext4 | computerd |\n| --- | --- | --- |\n'
for td in $TESTS; do
	e=$(awk -v t="$td" '$1 == t { print $2 " / " $3 " / " $4 }' "$WORK/ext4.counts" 2>/dev/null || true)
	c=$(awk -v t="$td" '$1 == t { print $2 " / " $3 " / " $4 }' "$WORK/computerd.counts" 2>/dev/null || true)
	printf '| %s | %s | %s |\n' "$td" "${e:--}" "${c:--}"
done
echo "failures: $WORK/*.failures" >&2
