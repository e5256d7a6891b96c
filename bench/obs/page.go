package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/internal/stats"
)

// results is what a run measured, per configuration (in the order of
// variants), and what the page says of the run.
type results struct {
	command  string
	when     time.Time
	preamble string // bench.Harness.Preamble: the engine, the machine
	treeNote string // bench.Harness.TreeNote
	pinned   string // bench.PinSelf's sentence
	repeats  int
	duration time.Duration
	conns    int
	rate     float64
	// nginx and wrk are their versions; "" when not installed.
	nginx, wrk string
	variants   []variant
	wrps, wcpu [][]float64 // wrk: req/s, server µs per request
	cpu, p99   [][]float64 // engine bench: server µs per request, p99 ms
	logged     []int64
	dropped    []float64
}

// nginxAbout and wrkAbout are the peers' versions, "" when not
// installed (wrk -v prints its version with its usage, and exits 1).
func nginxAbout(bin string) string {
	if bin == "" {
		return ""
	}
	return bench.FirstLine(bin, "-v")
}

func wrkAbout(bin string) string {
	if bin == "" {
		return ""
	}
	return bench.FirstLine(bin, "-v")
}

// The configurations the page gives: every setting bench/obs writes (see
// startEngine and startNginx), the rest being each server's default.
const (
	engineConfig = "`listen = \"127.0.0.1:0\"`, `workers = 1`, `root`; per configuration `access_log = FILE` with `access_log_format = \"combined\"` or `\"json\"`, or no access log; `[admin] listen = \"127.0.0.1:0\"` for the scraper; every other key at its default; started as `taskset -c 1 engine serve -c FILE`"
	nginxConfig  = "`worker_processes 1; daemon off; events { worker_connections 4096; } http { sendfile on; tcp_nopush on; keepalive_requests 1000000; server { listen 127.0.0.1:PORT; root ROOT; } }` with `access_log off;` or `access_log FILE combined;` (unbuffered: a write(2) per line), `user root;` when run as root, its pid, error log and temporary paths in the work directory; no other directive (Debian's /etc/nginx is not read); started as `taskset -c 1 nginx -c FILE`"
)

// render writes the page.
func render(r results) string {
	var b strings.Builder
	bench.WriteHead(&b, "What observability costs: access logs and /metrics", r.command, r.when, r.preamble, r.treeNote)
	fmt.Fprintf(&b, "%s\n\n", r.pinned)
	b.WriteString("Configurations (every setting bench/obs writes; the rest at each server's default):\n\n")
	fmt.Fprintf(&b, "- **engine**: %s.\n", engineConfig)
	if r.nginx != "" {
		fmt.Fprintf(&b, "- **nginx**: %s; %s.\n", r.nginx, nginxConfig)
	} else {
		b.WriteString("- **nginx**: not installed (`apt-get install nginx`): no reference rows.\n")
	}
	if r.wrk != "" {
		fmt.Fprintf(&b, "- **wrk**: %s, run as `wrk -t1 -c%d -d%ds -s done.lua URL` (a Lua done() hook prints its counters).\n", r.wrk, r.conns, int(r.duration.Seconds()))
	} else {
		b.WriteString("- **wrk**: not installed (`apt-get install wrk`): no closed-loop figures.\n")
	}
	b.WriteString("- **engine bench**: the harness's own client, from the same tree as the engine, in its process.\n\n")
	fmt.Fprintf(&b, "A 1 KiB file over plain HTTP/1.1 on %d keep-alive connections, one server process per configuration (the engine with `workers = 1`; nginx with one worker), all started at once and measured in turns: in each of the %d rounds every configuration runs once with each client, and the order rotates so each takes every place. The logs go to files in `os.MkdirTemp`'s directory; the scraper (a goroutine of the harness, on the client's CPU) reads the whole `/metrics` body every 100 ms. Server CPU is utime+stime of the server's processes over the measured time, per response.\n\n", r.conns, r.repeats)
	if r.wrk != "" {
		fmt.Fprintf(&b, "## Requests per second, closed loop (wrk)\n\n")
		fmt.Fprintf(&b, "`wrk -t1 -c%d -d%v`: wrk, written in C, keeps %d requests in flight and drives the server to what it can do on its CPU; it checks statuses and byte counts only (every run had no error, no status of 400 or above, and between 1,024 and 1,024+head bytes per response), not the bytes themselves: the verified figures are in the next table.\n\n", r.conns, r.duration, r.conns)
		fmt.Fprintf(&b, "| configuration | req/s (median) | range | vs off | server CPU µs/request (median) | vs off |\n|---|---:|---:|---:|---:|---:|\n")
		for i, v := range r.variants {
			o := base(r.variants, i)
			fmt.Fprintf(&b, "| %s | %.0f | %.0f–%.0f | %.3f | %.2f | %.3f |\n", v.name, stats.Median(r.wrps[i]), stats.Min(r.wrps[i]), stats.Max(r.wrps[i]),
				stats.Median(r.wrps[i])/stats.Median(r.wrps[o]), stats.Median(r.wcpu[i]), stats.Median(r.wcpu[i])/stats.Median(r.wcpu[o]))
		}
	}
	fmt.Fprintf(&b, "\n## CPU per request at a fixed rate, every response verified (engine bench)\n\n")
	fmt.Fprintf(&b, "`engine bench --rate %.0f --connections %d --duration %v` (open loop: the same %.0f requests per second offered to every configuration, %v after a 1 s warm-up), in the harness's process: every response's length and BLAKE3 are checked, and a run with one wrong or failed response, or below 97%% of the offered rate, stops the harness. With the load fixed, the difference in server CPU per request is what the log line or the scrapes cost; at this rate a scrape every 100 ms is spread over %.0f requests.\n\n", r.rate, r.conns, r.duration, r.rate, r.duration, r.rate/10)
	fmt.Fprintf(&b, "| configuration | server CPU µs/request (median) | range | vs off | p99 latency ms (median) | lines logged | lines dropped |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for i, v := range r.variants {
		lines, drops := "–", "–"
		if v.log != "" {
			lines = strconv.FormatInt(r.logged[i], 10)
		}
		if !v.nginx {
			drops = strconv.FormatFloat(r.dropped[i], 'f', 0, 64)
		}
		o := base(r.variants, i)
		fmt.Fprintf(&b, "| %s | %.2f | %.2f–%.2f | %.3f | %.2f | %s | %s |\n", v.name, stats.Median(r.cpu[i]), stats.Min(r.cpu[i]), stats.Max(r.cpu[i]),
			stats.Median(r.cpu[i])/stats.Median(r.cpu[o]), stats.Median(r.p99[i]), lines, drops)
	}
	fmt.Fprintf(&b, "\n\"vs off\" is the ratio of medians to the same server's row without log or scraper (the engine's first row; nginx's for nginx, measured in the same turns as a reference for what an access log costs a server that writes each line with its own write(2)). Lines logged count every response of all runs and warm-ups (and the harness's start-up probe); lines dropped are `engine_access_log_dropped_lines_total` at the end. The machine is shared and noisy: read ratios within the min–max ranges as no difference.\n\n")
	fmt.Fprintf(&b, "Not measured here: HTTP/2 and HTTP/3 (their log lines are built the same way), TLS, a slow or full disk (`TestAccessLogSlowDisk` checks that lines are dropped and counted instead of stalling the reactor), log lines to stdout under a service manager, and more than one reactor (scrapes and the log writer are goroutines that take turns with the reactors on the same CPUs).\n")
	return b.String()
}
