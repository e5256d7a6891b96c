package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// wrkScript makes wrk print its own counters, exactly, in one line: its
// human summary rounds bytes to two decimals of a unit. Only done() is
// defined: a response() hook would make wrk keep every body in Lua.
const wrkScript = `-- bench/compare: print wrk's counters in one line after the run.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("compare-wrk: duration_us=%d requests=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d p99_us=%d\n",
    summary.duration, summary.requests, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout, latency:percentile(99)))
end
`

// wrkBulkRun is the shortest wrk run on a large-file row: wrk counts a
// response (and checks its status) once it is complete, and 16
// connections sharing a few GiB/s complete one large file each about
// every second.
const wrkBulkRun = 5 * time.Second

// wrkSampleLength is how long a sample's wrk run lasts: the sample's
// length, and at least wrkBulkRun on a large-file row. (A warmup run
// may be shorter: it checks nothing.)
func wrkSampleLength(r row, sample time.Duration) time.Duration {
	if r.metric == "mibps" {
		return max(sample, wrkBulkRun)
	}
	return sample
}

// wrkArgs is wrk's command line for a row: one thread per CPU, the row's
// connections, a whole number of seconds.
func wrkArgs(r row, url, script string, d time.Duration) []string {
	args := []string{"-t", strconv.Itoa(clientThreads(r.connections)), "-c", strconv.Itoa(r.connections),
		"-d", strconv.Itoa(wholeSeconds(d)) + "s", "--timeout", "30s", "-s", script}
	if r.metric == "rps" {
		args = append(args, "--latency")
	}
	return append(args, url)
}

// wrkSummary is wrk's counters, as the script prints them.
type wrkSummary struct {
	durationUS, requests, bytes                 int64
	connectErr, readErr, writeErr, status, tout int64
	p99US                                       int64
}

// parseWrk finds the script's line in wrk's output.
func parseWrk(out string) (wrkSummary, error) {
	var w wrkSummary
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "compare-wrk: ")
		if !ok {
			continue
		}
		fields := map[string]*int64{"duration_us": &w.durationUS, "requests": &w.requests, "bytes": &w.bytes,
			"connect": &w.connectErr, "read": &w.readErr, "write": &w.writeErr, "status": &w.status, "timeout": &w.tout, "p99_us": &w.p99US}
		seen := 0
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			p := fields[k]
			if p == nil {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return w, fmt.Errorf("wrk summary: %s: %v", kv, err)
			}
			*p = n
			seen++
		}
		if seen != len(fields) {
			return w, fmt.Errorf("wrk summary has %d of %d counters: %q", seen, len(fields), line)
		}
		return w, nil
	}
	return w, fmt.Errorf("wrk printed no summary line (its Lua done() did not run)")
}

// checkWrk decides whether a wrk run counts. wrk reads no body into
// anything that could hash it, so this is status and length only: no
// error of any kind (wrk counts statuses from 400 up), at least one
// response, and bytes read between every completed response's body and
// the whole responses that were completed or in flight at the end.
func checkWrk(w wrkSummary, conns int, size, respLen int64) (reason, detail string) {
	switch {
	case w.status > 0:
		return "status", fmt.Sprintf("%d responses with status 400 or above", w.status)
	case w.connectErr+w.readErr+w.writeErr > 0:
		return "socket errors", fmt.Sprintf("connect %d, read %d, write %d", w.connectErr, w.readErr, w.writeErr)
	case w.tout > 0:
		return "timeouts", fmt.Sprintf("%d requests timed out", w.tout)
	case w.requests == 0:
		return "no response", "no response completed within the run"
	case w.durationUS <= 0:
		return "timing", fmt.Sprintf("run time %d µs", w.durationUS)
	case w.bytes < w.requests*size:
		return "length", fmt.Sprintf("%d bytes read for %d responses of a %d-byte file", w.bytes, w.requests, size)
	case w.bytes > (w.requests+int64(conns))*respLen:
		return "length", fmt.Sprintf("%d bytes read, more than (%d responses + %d in flight) × %d bytes", w.bytes, w.requests, conns, respLen)
	}
	return "", ""
}

func (x *extRun) wrk(ctx context.Context, d time.Duration) extSample {
	ctx, cancel := context.WithTimeout(ctx, d+90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "wrk", wrkArgs(x.row, x.url.String(), x.env.wrkScript, d)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return rejected("wrk failed", "%v: %s", err, oneLine(out.String()))
	}
	w, err := parseWrk(out.String())
	if err != nil {
		return rejected("wrk failed", "%v", err)
	}
	if reason, detail := checkWrk(w, x.row.connections, x.size, x.respLen); reason != "" {
		return rejected(reason, "%s", detail)
	}
	secs := float64(w.durationUS) / 1e6
	s := extSample{bytes: w.bytes, requests: w.requests, p99: float64(w.p99US) / 1e3}
	if x.row.metric == "rps" {
		s.value = float64(w.requests) / secs
	} else {
		s.value = float64(w.bytes) / (1 << 20) / secs
	}
	return s
}
