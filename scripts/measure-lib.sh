# Shared helpers for the comparison scripts (sourced, not run).

# cpu_ticks PID: user+system clock ticks of PID and its child processes
# (nginx's workers, say).
cpu_ticks() {
	local total=0 p
	for p in $1 $(pgrep -P "$1" || true); do
		total=$((total + $(awk '{print $14+$15}' /proc/$p/stat)))
	done
	echo $total
}

# to_mib: wrk's "Transfer/sec" value (1.23GB, 800.5MB, ...) in MiB.
to_mib() {
	awk '{v=$1; u=$1; sub(/[0-9.]+/,"",u); sub(/[A-Za-z]+/,"",v);
		m=(u=="GB")?1024:(u=="MB")?1:(u=="KB")?1/1024:1/1048576; printf "%.1f\n", v*m}'
}

# MEDIAN_AWK defines median(list), setting lo and hi, for report programs.
MEDIAN_AWK='
function median(list,   a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	lo = a[1]; hi = a[n]
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}'
