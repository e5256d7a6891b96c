package main

import (
	"strings"
	"testing"
	"time"
)

// TestRender: the page names the engine measured and the machine, the
// engine's configuration and the client's quic-go, and a tree that
// changed during the run.
func TestRender(t *testing.T) {
	vs := []variant{{"HTTP/3 file download (GET, 256 MiB)", "h3", "/big.bin", 0}, {"WebTransport datagrams, 20000/s × 1200 B", "webtransport", "/x", 20000}}
	two := [][]float64{{100, 100}, {20, 20}}
	r := results{command: "go run ./bench/wtcap --repeats 2", when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		preamble: "Engine: built by this run at 03:00 UTC from commit 0123, clean; `engine version`: `engine dev`.\n\nMachine: Test CPU, 2 CPUs; kernel 6.1; go1.26.",
		treeNote: "**The working tree changed during the run** (changed: x.go)", pinned: "The client runs on CPU 0.", quicGo: "v0.65.0",
		repeats: 2, duration: 5 * time.Second, variants: vs, mibs: two, cpu: two, loss: [][]float64{nil, {0.5, 0.5}},
		lost: []int64{0, 10}, expected: []int64{0, 2000}, sent: []int64{0, 2000}, rcvbuf: []int64{0, 0}}
	doc := render(r)
	for _, want := range []string{
		"`go run ./bench/wtcap --repeats 2`, 2026-01-02 03:04 UTC.",
		"Engine: built by this run at 03:00 UTC from commit 0123, clean",
		"Machine: Test CPU, 2 CPUs; kernel 6.1; go1.26.",
		"**The working tree changed during the run** (changed: x.go)",
		"`[webtransport] enabled = true`, `max_bytes_per_session = \"1TiB\"`",
		"with quic-go v0.65.0.",
		"| WebTransport datagrams, 20000/s × 1200 B | 20.0 | 20.0–20.0 | 0.20 |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}
}
