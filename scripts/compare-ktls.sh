#!/usr/bin/env bash
# Kernel TLS against the userspace record layer, the same engine build and
# files: ktls = "require" (promotion after promote_after, then sendfile)
# against ktls = "off" (everything sealed in userspace).
#
#   scripts/compare-ktls.sh [repeats]        (default 3)
#
# Rows: one curl --http1.1 download of a 100 MiB file (MiB/s, 5 per
# repeat) and 16 connections for 10 s with wrk (MiB/s), plus server CPU
# seconds per GiB on the wrk row, the two modes interleaved. It needs a
# kernel with kernel TLS (engine preflight says whether this one has it;
# the VM the tests use proves correctness but emulates the CPU, so measure
# on real hardware). Needs wrk, curl and openssl.
set -euo pipefail
. "$(dirname "$0")/measure-lib.sh"
repeats=${1:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
for tool in wrk curl openssl; do
	command -v $tool >/dev/null || { echo "missing $tool: apt-get install wrk curl openssl" >&2; exit 2; }
done
work=$(mktemp -d /tmp/engine-ktls-compare.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/www"
head -c 100M /dev/urandom >"$work/www/big.bin"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
	-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" -days 2 2>/dev/null
(cd "$here" && go build -o "$work/engine" ./cmd/engine)
declare -A port=([kernel]=8471 [userspace]=8472) mode=([kernel]=require [userspace]=off) pid=()
for m in kernel userspace; do
	printf 'listen = "127.0.0.1:%s"\n[[sites]]\ndomain = "*"\nroot = "%s"\n[sites.tls]\ncert = "%s"\nkey = "%s"\n[kernel]\nktls = "%s"\npromote_after = "1MiB"\n' \
		"${port[$m]}" "$work/www" "$work/cert.pem" "$work/key.pem" "${mode[$m]}" >"$work/$m.toml"
	if [ "$m" = kernel ] && ! "$work/engine" preflight -c "$work/$m.toml" >"$work/preflight.txt"; then
		cat "$work/preflight.txt" >&2
		echo "this kernel cannot do kernel TLS: run this on one that can (see the report above)" >&2
		exit 1
	fi
	"$work/engine" serve -c "$work/$m.toml" 2>"$work/$m.log" &
	pid[$m]=$!
	pids+=($!)
done
sleep 1
hz=$(getconf CLK_TCK)
results="$work/results"
: >"$results"
for r in $(seq 1 "$repeats"); do
	if [ $((r % 2)) = 1 ]; then order="kernel userspace"; else order="userspace kernel"; fi
	for i in 1 2 3 4 5; do
		for m in $order; do
			bps=$(curl -sk --http1.1 -o /dev/null -w '%{speed_download}' "https://127.0.0.1:${port[$m]}/big.bin")
			echo "single $m $(awk -v b="$bps" 'BEGIN{printf "%.1f", b/1048576}')" >>"$results"
		done
	done
	for m in $order; do
		c0=$(cpu_ticks "${pid[$m]}")
		mib=$(wrk -t2 -c16 -d10s "https://127.0.0.1:${port[$m]}/big.bin" | awk '/Transfer\/sec/{print $2}' | to_mib)
		c1=$(cpu_ticks "${pid[$m]}")
		echo "bulk16 $m $mib" >>"$results"
		echo "cpu_s_per_gib $m $(awk -v c=$((c1 - c0)) -v hz=$hz -v m="$mib" 'BEGIN{printf "%.3f", (c/hz)/(m*10/1024)}')" >>"$results"
	done
done
echo "machine: $(nproc) CPUs, $(uname -r); $("$work/engine" version); repeats: $repeats, medians"
awk "$MEDIAN_AWK"'
{ v[$1" "$2] = v[$1" "$2] " " $3 }
END {
	printf "%-14s %12s %12s %8s\n", "row", "kernel", "userspace", "ratio"
	split("single bulk16 cpu_s_per_gib", rows, " ")
	for (i = 1; i <= 3; i++) { k = rows[i]; a = median(v[k" kernel"]); b = median(v[k" userspace"]); printf "%-14s %12.3f %12.3f %8.3f\n", k, a, b, a / b }
}' "$results"
