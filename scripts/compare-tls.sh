#!/usr/bin/env bash
# Side-by-side HTTPS (HTTP/1.1, TLS 1.3, TLS_AES_128_GCM_SHA256) measurement
# of engine, nginx and Caddy on this machine, with one certificate.
#
#   scripts/compare-tls.sh [repeats]          (default 3)
#
# Rows, every server in the same loop, the order rotating each repeat:
#   single  one curl --http1.1 download of a 100 MiB file (MiB/s; 5 per repeat)
#   bulk16  16 connections downloading it for 10 s with wrk (MiB/s)
# plus server CPU seconds per GiB on bulk16. Prints medians, ranges and
# ratios to nginx and to Caddy. The engine runs with ktls = "auto": on a
# kernel without kernel TLS that is its userspace record layer; set
# ENGINE_KTLS=off or require to choose. Needs nginx, wrk, curl, openssl and
# a caddy binary (CADDY=path, or on PATH; build it with
# GOBIN=DIR go install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9).
set -euo pipefail
. "$(dirname "$0")/measure-lib.sh"
repeats=${1:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
peers=${PEERS:-$here/bench/compare/peers}
caddy=${CADDY:-$(command -v caddy || true)}
ktls=${ENGINE_KTLS:-auto}
for tool in nginx wrk curl openssl; do
	command -v $tool >/dev/null || { echo "missing $tool: apt-get install nginx wrk curl openssl" >&2; exit 2; }
done
[ -x "$caddy" ] || { echo "no caddy binary (set CADDY=path)" >&2; exit 2; }

work=$(mktemp -d /tmp/engine-tls-compare.XXXXXX)
chmod 755 "$work" # nginx workers run as www-data
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/www" "$work/run" "$work/logs" "$work/caddy"
head -c 100M /dev/urandom >"$work/www/big.bin"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
	-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$work/key.pem" -out "$work/cert.pem" \
	-days 2 2>/dev/null
chmod 644 "$work/key.pem"

sed -e "s#__DIR__#$work#g" -e "s#__KTLS__##" -e "s#__PLAIN_PORT__#8080#g" -e "s#__TLS_PORT__#8443#g" \
	-e "s#__TLS_NR_PORT__#8444#g" "$peers/nginx.conf.tmpl" >"$work/nginx.conf"
nginx -c "$work/nginx.conf" &
pids+=($!)
sed -e "s#__DIR__#$work#g" -e "s#__TLS_PORT__#8453#g" -e "s#__PLAIN_PORT__#8081#g" "$peers/Caddyfile.tmpl" >"$work/Caddyfile"
XDG_DATA_HOME=$work/caddy XDG_CONFIG_HOME=$work/caddy "$caddy" run --config "$work/Caddyfile" --adapter caddyfile \
	>"$work/logs/caddy.log" 2>&1 &
pids+=($!)
(cd "$here" && go build -o "$work/engine" ./cmd/engine)
cat >"$work/engine.toml" <<EOF
listen = "127.0.0.1:8452"
[[sites]]
domain = "*"
root = "$work/www"
[sites.tls]
cert = "$work/cert.pem"
key = "$work/key.pem"
[kernel]
ktls = "$ktls"
EOF
"$work/engine" serve -c "$work/engine.toml" 2>"$work/logs/engine.log" &
pids+=($!)
sleep 2
declare -A port=([nginx]=8443 [caddy]=8453 [engine]=8452)
declare -A pid=([nginx]=${pids[0]} [caddy]=${pids[1]} [engine]=${pids[2]})
for s in nginx caddy engine; do
	curl -sfk --http1.1 -o /dev/null "https://127.0.0.1:${port[$s]}/big.bin" ||
		{ echo "$s is not answering; logs in $work/logs" >&2; cat "$work/logs/"*.log >&2; exit 1; }
done

hz=$(getconf CLK_TCK)

results="$work/results"
: >"$results"
servers=(nginx caddy engine)
for r in $(seq 1 "$repeats"); do
	k=$((r % 3))
	order=("${servers[@]:k}" "${servers[@]:0:k}")
	for i in 1 2 3 4 5; do
		for s in "${order[@]}"; do
			bps=$(curl -sk --http1.1 --tlsv1.3 -o /dev/null -w '%{speed_download}' "https://127.0.0.1:${port[$s]}/big.bin")
			echo "single $s $(awk -v b="$bps" 'BEGIN{printf "%.1f", b/1048576}')" >>"$results"
		done
	done
	for s in "${order[@]}"; do
		c0=$(cpu_ticks "${pid[$s]}")
		out=$(wrk -t2 -c16 -d10s "https://127.0.0.1:${port[$s]}/big.bin")
		c1=$(cpu_ticks "${pid[$s]}")
		mib=$(echo "$out" | awk '/Transfer\/sec/{print $2}' | to_mib)
		echo "bulk16 $s $mib" >>"$results"
		echo "cpu_s_per_gib $s $(awk -v c=$((c1 - c0)) -v hz=$hz -v m="$mib" 'BEGIN{printf "%.3f", (c/hz)/(m*10/1024)}')" >>"$results"
		errs=$(echo "$out" | awk '/Non-2xx|Socket errors/' || true)
		[ -n "$errs" ] && echo "warning: $s: $errs" >&2
	done
	echo "repeat $r/$repeats done" >&2
done

echo
echo "machine: $(nproc) CPUs, $(uname -r); nginx $(nginx -v 2>&1 | sed 's/.*\///'), caddy $("$caddy" version 2>&1 | head -1) (built from v2.11.9 unless CADDY says otherwise), $("$work/engine" version); engine ktls = \"$ktls\""
grep -m1 -o 'kernel TLS unavailable[^"]*' "$work/logs/engine.log" || true
echo "repeats: $repeats (rotating order); values are medians [min-max]"
awk "$MEDIAN_AWK"'
{ v[$1" "$2] = v[$1" "$2] " " $3 }
END {
	split("single bulk16 cpu_s_per_gib", rows, " ")
	printf "%-14s %22s %22s %22s %9s %9s\n", "row", "nginx", "caddy", "engine", "e/nginx", "e/caddy"
	for (i = 1; i <= 3; i++) {
		k = rows[i]
		mn = median(v[k" nginx"]); nl = lo; nh = hi
		mc = median(v[k" caddy"]); cl = lo; ch = hi
		me = median(v[k" engine"]); el = lo; eh = hi
		f = (k == "cpu_s_per_gib") ? "%-14s %7.3f [%.3f-%.3f] %7.3f [%.3f-%.3f] %7.3f [%.3f-%.3f] %9.3f %9.3f\n" : "%-14s %8.1f [%5.0f-%5.0f] %8.1f [%5.0f-%5.0f] %8.1f [%5.0f-%5.0f] %9.3f %9.3f\n"
		printf f, k, mn, nl, nh, mc, cl, ch, me, el, eh, me / mn, me / mc
	}
}' "$results"
