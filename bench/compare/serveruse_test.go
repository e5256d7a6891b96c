package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPerUnit(t *testing.T) {
	for _, tc := range []struct {
		metric          string
		n               uint64
		bytes, requests int64
		want            float64
		ok              bool
	}{
		// 100 MiB over one connection in 580 syscalls.
		{"mibps", 580, 100 << 20, 1, 5.8, true},
		{"mibps", 54, 100 << 20, 1, 0.54, true},
		{"rps", 3000, 1024 * 1000, 1000, 3, true},
		{"latency", 12000, 1024 * 4000, 4000, 3, true},
		{"mibps", 580, 0, 0, 0, false},
		{"rps", 3000, 1 << 20, 0, 0, false},
	} {
		got, ok := perUnit(tc.metric, tc.n, tc.bytes, tc.requests)
		if ok != tc.ok || (got-tc.want) > 1e-9 || (tc.want-got) > 1e-9 {
			t.Errorf("perUnit(%s, %d, %d, %d) = %v, %v; want %v, %v", tc.metric, tc.n, tc.bytes, tc.requests, got, ok, tc.want, tc.ok)
		}
	}
}

// TestServerUseSums: samples' differences add up; a count that went down
// between two readings, or was not read, is unknown, and stays unknown
// in the sum, and nothing is known over no sample.
func TestServerUseSums(t *testing.T) {
	read := func(ticks, wakeups, syscalls uint64) serverReading {
		return serverReading{ticks: ticks, wakeups: wakeups, syscalls: syscalls, ticksOK: true, wakeupsOK: true, syscallsOK: true}
	}
	a := read(100, 1000, 50000).since(read(50, 900, 40000))
	if want := (serverUse{cpu: 0.5, wakeups: 100, syscalls: 10000, cpuOK: true, wakeupsOK: true, syscallsOK: true}); a != want {
		t.Errorf("since = %+v, want %+v", a, want)
	}
	// A thread exited: the wake-ups went down.
	b := read(60, 899, 60000).since(read(50, 900, 40000))
	if !b.cpuOK || b.wakeupsOK || !b.syscallsOK {
		t.Errorf("since with fewer wake-ups after = %+v, want wake-ups unknown only", b)
	}
	noSys := read(60, 1000, 0)
	noSys.syscallsOK = false
	c := noSys.since(read(50, 900, 0))
	if c.syscallsOK {
		t.Errorf("since with syscalls unread = %+v, want them unknown", c)
	}
	sum := totalUse([]serverUse{a, a})
	if sum.wakeups != 200 || sum.syscalls != 20000 || sum.cpu != 1 || !sum.wakeupsOK || !sum.syscallsOK || !sum.cpuOK {
		t.Errorf("totalUse(a, a) = %+v", sum)
	}
	if sum := totalUse([]serverUse{a, b}); sum.wakeupsOK || !sum.syscallsOK {
		t.Errorf("totalUse(a, b) = %+v, want wake-ups unknown", sum)
	}
	if sum := totalUse(nil); sum.cpuOK || sum.wakeupsOK || sum.syscallsOK {
		t.Errorf("totalUse(none) = %+v, want nothing known", sum)
	}
	var o outcome
	o.setUse("mibps", serverUse{wakeups: 54, syscalls: 580, wakeupsOK: true}, 100<<20, 1)
	if o.hasSyscalls || !o.hasWakeups || o.wakeups != 0.54 {
		t.Errorf("setUse without syscalls: %+v", o)
	}
}

// TestLogLineUse: the progress line gives what was counted, and leaves
// out what was not (no counter, as on engine bench's runs).
func TestLogLineUse(t *testing.T) {
	bulk := row{unit: "MiB/s", metric: "mibps"}
	o := clean(1, 1946.3)
	o.wakeups, o.hasWakeups = 0.73, true
	if got, want := o.logLine(bulk), "    1946.3 MiB/s, server 0.73 wake-ups per MiB"; got != want {
		t.Errorf("logLine without syscalls = %q, want %q", got, want)
	}
	o.syscalls, o.hasSyscalls = 2.04, true
	if got, want := o.logLine(row{unit: "req/s", metric: "rps"}), "    1946.3 req/s, server 2.0 syscalls and 0.73 wake-ups per request"; got != want {
		t.Errorf("logLine = %q, want %q", got, want)
	}
}

func TestUseText(t *testing.T) {
	with := func(repeat int, sys, wake float64) outcome {
		o := clean(repeat, 100)
		o.syscalls, o.hasSyscalls, o.wakeups, o.hasWakeups = sys, true, wake, true
		return o
	}
	unread := clean(1, 100)
	for _, tc := range []struct {
		name    string
		c       cell
		counted bool
		want    string
	}{
		{"one repeat", cell{repeats: []outcome{with(1, 5.81, 0.537)}}, true, "5.8 / 0.54"},
		{"medians", cell{repeats: []outcome{with(1, 4, 0.5), with(2, 6, 0.7), with(3, 5, 0.6)}}, true, "5.0 / 0.6"},
		{"per request", cell{repeats: []outcome{with(1, 1234.4, 17.26)}}, true, "1234 / 17.3"},
		{"syscalls not counted", cell{repeats: []outcome{with(1, 0, 0.54)}}, false, "not measured / 0.54"},
		{"readings failed", cell{repeats: []outcome{unread}}, true, "unknown / unknown"},
		{"no accepted sample", cell{repeats: []outcome{{repeat: 1, samples: 2, rejected: map[string]int{"length": 2}}}}, true, "no accepted sample"},
		{"cannot", cell{cannot: "no HTTP/3"}, true, "no HTTP/3"},
	} {
		if got := tc.c.useText(tc.counted); got != tc.want {
			t.Errorf("%s: useText(%v) = %q, want %q", tc.name, tc.counted, got, tc.want)
		}
	}
}

// TestRenderUseTable: an external page has the syscalls and wake-ups
// table after the main one, with the same rows and servers; without a
// counter it says why, and no cell shows 0 syscalls.
func TestRenderUseTable(t *testing.T) {
	rows := externalMatrix()[:2]
	servers := []*server{{name: "engine", about: "engine dev"}, {id: "lighttpd", name: "lighttpd", about: "lighttpd/1.4.69"}}
	o := clean(1, 100)
	o.syscalls, o.hasSyscalls, o.wakeups, o.hasWakeups = 5.8, true, 0.54, true
	cells := []map[string]*cell{
		{"engine": {repeats: []outcome{o}}, "lighttpd": {repeats: []outcome{o}}},
		{"engine": {repeats: []outcome{o}}, "lighttpd": {cannot: "no HTTP/2"}},
	}
	p := page{when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), cpus: 2, repeats: 1, samples: 2, sample: time.Second,
		servers: servers, rows: rows, cells: cells, client: "external"}
	doc := render(p)
	for _, want := range []string{
		"## Server syscalls and wake-ups\n\nEach cell is syscalls / wake-ups per MiB of file data",
		"whole process tree",
		"a wake-up is a thread that slept",
		"| workload | unit | engine | lighttpd |\n|---|---|---:|---:|\n",
		"| large file, 1 connection, h1 TLS | syscalls / wake-ups per MiB | 5.8 / 0.54 | 5.8 / 0.54 |",
		"| large file, 1 connection, h2 TLS | syscalls / wake-ups per MiB | 5.8 / 0.54 | no HTTP/2 |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}
	if main, use := strings.Index(doc, "| large file, 1 connection, h1 TLS | MiB/s"), strings.Index(doc, "## Server syscalls"); main < 0 || use < main {
		t.Errorf("the syscalls table is not after the main table:\n%s", doc)
	}
	p.sysErr = errors.New("load the raw tracepoint program: operation not permitted")
	doc = render(p)
	for _, want := range []string{
		"Syscalls were not measured: load the raw tracepoint program: operation not permitted.",
		"| not measured / 0.54 | not measured / 0.54 |",
		"- The servers' syscalls: the eBPF program that counts them could not be loaded here",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page without a counter lacks %q:\n%s", want, doc)
		}
	}
	p.client = "bench"
	if doc := render(p); strings.Contains(doc, "## Server syscalls") {
		t.Error("an engine bench page has the syscalls table, which only external pages have")
	}
}
