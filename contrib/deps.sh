#!/usr/bin/env bash
# Installs what the tests and the demo call that a fresh Debian machine with
# Go and gcc may lack (as root, through apt-get). Does nothing when all is there.
set -euo pipefail
declare -A pkg=([git]=git [python3]=python3 [pgrep]=procps [tar]=tar [make]=make [gcc]=gcc [mount]=mount [mkfs.ext4]=e2fsprogs)
missing=()
for tool in "${!pkg[@]}"; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("${pkg[$tool]}")
done
((${#missing[@]})) || exit 0
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
	echo "missing: ${missing[*]} (install them, or run as root on Debian)" >&2
	exit 1
fi
echo "installing: ${missing[*]}" >&2
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
