package main

import (
	"strings"
	"testing"
	"time"
)

// TestRender: the page names the engine measured and the machine (the
// harness's preamble), says when the tree changed during the run, and
// gives nginx's and wrk's versions and the configurations they ran with.
func TestRender(t *testing.T) {
	n := len(variants)
	fill := func(v float64) [][]float64 {
		out := make([][]float64, n)
		for i := range out {
			out[i] = []float64{v, v}
		}
		return out
	}
	r := results{command: "go run ./bench/obs --repeats 2", when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC),
		preamble: "Engine: built by this run at 03:00 UTC from commit 0123, clean; `engine version`: `engine dev`.\n\nMachine: Test CPU, 2 CPUs; kernel 6.1; go1.26.",
		treeNote: "**The working tree changed during the run** (changed: x.go)", pinned: "The client runs on CPU 0.",
		repeats: 2, duration: 5 * time.Second, conns: 64, rate: 10000,
		nginx: "nginx version: nginx/1.22.1", wrk: "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer",
		variants: variants, wrps: fill(1000), wcpu: fill(10), cpu: fill(20), p99: fill(1), logged: make([]int64, n), dropped: make([]float64, n)}
	doc := render(r)
	for _, want := range []string{
		"`go run ./bench/obs --repeats 2`, 2026-01-02 03:04 UTC.",
		"Engine: built by this run at 03:00 UTC from commit 0123, clean",
		"Machine: Test CPU, 2 CPUs; kernel 6.1; go1.26.",
		"**The working tree changed during the run** (changed: x.go)",
		"- **engine**: `listen = \"127.0.0.1:0\"`, `workers = 1`",
		"- **nginx**: nginx version: nginx/1.22.1; `worker_processes 1; daemon off;",
		"keepalive_requests 1000000;",
		"- **wrk**: wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer, run as `wrk -t1 -c64 -d5s -s done.lua URL`",
		"## Requests per second, closed loop (wrk)",
		"| access log off | 1000 | 1000–1000 | 1.000 | 10.00 | 1.000 |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}
	r.nginx, r.wrk, r.treeNote = "", "", ""
	doc = render(r)
	for _, want := range []string{"- **nginx**: not installed", "- **wrk**: not installed"} {
		if !strings.Contains(doc, want) {
			t.Errorf("without nginx and wrk, page lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "changed during the run") || strings.Contains(doc, "closed loop (wrk)") {
		t.Errorf("page without wrk and an unchanged tree:\n%s", doc)
	}
}
