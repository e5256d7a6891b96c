package main

import (
	"strings"
	"testing"
	"time"
)

// TestRender: the page names the engine measured and the machine, the
// CA's versions and every program's configuration, the key exchange of
// the handshake rows, and a tree that changed during the run.
func TestRender(t *testing.T) {
	r := results{command: "go run ./bench/acme --repeats 2", when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		preamble: "Engine: built by this run at 03:00 UTC from commit 0123, clean; `engine version`: `engine dev`.\n\nMachine: Test CPU, 2 CPUs; kernel 6.1; go1.26.",
		treeNote: "**The working tree changed during the run** (changed: x.go)",
		pebble:   "pebble v2.10.3, go1.26.8; pebble-challtestsrv v2.10.3, go1.26.8", workers: 2,
		repeats: 2, duration: 5 * time.Second, conns: 16, startTimes: []time.Duration{time.Second, 2 * time.Second},
		names: []string{"ACME certificate (certmagic cache)", "the same certificate and key from files"},
		rates: [][]float64{{1000, 1000}, {900, 900}}, cpus: [][]float64{{700, 700}, {700, 700}},
		kx: []map[string]int64{{"X25519MLKEM768": 10000}, {"X25519MLKEM768": 9000, "X25519": 3}}}
	doc := render(r)
	for _, want := range []string{
		"`go run ./bench/acme --repeats 2`, 2026-01-02 03:04 UTC.",
		"Engine: built by this run at 03:00 UTC from commit 0123, clean",
		"Machine: Test CPU, 2 CPUs; kernel 6.1; go1.26.",
		"**The working tree changed during the run** (changed: x.go)",
		"all on loopback: pebble v2.10.3, go1.26.8; pebble-challtestsrv v2.10.3, go1.26.8.",
		"- **Pebble**: `keyAlgorithm = \"ecdsa\"`",
		"- **engine**: `listen = \"127.0.0.1:PORT\"`, `workers` = 2 (the CPUs)",
		"| ACME certificate (certmagic cache) | 1000 | 1000–1000 | 700 | X25519MLKEM768 ×10000 |",
		"| the same certificate and key from files | 900 | 900–900 | 700 | X25519MLKEM768 ×9000, X25519 ×3 |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}
}
