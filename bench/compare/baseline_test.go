package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"99943778", 99943778}, {"100MB", 100_000_000}, {"100mb", 100_000_000}, {"96MiB", 96 << 20},
		{"1.5GB", 1_500_000_000}, {"1k", 1024}, {"1 KiB", 1024}, {"2kB", 2000}, {"512B", 512},
	} {
		if got, err := parseSize(tc.in); err != nil || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "MB", "-1MB", "0", "10 parsecs", "1.5B", "abc"} {
		if got, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", bad, got)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 99943778: "99,943,778", 100000000: "100,000,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func ids(rows []row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.id)
	}
	return out
}

func TestSelectWorkloads(t *testing.T) {
	all := matrix(false)
	seen := map[string]bool{}
	for _, r := range all {
		if r.id == "" || seen[r.id] || strings.ContainsAny(r.id, ", ") {
			t.Errorf("row %q: id %q is empty, repeated or has a comma or space", r.name, r.id)
		}
		seen[r.id] = true
	}
	for _, tc := range []struct {
		spec string
		want []string
	}{
		// The four rows of the transport check, in the matrix's order
		// whatever the order asked.
		{"1k-h1-64c,large-h2-tls,large-h1-tls,large-h1", []string{"large-h1", "large-h1-tls", "large-h2-tls", "1k-h1-64c"}},
		// An id matches exactly: large-h1 is not large-h1-tls.
		{"large-h1", []string{"large-h1"}},
		// Names as printed, commas and all, and parts of them, any case.
		{"large file, 1 connection, h1 TLS,keep-alive", []string{"large-h1-tls", "1k-h1-64c"}},
		{"H3", []string{"large-h3", "large-h3-16s", "large-h3-16c"}},
		{" large-h1 , large-h1 ", []string{"large-h1"}},
	} {
		rows, err := selectWorkloads(all, tc.spec)
		if err != nil {
			t.Errorf("selectWorkloads(%q): %v", tc.spec, err)
			continue
		}
		if got := ids(rows); !slices.Equal(got, tc.want) {
			t.Errorf("selectWorkloads(%q) = %v, want %v", tc.spec, got, tc.want)
		}
	}
	for _, bad := range []string{"", ",", "large-h1,nosuch"} {
		if rows, err := selectWorkloads(all, bad); err == nil {
			t.Errorf("selectWorkloads(%q) = %v, want an error", bad, ids(rows))
		}
	}
}

func TestPairedRatios(t *testing.T) {
	e := &cell{repeats: []outcome{clean(1, 100), {repeat: 2, samples: 3}, clean(3, 90)}}
	b := &cell{repeats: []outcome{clean(1, 50), clean(2, 80), clean(3, 100)}}
	if got := pairedRatios(e, b, "mibps"); !slices.Equal(got, []float64{2, 0.9}) {
		t.Errorf("pairedRatios = %v, want [2 0.9] (repeat 2 has no engine figure)", got)
	}
	// Latency: lower is better, so the baseline's over the engine's.
	if got := pairedRatios(&cell{repeats: []outcome{clean(1, 2)}}, &cell{repeats: []outcome{clean(1, 3)}}, "p99"); !slices.Equal(got, []float64{1.5}) {
		t.Errorf("pairedRatios(p99) = %v, want [1.5]", got)
	}
}

func TestDisturbance(t *testing.T) {
	a := cpuSnap{ok: true, busy: 1000, steal: 10, total: 2000, ours: 800}
	b := cpuSnap{ok: true, busy: 1150, steal: 20, total: 2200, ours: 920}
	others, steal, ok := disturbance(a, b)
	if !ok || others != 0.15 || steal != 0.05 {
		t.Errorf("disturbance = %v, %v, %v; want 0.15, 0.05, true", others, steal, ok)
	}
	// Our processes' ticks can exceed the busy ticks (one exited, or
	// rounding): never less than nothing.
	if others, _, _ := disturbance(a, cpuSnap{ok: true, busy: 1100, steal: 10, total: 2200, ours: 950}); others != 0 {
		t.Errorf("disturbance with more of ours than busy = %v, want 0", others)
	}
	if _, _, ok := disturbance(cpuSnap{}, b); ok {
		t.Error("disturbance without a first snapshot: ok")
	}
	if s := readCPU(); s.ok && (s.total == 0 || s.ours == 0 && testing.Verbose()) {
		t.Logf("readCPU = %+v", s)
	}
}

func TestRemeasuredNote(t *testing.T) {
	o := clean(2, 10)
	o.discarded, o.others, o.hasLoad = []float64{0.4, 0.25}, 0.02, true
	want := "repeat 2: measured 3 times: other processes used 40%, 25% of the CPU in the 2 runs before, 2% in the one kept"
	if got := o.note(); got != want {
		t.Errorf("note() = %q, want %q", got, want)
	}
	o.accepted = 2
	o.rejected = map[string]int{"timeout": 1}
	if got := o.note(); !strings.HasPrefix(got, "repeat 2: 1 of 3 samples rejected (timeout x1); measured 3 times") {
		t.Errorf("note() = %q", got)
	}
}

func TestProcAttrsDiff(t *testing.T) {
	limits := "Limit Soft Hard\nMax open files 1024 4096 files\nMax processes 100 100 processes"
	a := procAttrs{nice: "0", policy: "0", cgroup: "0::/", limits: limits}
	if placed, l := a.diff(a); placed != "" || l != "" {
		t.Errorf("diff of the same = %q, %q", placed, l)
	}
	b := a
	b.nice = "5"
	b.limits = strings.Replace(limits, "1024", "4096", 1)
	placed, l := a.diff(b)
	if !strings.Contains(placed, "nice 0 vs 5") || !strings.Contains(l, "Max open files 1024 4096 files") {
		t.Errorf("diff = %q, %q", placed, l)
	}
	if got := a.String(); !strings.Contains(got, "open files 1024/4096") || !strings.Contains(got, "all at the root") {
		t.Errorf("String() = %q", got)
	}
}

// TestRenderBaseline: with a baseline, the page has the engine/baseline
// section: both medians, the ratio to three places, the repeats, the
// per-repeat range, and the rows below the minimum marked.
func TestRenderBaseline(t *testing.T) {
	rows := []row{
		{name: "large file, 1 connection, h1 TLS", unit: "MiB/s", metric: "mibps"},
		{name: "1 KiB, 64 keep-alive connections, h1 plain", unit: "req/s", metric: "rps"},
		{name: "large file, 1 connection, h3", unit: "MiB/s", metric: "mibps"},
	}
	withLoad := func(o outcome, others float64) outcome {
		o.others, o.steal, o.hasLoad = others, 0.01, true
		return o
	}
	servers := []*server{{id: "engine", name: "engine", about: "engine dev; --engine /tmp/b", sha: "ab"},
		{id: "baseline", name: baselineName, about: "engine dev; --baseline /tmp/a", sha: "ab"}}
	cells := []map[string]*cell{
		{
			"engine":     {repeats: []outcome{withLoad(clean(1, 990), 0.02), clean(2, 1000), clean(3, 1010)}},
			baselineName: {repeats: []outcome{withLoad(clean(1, 1000), 0.07), clean(2, 1000), clean(3, 1000)}},
		},
		{
			"engine":     {repeats: []outcome{clean(1, 90), clean(2, 95), {repeat: 3, samples: 3, rejected: map[string]int{"timeout": 3}}}},
			baselineName: {repeats: []outcome{clean(1, 100), clean(2, 100), clean(3, 100)}},
		},
		{
			"engine":     {repeats: []outcome{clean(1, 5), clean(2, 5), clean(3, 5)}},
			baselineName: {repeats: []outcome{clean(1, 5), clean(2, 5), clean(3, 5)}},
		},
	}
	p := testPage(kernelTLS{})
	p.servers, p.rows, p.cells, p.minRatio, p.large = servers, rows, cells, 0.97, 100_000_000
	p.footing = "The engine and its baseline are started by the same code."
	doc := render(p)
	for _, want := range []string{
		"| workload | unit | engine | engine (baseline) | engine/baseline |\n",
		"## The engine against its baseline\n\nThe engine and its baseline are started by the same code. In each repeat (3)",
		"The two binaries are identical (the same SHA-256)",
		"| large file, 1 connection, h1 TLS | MiB/s | 1000.0 | 1000.0 | 1.000 | 3, 3 of 3 | 0.990–1.010 | 7%, 1% |",
		"| 1 KiB, 64 keep-alive connections, h1 plain | req/s | 92.5 (2 of 3 repeats) | 100.0 | **0.925 (below 0.97)** | 2, 3 of 3 | 0.900–0.950 | - |",
		"1 row below 0.97: 1 KiB, 64 keep-alive connections, h1 plain. Lowest: 0.925",
		"two files (100,000,000 bytes and 1 KiB)",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("render lacks %q:\n%s", want, doc)
		}
	}
	if got := belowMinRatio(rows, cells, 0.97); !slices.Equal(got, []string{"1 KiB, 64 keep-alive connections, h1 plain: 0.925"}) {
		t.Errorf("belowMinRatio = %q", got)
	}
	// Without a baseline, no such section.
	if doc := render(testPage(kernelTLS{})); strings.Contains(doc, "against its baseline") {
		t.Errorf("render without a baseline has its section:\n%s", doc)
	}
}

// TestQuickBaseline runs the harness end to end with one engine binary
// as both the engine and its baseline, on one small workload. The binary
// is built without VCS information (-buildvcs=false), so its version names
// no commit, as an engine built outside a git checkout.
func TestQuickBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "engine-a")
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "../../cmd/engine").CombinedOutput(); err != nil {
		t.Fatalf("build the engine: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "BASELINE.md")
	start := time.Now()
	cmd := exec.Command("go", "run", ".", "--quick", "--engine", bin, "--baseline", bin, "--servers", "engine,baseline",
		"--workloads", "1k-h1-64c", "--large-size", "4MiB", "--min-ratio", "0", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compare --baseline: %v\n%s", err, b)
	}
	t.Logf("took %v", time.Since(start))
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| workload | unit | engine | engine (baseline) | engine/baseline |",
		"## The engine against its baseline",
		"The two binaries are identical",
		"| 1 KiB, 64 keep-alive connections, h1 plain | req/s |",
		"--engine " + bin, "--baseline " + bin,
		"## The client's ceiling",
		// Built without the stamp: the page cannot say from what.
		"- **engine**: --engine " + bin + ", commit unknown (its version names no commit",
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(string(doc), "large file") {
		t.Errorf("report has a row --workloads left out:\n%s", doc)
	}
}
