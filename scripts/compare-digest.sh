#!/usr/bin/env bash
# Hashing throughput of engine digest against b3sum on the same tree, in
# the same run (interleaved, medians), and the CPU the server spends
# hashing what it serves.
#
#   scripts/compare-digest.sh [GiB] [repeats]     (default 4 GiB, 5 repeats)
#
# The tree is GiB files of 1 GiB of random bytes, read once beforehand so
# both tools hash from the page cache. Needs b3sum (apt-get install b3sum)
# and curl.
set -euo pipefail
gib=${1:-4}
repeats=${2:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
for tool in b3sum curl; do
	command -v $tool >/dev/null || { echo "missing $tool: apt-get install b3sum curl" >&2; exit 2; }
done
work=$(mktemp -d /tmp/engine-digest-compare.XXXXXX)
spid=""
cleanup() { [ -n "$spid" ] && kill "$spid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/tree"
files=()
for i in $(seq 1 "$gib"); do
	head -c 1G /dev/urandom >"$work/tree/f$i.bin"
	files+=("f$i.bin")
done
(cd "$here" && go build -o "$work/engine" ./cmd/engine)
cat "$work/tree/"* >/dev/null
now() { date +%s.%N; }
: >"$work/times"
for r in $(seq 1 "$repeats"); do
	s=$(now); "$work/engine" digest --root "$work/tree" -o "$work/engine.sums" 2>/dev/null; e=$(now)
	echo "engine $(awk -v a="$s" -v b="$e" 'BEGIN{print b-a}')" >>"$work/times"
	s=$(now); (cd "$work/tree" && b3sum "${files[@]}" >"$work/b3sum.sums"); e=$(now)
	echo "b3sum $(awk -v a="$s" -v b="$e" 'BEGIN{print b-a}')" >>"$work/times"
done
cmp -s "$work/engine.sums" "$work/b3sum.sums" || { echo "the manifests differ!" >&2; exit 1; }
echo "machine: $(nproc) CPUs, $(uname -r); $("$work/engine" version); $(b3sum --version)"
echo "tree: $gib x 1 GiB; repeats: $repeats (interleaved); manifests identical"
awk -v gib="$gib" '
{ v[$1] = v[$1] " " $2 }
function median(list,   a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END {
	e = median(v["engine"]); b = median(v["b3sum"])
	printf "engine digest  median %.3f s  %.2f GiB/s\nb3sum          median %.3f s  %.2f GiB/s\nratio (engine/b3sum throughput) %.3f\n", e, gib / e, b, gib / b, b / e
}' "$work/times"

# The server: one round of downloads that queues hashing every file, and
# a second round with the digests known; the difference is the hashing.
"$work/engine" serve --root "$work/tree" --listen 127.0.0.1:8556 2>"$work/serve.log" &
spid=$!
sleep 1
ticks() { awk '{print $14+$15}' /proc/$spid/stat; }
hz=$(getconf CLK_TCK)
c0=$(ticks)
for f in "${files[@]}"; do curl -s -o /dev/null "http://127.0.0.1:8556/$f"; done
for f in "${files[@]}"; do until curl -sI "http://127.0.0.1:8556/$f" | grep -qi '^repr-digest'; do sleep 0.05; done; done
c1=$(ticks)
for f in "${files[@]}"; do curl -s -o /dev/null "http://127.0.0.1:8556/$f"; done
c2=$(ticks)
awk -v a=$((c1 - c0)) -v b=$((c2 - c1)) -v hz="$hz" -v gib="$gib" 'BEGIN {
	printf "server: serving + hashing %d GiB: %.2f CPU s; serving again (digests known): %.2f CPU s\n", gib, a / hz, b / hz
	printf "server CPU spent hashing: %.3f s per GiB served for the first time (once per file; cached after)\n", (a - b) / hz / gib
}'
