package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuick runs the comparison harness in --quick mode against the engine
// alone (nginx and Caddy are not installed in CI; the full comparison is
// documented in docs/BENCHMARKS.md): fixtures, certificate, servers, the
// gated runs and the report are exercised end to end.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	cmd := exec.Command("go", "run", ".", "--quick", "--servers", "engine", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compare --quick: %v\n%s", err, b)
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| large file, 1 connection, h1 plain | MiB/s |", "| 1 KiB, 64 keep-alive connections, h1 plain | req/s |",
		"| large file, 1 connection, h2 TLS | MiB/s |",
		"## The client's ceiling", "Quick mode"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(string(doc), "rejected") {
		t.Errorf("samples rejected against the engine:\n%s", doc)
	}
}
