package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/internal/testtool"
)

func TestParseStubAccepts(t *testing.T) {
	status := "Active connections: 3 \nserver accepts handled requests\n 1234 1234 98765 \nReading: 0 Writing: 1 Waiting: 2 \n"
	if n, err := parseStubAccepts(status); err != nil || n != 1234 {
		t.Errorf("parseStubAccepts = %d, %v; want 1234", n, err)
	}
	if _, err := parseStubAccepts("<html>404</html>"); err == nil {
		t.Error("a page without the counter was read as one")
	}
}

// TestLatencyOutcome: an open-loop row's repeat keeps p50 and p99 in ms,
// every failed response, and the server's CPU per response.
func TestLatencyOutcome(t *testing.T) {
	rep := &bench.Report{
		Samples:  []bench.Sample{{Responses: 5000, Accepted: true}, {Responses: 5000, Accepted: true}},
		Accepted: 2,
		Latency:  bench.Latency{P50: 400 * time.Microsecond, P99: 2500 * time.Microsecond},
		Errors:   map[string]int{"timeout": 2, "reset": 1},
		Server:   &bench.ServerStats{CPUSeconds: 0.5},
	}
	o := newOutcome(1, rep, nil, "latency")
	if o.value != 2.5 || o.p50 != 0.4 || o.failed != 3 || !o.hasCPU || o.cpu != 50 {
		t.Errorf("outcome: p99 %v p50 %v failed %d cpu %v (%v); want 2.5, 0.4, 3, 50", o.value, o.p50, o.failed, o.cpu, o.hasCPU)
	}
	c := &cell{repeats: []outcome{o}}
	if got, want := c.extText(row{metric: "latency"}), "0.40 / 2.50, 3 failed [50.0]"; got != want {
		t.Errorf("cell text %q, want %q", got, want)
	}
	if r := ratio(2.5, 5, "latency"); r != 2 {
		t.Errorf("latency ratio %v: lower is better, want 2", r)
	}
}

// TestRenderProxy: the proxy page says what is in front of what, how the
// fixed-rate row was measured, and the backend connections per repeat.
func TestRenderProxy(t *testing.T) {
	rows := proxyMatrix()
	servers := []*server{{name: "engine", about: "engine dev"}, {id: "haproxy", name: "haproxy", about: "HAProxy 2.6"}}
	cells := make([]map[string]*cell, len(rows))
	for i, r := range rows {
		o := clean(1, 100)
		o.cpu, o.hasCPU = 1.5, true
		o.backendConns, o.hasBackend = 64, true
		if r.metric == "latency" {
			o.value, o.p50 = 2, 0.5
		}
		o2 := o
		o2.repeat, o2.backendConns = 2, 0
		cells[i] = map[string]*cell{"engine": {repeats: []outcome{o, o2}}, "haproxy": {repeats: []outcome{o, o2}}}
	}
	doc := render(page{command: "go run ./bench/compare --client proxy", when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), cpus: 2,
		repeats: 2, samples: 2, sample: time.Second, servers: servers, rows: rows, cells: cells, client: "proxy"})
	for _, want := range []string{
		"# Reverse proxy benchmarks",
		"TLS-terminating reverse proxy in front of the same upstream",
		"| proxied 1 KiB at a fixed 5,000 req/s, 64 connections, h1 TLS | p50 / p99 ms, failed [proxy µs/req] | 0.50 / 2.00, 0 failed [1.5] | 0.50 / 2.00, 0 failed [1.5] | 1.00 |",
		"Client: engine bench, in this harness's process, run as `engine bench --protocol h1 --connections 64 --rate 5000 -k --manifest B3SUMS https://127.0.0.1:PORT/1k.bin`",
		"## Backend connections opened",
		"| proxied 1 KiB, 64 keep-alive connections, h1 TLS | 64, 0 | 64, 0 |",
		"no uploads",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("proxy page lacks %q:\n%s", want, doc)
		}
	}
	// The fixed-rate row is engine bench's: its client table has that
	// row only, and the external rows have none.
	if !strings.Contains(doc, "## The client's ceiling") || !strings.Contains(doc, "| proxied 1 KiB at a fixed 5,000 req/s, 64 connections, h1 TLS | p50 / p99 ms, failed [proxy µs/req] | - | - |") ||
		strings.Contains(doc, "| proxied 1 KiB, 64 keep-alive connections, h1 TLS | req/s (p99 ms) [proxy µs/req] | -") {
		t.Errorf("proxy page: the client's ceiling, for the fixed-rate row alone:\n%s", doc)
	}
}

// TestQuickProxy runs the proxy comparison in --quick mode on its
// fixed-rate row (engine bench, no external client) with the engine,
// nginx and HAProxy as proxies in front of the nginx backend: the
// templates, the backend's connection count and the page, end to end.
// .ci/run installs nginx and HAProxy. Caddy's proxy configuration is
// started in TestPeersAnswer, not here: without $CADDY this run would
// build it first.
func TestQuickProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, tool := range []string{"nginx", "haproxy"} {
		testtool.Require(t, tool)
	}
	out := filepath.Join(t.TempDir(), "BENCHMARKS-proxy.md")
	cmd := exec.Command("go", "run", ".", "--client", "proxy", "--quick", "--servers", "engine,nginx,haproxy", "--workloads", "proxy-1k-h1-tls-5000", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compare --client proxy --quick: %v\n%s", err, b)
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, want := range []string{"# Reverse proxy benchmarks", "| proxied 1 KiB at a fixed 5,000 req/s, 64 connections, h1 TLS |", "## Backend connections opened", "- **haproxy**: HAProxy version"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	for _, bad := range []string{"samples rejected", "no accepted sample", ": failed: ", " ? |", "did not start"} {
		if strings.Contains(text, bad) {
			t.Errorf("report says %q:\n%s", bad, text)
		}
	}
}
