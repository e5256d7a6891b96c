package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/testtool"
)

// TestRenderPassthrough: the passthrough page says what relays to what,
// counts the relay's syscalls and wake-ups, leaves out the proxy's
// backend-connection table, and says what it did not measure.
func TestRenderPassthrough(t *testing.T) {
	rows := passthroughMatrix()
	servers := []*server{{name: "engine", about: "engine dev"}, {id: "nginx", name: "nginx", about: "nginx 1.22"}}
	cells := make([]map[string]*cell, len(rows))
	for i := range rows {
		o := clean(1, 100)
		o.cpu, o.hasCPU = 0.5, true
		cells[i] = map[string]*cell{"engine": {repeats: []outcome{o}}, "nginx": {repeats: []outcome{o}}}
	}
	cells[3]["nginx"] = &cell{cannot: "no HTTP/3"}
	doc := render(page{command: "go run ./bench/compare --client passthrough", when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), cpus: 2,
		repeats: 1, samples: 2, sample: time.Second, servers: servers, rows: rows, cells: cells, client: "passthrough"})
	for _, want := range []string{
		"# TLS passthrough benchmarks",
		"Each server is a TLS passthrough relay in front of the same origin",
		"| relayed large file, 1 connection, h3 (QUIC passthrough) | MiB/s [relay CPU s/GiB] |",
		"no HTTP/3",
		"nginx and HAProxy have no QUIC passthrough",
		"## Server syscalls and wake-ups",
		"counted over the relay's whole process tree",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("passthrough page lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "## Backend connections opened") {
		t.Error("passthrough page has the proxy's backend-connection table")
	}
}

// TestQuickPassthrough runs the passthrough comparison in --quick mode
// on its single-connection TCP row (curl, its first transfer hashed)
// and its HTTP/3 row (engine bench, the engine alone) with the engine, nginx
// (stream, ssl_preread) and HAProxy (mode tcp) relaying to the nginx TLS
// origin and the quic-go one: the templates and the page, end to end.
// .ci/run installs nginx, its stream module, HAProxy and curl.
func TestQuickPassthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, tool := range []string{"nginx", "haproxy", "curl"} {
		testtool.Require(t, tool)
	}
	testtool.RequireFile(t, toolNginxStream.files[0], "nginx's stream module", "apt-get install libnginx-mod-stream")
	out := filepath.Join(t.TempDir(), "BENCHMARKS-passthrough.md")
	cmd := exec.Command("go", "run", ".", "--client", "passthrough", "--quick", "--workloads", "pass-large-h1-tls,pass-large-h3", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compare --client passthrough --quick: %v\n%s", err, b)
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, want := range []string{"# TLS passthrough benchmarks", "| relayed large file, 1 connection, h1 TLS |", "| relayed large file, 1 connection, h3 (QUIC passthrough) |",
		"- **haproxy**: HAProxy version", "- **nginx**: nginx version"} {
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
