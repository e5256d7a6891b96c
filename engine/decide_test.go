package engine_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOneDecision drives one table of requests through HTTP/1.1, HTTP/2
// and HTTP/3 and requires the same decision from each: the same status,
// the same access log line but for the protocol (site, method, path,
// status), the same upstream reached, and the same log line for a
// request refused a route.
func TestOneDecision(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(rootA, "f.txt"), "file-a")
	writeFile(t, filepath.Join(rootB, "f.txt"), "file-b")
	a := newPKI(t, t.TempDir(), "a.test")
	b := newPKI(t, t.TempDir(), "b.test")
	up, hits := countingBackend(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	logs := &syncBuffer{}
	ts := startLog(t, fmt.Sprintf(`access_log = %q
access_log_format = "json"
[[sites]]
domain = "a.test"
root = %q
[sites.tls]
cert = %q
key = %q
[[sites]]
domain = "b.test"
root = %q
[sites.tls]
cert = %q
key = %q
[reverse_proxy]
enabled = true
[reverse_proxy.tls]
cert = %[3]q
key = %[4]q
[[reverse_proxy.routes]]
domain = "a.test"
path_prefix = "/api/"
upstreams = [%[8]q]
`+ktlsAuto, logPath, rootA, a.certFile, a.keyFile, rootB, b.certFile, b.keyFile, up.hostPort()), logs)

	type row struct {
		sni, host, method, path string
		status                  int
		site, body              string // body "" when not checked
		upstream                bool   // the upstream answers it
	}
	rows := []row{
		{"a.test", "a.test", "GET", "/f.txt", 200, "a.test", "file-a", false},
		{"a.test", "A.TEST.", "GET", "/f.txt", 200, "a.test", "file-a", false},
		{"b.test", "b.test", "GET", "/f.txt", 200, "b.test", "file-b", false},
		{"a.test", "b.test", "GET", "/f.txt", 421, "b.test", "", false},
		{"a.test", "a.test", "POST", "/f.txt", 405, "a.test", "", false},
		{"a.test", "b.test", "POST", "/f.txt", 421, "b.test", "", false},
		{"a.test", "nothing.test", "GET", "/f.txt", 421, "a.test", "", false},
		{"a.test", "a.test", "GET", "/nope", 404, "a.test", "", false},
		{"a.test", "a.test", "GET", "/api/x", 200, "a.test", "upstream a.test /api/x", true},
		{"a.test", "a.test", "DELETE", "/api/x", 200, "a.test", "upstream a.test /api/x", true},
		{"b.test", "a.test", "GET", "/api/y", 421, "a.test", "", false},
		{"a.test", "a.test", "GET", "/api/%2e%2e/z", 400, "a.test", "", false},
	}
	pool := map[string]*testPKI{"a.test": a, "b.test": b}
	protos := []string{"h1", "h2", "h3"}
	for i, r := range rows {
		for _, proto := range protos {
			before := hits.Load()
			// The query tags the request's access log line.
			target := fmt.Sprintf("%s?row=%d&proto=%s", r.path, i, proto)
			code, body, err := namedRequest(t, ts.addr, pool[r.sni].pool, proto, r.method, r.sni, r.host, target, false)
			if err != nil {
				t.Fatalf("%s row %d %+v: %v", proto, i, r, err)
			}
			if code != r.status || r.body != "" && body != r.body {
				t.Errorf("%s row %d %+v: %d %q", proto, i, r, code, body)
			}
			if reached := hits.Load() > before; reached != r.upstream {
				t.Errorf("%s row %d %+v: upstream reached %v, want %v", proto, i, r, reached, r.upstream)
			}
		}
	}
	ts.stop()

	// The access log: one line per request, alike but for the protocol.
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type line struct {
		Site, Method, Path, Protocol string
		Status                       int
	}
	got := map[string]line{} // by row and protocol
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("access log line %q: %v", sc.Text(), err)
		}
		_, q, _ := strings.Cut(l.Path, "?")
		got[q] = l
	}
	for i, r := range rows {
		for _, proto := range protos {
			tag := fmt.Sprintf("row=%d&proto=%s", i, proto)
			l, ok := got[tag]
			want := line{Site: r.site, Method: r.method, Path: fmt.Sprintf("%s?%s", r.path, tag), Status: r.status, Protocol: l.Protocol}
			if !ok || l != want {
				t.Errorf("%s row %d %+v: access log %+v, want %+v", proto, i, r, l, want)
			}
		}
	}

	// A request refused a route is logged alike from each protocol.
	drop := regexp.MustCompile(`time=\S+ | loop=\d+| peer=\S+`)
	for _, path := range []string{"/api/y", "/api/%2e%2e/z"} {
		var lines []string
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, `msg="proxy: request refused"`) && strings.Contains(l, "path="+path+" ") {
				lines = append(lines, drop.ReplaceAllString(l, ""))
			}
		}
		if len(lines) != len(protos) || lines[0] != lines[1] || lines[1] != lines[2] {
			t.Errorf("refusals of %s logged %d times, want %d alike:\n%s", path, len(lines), len(protos), strings.Join(lines, "\n"))
		}
	}
}
