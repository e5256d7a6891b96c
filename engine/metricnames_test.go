package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestMetricNames: every metric a server with every capability on serves
// (sites over TLS, the access log, proxy routes with the edge cache,
// passthrough routes, WebTransport, the admin listener), with its type and help, is the list
// in testdata/metrics.txt: metrics are declared once (Stats' tags, the
// families in collector.go), and a change to that list is one to review.
// Regenerate with ENGINE_WRITE_METRICS=1.
func TestMetricNames(t *testing.T) {
	root := siteRoot(t)
	pki := newPKI(t, t.TempDir(), "a.test")
	ts := start(t, fmt.Sprintf(`access_log = %q
[[sites]]
domain = "a.test"
root = %q
[sites.tls]
cert = %q
key = %q
[reverse_proxy]
enabled = true
[[reverse_proxy.routes]]
domain = "a.test"
path_prefix = "/api/"
upstreams = ["127.0.0.1:9"]
cache = true
[[reverse_proxy.routes]]
domain = "relay.test"
upstreams = ["127.0.0.1:9"]
tls_termination = false
[admin]
listen = "127.0.0.1:0"
[cache]
path = %q
min_free = "1MiB"
`, filepath.Join(t.TempDir(), "access.log"), root, pki.certFile, pki.keyFile, t.TempDir())+wtConf+ktlsAuto)
	fams := finalMetrics(t, ts)
	var lines []string
	for name, f := range fams {
		lines = append(lines, fmt.Sprintf("%s %s %s", name, strings.ToLower(f.GetType().String()), f.GetHelp()))
	}
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join("testdata", "metrics.txt")
	if os.Getenv("ENGINE_WRITE_METRICS") != "" {
		os.WriteFile(golden, []byte(got), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("metrics served differ from %s:\n%s", golden, lineDiff(string(want), got))
	}
	// engine_build_info names the running build.
	bi := fams["engine_build_info"].GetMetric()
	labels := map[string]string{}
	for _, l := range bi[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if len(bi) != 1 || bi[0].GetGauge().GetValue() != 1 || labels["goversion"] != runtime.Version() || labels["version"] == "" {
		t.Errorf("engine_build_info: %v", bi)
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
