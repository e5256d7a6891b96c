#!/usr/bin/env bash
# Side-by-side HTTP/1.1 measurement of engine and nginx on this machine.
#
#   scripts/compare-nginx.sh [repeats]        (default 5)
#
# Rows, each run against both servers in the same loop, alternating which
# goes first, so drifting machine speed hits both alike:
#   single  one curl download of a 100 MiB file (MiB/s; 5 per repeat)
#   bulk16  16 connections downloading it for 10 s with wrk (MiB/s)
#   small   1 KiB file, 64 keep-alive connections, 10 s of wrk (requests/s)
# plus server CPU seconds per GiB served on the bulk row. Prints medians and
# ratios engine/nginx. Needs nginx, wrk and curl (apt-get install nginx wrk
# curl). nginx is configured from bench/compare/peers/nginx.conf.tmpl (sendfile on,
# access log off).
set -euo pipefail
. "$(dirname "$0")/measure-lib.sh"
repeats=${1:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
tmpl=${NGINX_TMPL:-$here/bench/compare/peers/nginx.conf.tmpl}
for tool in nginx wrk curl openssl; do
	command -v $tool >/dev/null || { echo "missing $tool: apt-get install nginx wrk curl openssl" >&2; exit 2; }
done
[ -f "$tmpl" ] || { echo "nginx template not found at $tmpl (set NGINX_TMPL)" >&2; exit 2; }

work=$(mktemp -d /tmp/engine-compare.XXXXXX)
chmod 755 "$work" # nginx workers run as www-data
cleanup() {
	[ -n "${npid:-}" ] && kill "$npid" 2>/dev/null || true
	[ -n "${epid:-}" ] && kill "$epid" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/www" "$work/run" "$work/logs"
head -c 100M /dev/urandom >"$work/www/big.bin"
head -c 1024 /dev/urandom >"$work/www/1k.bin"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
	-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" \
	-days 2 2>/dev/null
sed -e "s#__DIR__#$work#g" -e "s#__KTLS__##" -e "s#__PLAIN_PORT__#8080#g" -e "s#__TLS_PORT__#8443#g" \
	-e "s#__TLS_NR_PORT__#8444#g" "$tmpl" >"$work/nginx.conf"
nginx -c "$work/nginx.conf" &
npid=$!
(cd "$here" && go build -o "$work/engine" ./cmd/engine)
"$work/engine" serve --root "$work/www" --listen 127.0.0.1:8081 2>"$work/logs/engine.log" &
epid=$!
sleep 1
declare -A url=([nginx]=http://127.0.0.1:8080 [engine]=http://127.0.0.1:8081)
for s in nginx engine; do
	curl -sf -o /dev/null "${url[$s]}/1k.bin" || { echo "$s is not answering" >&2; exit 1; }
done

pid_of() { [ "$1" = nginx ] && echo $npid || echo $epid; }
hz=$(getconf CLK_TCK)


results="$work/results"
: >"$results"
for r in $(seq 1 "$repeats"); do
	if [ $((r % 2)) = 1 ]; then order="nginx engine"; else order="engine nginx"; fi
	# A single download takes tens of milliseconds, so one sample is mostly
	# noise: take five per server per repeat, alternating server each time.
	for k in 1 2 3 4 5; do
		for s in $order; do
			bps=$(curl -s -o /dev/null -w '%{speed_download}' "${url[$s]}/big.bin")
			echo "single $s $(awk -v b="$bps" 'BEGIN{printf "%.1f", b/1048576}')" >>"$results"
		done
	done
	for s in $order; do
		u=${url[$s]}

		c0=$(cpu_ticks "$(pid_of $s)")
		out=$(wrk -t2 -c16 -d10s "$u/big.bin")
		c1=$(cpu_ticks "$(pid_of $s)")
		mib=$(echo "$out" | awk '/Transfer\/sec/{print $2}' | to_mib)
		echo "bulk16 $s $mib" >>"$results"
		echo "cpu_s_per_gib $s $(awk -v c=$((c1 - c0)) -v hz=$hz -v m="$mib" 'BEGIN{printf "%.3f", (c/hz)/(m*10/1024)}')" >>"$results"

		out=$(wrk -t2 -c64 -d10s "$u/1k.bin")
		echo "small $s $(echo "$out" | awk '/Requests\/sec/{print $2}')" >>"$results"
		errs=$(echo "$out" | awk '/Non-2xx|Socket errors/' || true)
		[ -n "$errs" ] && echo "warning: $s: $errs" >&2
	done
	echo "repeat $r/$repeats done" >&2
done

echo
echo "machine: $(nproc) CPUs, $(uname -r), nginx $(nginx -v 2>&1 | sed 's/.*\///'), $("$work/engine" version)"
echo "repeats: $repeats (interleaved); values are medians, [min-max]"
awk "$MEDIAN_AWK"'
{ v[$1" "$2] = v[$1" "$2] " " $3 }
END {
	split("single bulk16 small cpu_s_per_gib", rows, " ")
	unit["single"] = "MiB/s"; unit["bulk16"] = "MiB/s"; unit["small"] = "req/s"; unit["cpu_s_per_gib"] = "CPU s/GiB"
	printf "%-14s %-10s %24s %24s %8s\n", "row", "unit", "nginx", "engine", "ratio"
	for (i = 1; i <= 4; i++) {
		k = rows[i]
		mn = median(v[k" nginx"]); nlo = lo; nhi = hi
		me = median(v[k" engine"]); elo = lo; ehi = hi
		f = (k == "cpu_s_per_gib") ? "%-14s %-10s %10.3f [%.3f-%.3f] %10.3f [%.3f-%.3f] %8.3f\n" : "%-14s %-10s %10.1f [%5.0f-%5.0f] %10.1f [%5.0f-%5.0f] %8.3f\n"
		printf f, k, unit[k], mn, nlo, nhi, me, elo, ehi, (mn > 0 ? me / mn : 0)
	}
}' "$results"
