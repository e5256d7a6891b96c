package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/preflight"
)

// TestQuick runs the comparison harness in --quick mode against the engine
// alone (the peers' configurations are started in TestPeersAnswer; the
// full comparison is documented in docs/BENCHMARKS.md): fixtures,
// certificate, servers, the gated runs and the report are exercised end
// to end.
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
		"## The client's ceiling", "Quick mode", "- **engine**: built by this run at ", "`engine version`: `engine ", "(commit ", "The harness ran from that same tree",
		"Kernel TLS: ", "Key exchanges: every side at its default", "## What this page does not measure"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("report lacks %q:\n%s", want, doc)
		}
	}
	for _, bad := range []string{"samples rejected", "no accepted sample", ": failed: "} {
		if strings.Contains(string(doc), bad) {
			t.Errorf("report says %q against the engine:\n%s", bad, doc)
		}
	}
}

// clean is a repeat whose samples were all accepted.
func clean(repeat int, v float64) outcome {
	return outcome{repeat: repeat, samples: 3, accepted: 3, value: v}
}

func TestCellText(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    cell
		want string
	}{
		{"cannot", cell{cannot: "no HTTP/3"}, "no HTTP/3"},
		{"not run", cell{}, "-"},
		{"all repeats", cell{repeats: []outcome{clean(1, 10), clean(2, 30), clean(3, 20)}}, "20.0"},
		{"partly accepted repeat still counts", cell{repeats: []outcome{
			clean(1, 10),
			{repeat: 2, samples: 3, accepted: 1, rejected: map[string]int{"timeout": 2}, value: 12},
		}}, "11.0"},
		{"one repeat without a figure", cell{repeats: []outcome{
			clean(1, 812.3),
			{repeat: 2, samples: 3, rejected: map[string]int{"digest": 3}},
			clean(3, 900),
		}}, "856.1 (2 of 3 repeats)"},
		{"failed repeat", cell{repeats: []outcome{{repeat: 1, err: "connect: refused"}, clean(2, 5)}}, "5.0 (1 of 2 repeats)"},
		{"no figure", cell{repeats: []outcome{
			{repeat: 1, samples: 3, rejected: map[string]int{"digest": 1}},
			{repeat: 2, samples: 3, rejected: map[string]int{"digest": 1}},
			{repeat: 3, samples: 3, rejected: map[string]int{"digest": 1}},
		}}, "no accepted sample in 3 repeats: digest x3"},
		{"no figure, mixed", cell{repeats: []outcome{
			{repeat: 1, samples: 2, rejected: map[string]int{"unverified": 2}},
			{repeat: 2, err: "dial tcp: refused"},
			{repeat: 3, err: "dial tcp: refused"},
		}}, "no accepted sample in 3 repeats: unverified x2; failed x2: dial tcp: refused"},
		{"no figure, one repeat", cell{repeats: []outcome{{repeat: 1}}}, "no accepted sample in 1 repeat: no samples taken"},
	} {
		if got := tc.c.text(); got != tc.want {
			t.Errorf("%s: text() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestCellNotes: every repeat that lost samples keeps its own note; a
// later repeat never replaces an earlier one's.
func TestCellNotes(t *testing.T) {
	c := cell{repeats: []outcome{
		{repeat: 1, samples: 3, accepted: 3, value: 1},
		{repeat: 2, samples: 3, accepted: 2, rejected: map[string]int{"timeout": 1}, value: 1},
		{repeat: 3, err: "bench: no response"},
		{repeat: 4, samples: 3, rejected: map[string]int{"digest": 2, "length": 1}},
	}}
	want := []string{
		"repeat 2: 1 of 3 samples rejected (timeout x1)",
		"repeat 3: failed: bench: no response",
		"repeat 4: 3 of 3 samples rejected (digest x2, length x1)",
	}
	if got := c.notes(); !slices.Equal(got, want) {
		t.Errorf("notes() = %q, want %q", got, want)
	}
	if got := (&cell{repeats: []outcome{clean(1, 1), clean(2, 2)}}).notes(); len(got) != 0 {
		t.Errorf("notes() of a clean cell = %q, want none", got)
	}
}

func testPage(ktls kernelTLS) page {
	rows := []row{
		{name: "large file, 1 connection, h1 plain", unit: "MiB/s", metric: "mibps"},
		{name: "large file, 1 connection, h3", unit: "MiB/s", metric: "mibps"},
	}
	servers := []*server{{name: "engine", about: "engine dev"}, {name: "nginx", about: "nginx/1.22.1"}}
	cells := []map[string]*cell{
		{
			"engine": {repeats: []outcome{clean(1, 100), {repeat: 2, samples: 3, rejected: map[string]int{"digest": 3}}, clean(3, 120)}},
			"nginx":  {repeats: []outcome{clean(1, 50), clean(2, 55), clean(3, 60)}},
		},
		{
			"engine": {repeats: []outcome{
				{repeat: 1, samples: 3, rejected: map[string]int{"unverified": 3}},
				{repeat: 2, samples: 3, rejected: map[string]int{"unverified": 3}},
				{repeat: 3, samples: 3, rejected: map[string]int{"unverified": 3}},
			}},
			"nginx": {cannot: "no HTTP/3"},
		},
	}
	return page{command: "go run ./bench/compare", when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), host: "vm", cpus: 2,
		kernel: "Linux 6.1.0-test", goVer: "go1.26", ktls: ktls, cpuModel: "Test CPU @ 1GHz",
		harness: bench.Tree{Head: "0123abcd", Changed: []string{"M bench/harness.go"}, Fingerprint: "4f1c2a9b0d3e"},
		repeats: 3, samples: 3, sample: 2 * time.Second, servers: servers, rows: rows, cells: cells}
}

func TestRender(t *testing.T) {
	noULP := &preflight.NotSupportedError{Feature: "kernel TLS", Tried: `setsockopt(TCP_ULP, "tls")`, Err: syscall.ENOENT,
		Reason: "this kernel has no tls module"}
	doc := render(testPage(kernelTLS{probe: noULP}))
	for _, want := range []string{
		"The harness ran from commit 0123abcd with uncommitted changes (1 path: M bench/harness.go; fingerprint 4f1c2a9b0d3e), read at its start",
		"Machine: vm, Test CPU @ 1GHz, 2 CPUs, go1.26.",
		"Kernel: Linux 6.1.0-test.",
		"Kernel TLS: not available on this kernel (no `tls` ULP): every TLS figure below is the userspace TLS path; the kernel TLS + sendfile path is not in these figures.",
		"this kernel has no tls module (setsockopt(TCP_ULP, \"tls\")",
		"says how many (\"812.3 (2 of 3 repeats)\"). A cell without a figure says why",
		"| large file, 1 connection, h1 plain | MiB/s | 110.0 (2 of 3 repeats) | 55.0 | 2.00 |",
		"| large file, 1 connection, h3 | MiB/s | no accepted sample in 3 repeats: unverified x9 | no HTTP/3 | - |",
		"- large file, 1 connection, h1 plain, engine: repeat 2: 3 of 3 samples rejected (digest x3)\n",
		"- large file, 1 connection, h3, engine: repeat 1: 3 of 3 samples rejected (unverified x3); repeat 2: 3 of 3 samples rejected (unverified x3); repeat 3: 3 of 3 samples rejected (unverified x3)\n",
		"## What this page does not measure",
		"- The kernel TLS + sendfile path",
		"More than 2 CPUs: this machine has 2",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("render lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "large file, 1 connection, h1 plain, nginx:") {
		t.Errorf("render notes a clean cell:\n%s", doc)
	}
	for _, bad := range []string{"Measured:", "changed during the run", "Key exchanges:"} {
		if strings.Contains(doc, bad) {
			t.Errorf("a page with no engine binary, an unchanged tree and no TLS row says %q:\n%s", bad, doc)
		}
	}

	doc = render(testPage(kernelTLS{}))
	if !strings.Contains(doc, "Kernel TLS: active") {
		t.Errorf("with kernel TLS, render lacks %q:\n%s", "Kernel TLS: active", doc)
	}
	if strings.Contains(doc, "kernel TLS + sendfile path is not") || strings.Contains(doc, "- The kernel TLS + sendfile path") {
		t.Errorf("with kernel TLS, render says its path is not measured:\n%s", doc)
	}
}

func TestKTLSStatement(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    kernelTLS
		want string
	}{
		{"missing", kernelTLS{probe: &preflight.NotSupportedError{Feature: "kernel TLS", Tried: "x"}}, "Kernel TLS: not available on this kernel"},
		{"not Linux", kernelTLS{probe: fmt.Errorf("loopback TCP pair: %w", fmt.Errorf("preflight: %w on this OS", errors.ErrUnsupported))}, "Kernel TLS: not available"},
		{"unknown", kernelTLS{probe: fmt.Errorf("loopback TCP pair: EMFILE")}, "Kernel TLS: could not tell"},
		{"engine stayed in userspace", kernelTLS{userspace: `msg="kernel TLS unavailable; TLS is served from userspace"`}, "served from userspace"},
		{"active", kernelTLS{}, "Kernel TLS: active"},
		{"active, a promotion failed", kernelTLS{promoteFailed: "promotion to kernel TLS failed"}, "failed to promote"},
	} {
		if got := tc.k.statement(); !strings.Contains(got, tc.want) {
			t.Errorf("%s: statement() = %q, want it to contain %q", tc.name, got, tc.want)
		}
		if active := tc.k.probe == nil && tc.k.userspace == ""; tc.k.active() != active {
			t.Errorf("%s: active() = %v, want %v", tc.name, tc.k.active(), active)
		}
	}
}

func TestEngineLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine-tls.log")
	log := `time=1 level=WARN msg="kernel TLS unavailable; TLS is served from userspace" check=ktls.ulp
time=2 level=WARN msg="promotion to kernel TLS failed; this connection stays in userspace (logged once per loop)" err=EINVAL
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	var k kernelTLS
	k.engineLog(path)
	if !strings.Contains(k.userspace, "kernel TLS unavailable") || !strings.Contains(k.promoteFailed, "EINVAL") {
		t.Errorf("engineLog: userspace = %q, promoteFailed = %q", k.userspace, k.promoteFailed)
	}
	if k.active() {
		t.Error("active() = true after the engine said it serves from userspace")
	}
}

// TestFillRefusesFixedPorts: a template without a port placeholder (an
// old copy passed with --peers) is refused, not run on unknown ports.
func TestFillRefusesFixedPorts(t *testing.T) {
	old := fstest.MapFS{"nginx.conf.tmpl": {Data: []byte("listen 127.0.0.1:8080;\nroot __DIR__/www;\n")}}
	_, err := peerTemplates{fs: old, name: "old"}.fill("nginx.conf.tmpl", "__DIR__", "/w", "__PLAIN_PORT__", "1234")
	if err == nil || !strings.Contains(err.Error(), "__PLAIN_PORT__") {
		t.Errorf("fill of a template with a fixed port = %v, want an error naming __PLAIN_PORT__", err)
	}
}

// TestWaitReadyPortTaken: a server that exits because its port is taken
// is reported as errPortTaken, which startOnFreePorts retries.
func TestWaitReadyPortTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "engine")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/engine").CombinedOutput(); err != nil {
		t.Fatalf("build the engine: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	p, err := startProc(filepath.Join(dir, "engine.log"), bin, []string{"serve", "--root", dir, "--listen", addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if err := p.waitReady("http://" + addr + "/"); !errors.Is(err, errPortTaken) {
		t.Errorf("waitReady with %s taken = %v, want errPortTaken", addr, err)
	} else {
		t.Log(err)
	}
}

func TestStartOnFreePorts(t *testing.T) {
	other := errors.New("nginx not installed")
	for _, tc := range []struct {
		name      string
		errs      []error // what each call of start returns, in order
		wantCalls int
		wantErr   error
	}{
		{"first try", []error{nil}, 1, nil},
		{"port taken, then started", []error{errPortTaken, errPortTaken, nil}, 3, nil},
		{"port taken every time", []error{errPortTaken, errPortTaken, errPortTaken, nil}, 3, errPortTaken},
		{"other error: no retry", []error{other, nil}, 1, other},
	} {
		calls := 0
		_, err := startOnFreePorts(func() (*server, error) {
			err := tc.errs[calls]
			calls++
			if err != nil {
				return nil, fmt.Errorf("engine exited: %w", err)
			}
			return &server{}, nil
		})
		if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%s: %d calls, err %v; want %d calls, err %v", tc.name, calls, err, tc.wantCalls, tc.wantErr)
		}
	}
}

func TestPortTaken(t *testing.T) {
	for _, tc := range []struct {
		log  string
		want bool
	}{
		{`nginx: [emerg] bind() to 127.0.0.1:8080 failed (98: Address already in use)`, true},
		{`Error: loading initial config: listen tcp 127.0.0.1:9453: bind: address already in use`, true},
		{`level=ERROR msg="cannot start" err="listen udp 127.0.0.1:9443: bind: address already in use"`, true},
		{`nginx: [emerg] open() "/x/cert.pem" failed (2: No such file or directory)`, false},
		{``, false},
	} {
		if got := portTaken(tc.log); got != tc.want {
			t.Errorf("portTaken(%q) = %v, want %v", tc.log, got, tc.want)
		}
	}
}

// TestPeerTemplates: the embedded templates keep the settings the
// comparison depends on, and every placeholder is one the harness fills.
func TestPeerTemplates(t *testing.T) {
	peers, err := fs.Sub(embeddedPeers, "peers")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file         string
		placeholders []string
		settings     []string
	}{
		{"nginx.conf.tmpl", []string{"__DIR__", "__KTLS__", "__PLAIN_PORT__", "__TLS_PORT__", "__TLS_NR_PORT__"},
			[]string{"sendfile on;", "access_log off;", "ssl http2;", "ssl_session_tickets off;", "ssl_session_cache off;", "TLSv1.3", "__DIR__/cert.pem"}},
		{"Caddyfile.tmpl", []string{"__DIR__", "__PLAIN_PORT__", "__TLS_PORT__"},
			[]string{"auto_https off", "admin off", "protocols h1 h2 h3", "tls __DIR__/cert.pem __DIR__/key.pem", "http://:__PLAIN_PORT__"}},
		// The proxy rows' backend and proxies (--client proxy).
		{"nginx-backend.conf.tmpl", []string{"__DIR__", "__BACKEND_PORT__"}, []string{"stub_status;", "/_backend_status", "sendfile on;", "access_log off;", "keepalive_timeout 65;"}},
		{"nginx-proxy.conf.tmpl", []string{"__DIR__", "__KTLS__", "__TLS_PORT__", "__BACKEND_PORT__"}, []string{"keepalive 64;", "proxy_http_version 1.1;", `proxy_set_header Connection "";`, "proxy_pass http://backend;", "ssl http2;"}},
		{"Caddyfile-proxy.tmpl", []string{"__DIR__", "__TLS_PORT__", "__BACKEND_PORT__"}, []string{"reverse_proxy 127.0.0.1:__BACKEND_PORT__", "auto_https off", "admin off", "protocols h1 h2 h3"}},
		{"haproxy.cfg.tmpl", []string{"__DIR__", "__TLS_PORT__", "__BACKEND_PORT__"}, []string{"mode http", "http-reuse always", "ssl crt __DIR__/haproxy.pem alpn h2,http/1.1", "TLS_AES_128_GCM_SHA256"}},
	} {
		b, err := fs.ReadFile(peers, tc.file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, want := range append(tc.placeholders, tc.settings...) {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %q", tc.file, want)
			}
		}
		var pairs []string
		for _, p := range tc.placeholders {
			pairs = append(pairs, p, "x")
		}
		filled, err := peerTemplates{fs: peers, name: "peers"}.fill(tc.file, pairs...)
		if err != nil {
			t.Fatal(err)
		}
		// Comments may mention placeholders; what is left in the
		// configuration proper must not.
		for i, line := range strings.Split(filled, "\n") {
			if strings.Contains(line, "__") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
				t.Errorf("%s:%d: placeholder the harness does not fill: %s", tc.file, i+1, line)
			}
		}
	}
}

// TestRenderMeasured: the page names each engine binary by what it was
// built from at build time (a binary given, by what its stamp says, or
// "unknown"), and says when the tree changed during the run.
func TestRenderMeasured(t *testing.T) {
	p := testPage(kernelTLS{})
	built := &bench.Build{Tree: bench.Tree{Head: "89abcdef", Fingerprint: "aa"}, At: time.Date(2026, 1, 2, 2, 50, 0, 0, time.UTC),
		Version: "engine dev go1.26 linux/amd64 (commit 89abcdef, working tree clean)"}
	p.servers = []*server{
		{id: "engine", name: "engine", about: "two processes", binary: &engineBinary{build: built, version: built.Version, sha: "0123456789abcdef0123"}},
		{id: "baseline", name: baselineName, about: "two processes", binary: &engineBinary{origin: "--baseline /tmp/old", sha: "fedcba9876543210ff",
			version: "engine dev go1.26 linux/amd64 (commit 76543210, working tree modified, fingerprint 4f1c2a9b0d3e)"}},
		{name: "nginx", about: "nginx/1.22.1"},
	}
	p.cells = nil
	for range p.rows {
		p.cells = append(p.cells, map[string]*cell{"engine": {}, baselineName: {}, "nginx": {}})
	}
	p.treeChanged = "changed: engine/server.go"
	doc := render(p)
	for _, want := range []string{
		"Measured:\n\n- **engine**: built by this run at 02:50 UTC from commit 89abcdef, clean; SHA-256 0123456789abcdef; `engine version`: `engine dev go1.26 linux/amd64 (commit 89abcdef, working tree clean)`.\n",
		"- **engine (baseline)**: --baseline /tmp/old, commit 76543210, working tree modified, fingerprint 4f1c2a9b0d3e (as its version says); SHA-256 fedcba9876543210;",
		"**The working tree changed during the run** (changed: engine/server.go)",
		"- **engine**: the binary described above; two processes\n",
		"- **nginx**: nginx/1.22.1\n",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}
	unstamped := &engineBinary{origin: "--engine /tmp/e", version: "engine dev go1.26 linux/amd64", sha: "00"}
	if got := unstamped.describe(); !strings.Contains(got, "--engine /tmp/e, commit unknown (its version names no commit") {
		t.Errorf("an unstamped binary: %q", got)
	}
}
