package engine_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
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
	// An upstream that takes requests and never answers: 504, whose log
	// line names it (as nginx's $upstream_addr and $upstream_status) with
	// no header time.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			go io.Copy(io.Discard, c)
		}
	}()
	logPath := filepath.Join(t.TempDir(), "access.log")
	logs := &syncBuffer{}
	// shutdown_grace: quic-go's client may leave a connection open after
	// a stream its server reset; the engine's stop then waits for it.
	ts := startLog(t, fmt.Sprintf(`shutdown_grace = "2s"
access_log = %q
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
[[reverse_proxy.routes]]
domain = "a.test"
path_prefix = "/silent/"
upstreams = [%[9]q]
response_timeout = "300ms"
`+ktlsAuto, logPath, rootA, a.certFile, a.keyFile, rootB, b.certFile, b.keyFile, up.hostPort(), silent.Addr().String()), logs)

	type row struct {
		sni, host, method, path string
		status                  int
		site, body              string // body "" when not checked
		upstream                bool   // the upstream answers it
		silent                  bool   // the silent upstream times out on it
	}
	rows := []row{
		{"a.test", "a.test", "GET", "/f.txt", 200, "a.test", "file-a", false, false},
		{"a.test", "A.TEST.", "GET", "/f.txt", 200, "a.test", "file-a", false, false},
		{"b.test", "b.test", "GET", "/f.txt", 200, "b.test", "file-b", false, false},
		{"a.test", "b.test", "GET", "/f.txt", 421, "b.test", "", false, false},
		{"a.test", "a.test", "POST", "/f.txt", 405, "a.test", "", false, false},
		{"a.test", "b.test", "POST", "/f.txt", 421, "b.test", "", false, false},
		{"a.test", "nothing.test", "GET", "/f.txt", 421, "a.test", "", false, false},
		{"a.test", "a.test", "GET", "/nope", 404, "a.test", "", false, false},
		{"a.test", "a.test", "GET", "/api/x", 200, "a.test", "upstream a.test /api/x", true, false},
		{"a.test", "a.test", "DELETE", "/api/x", 200, "a.test", "upstream a.test /api/x", true, false},
		{"b.test", "a.test", "GET", "/api/y", 421, "a.test", "", false, false},
		{"a.test", "a.test", "GET", "/api/%2e%2e/z", 400, "a.test", "", false, false},
		{"a.test", "a.test", "TRACE", "/api/x", 405, "a.test", "", false, false},
		{"a.test", "a.test", "GET", "/ap%69/x", 200, "a.test", "upstream a.test /api/x", true, false},
		{"a.test", "a.test", "GET", "//api/x", 200, "a.test", "upstream a.test //api/x", true, false},
		{"a.test", "a.test", "GET", "/api/%u002e", 400, "a.test", "", false, false},
		{"a.test", "a.test", "GET", "/silent/x", 504, "a.test", "", false, true},
	}
	pool := map[string]*testPKI{"a.test": a, "b.test": b}
	protos := []string{"h1", "h2", "h3"}
	for i, r := range rows {
		for _, proto := range protos {
			before := hits.Load()
			// The query tags the request's access log line.
			target := fmt.Sprintf("%s?row=%d&proto=%s", r.path, i, proto)
			code, body, err := namedRequest(t, ts.addr, pool[r.sni].pool, proto, r.method, r.sni, r.host, target, false)
			if proto == "h3" && unparsable(r.path) {
				// quic-go's server resets the stream itself.
				if err == nil {
					t.Errorf("%s row %d %+v: %d, want the stream reset by quic-go", proto, i, r, code)
				}
				continue
			}
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
		// The upstream's address and status on proxied lines, null
		// (here "" and 0) on the others; its header time is timed.
		Upstream       string
		UpstreamStatus int  `json:"upstream_status"`
		Timed          bool `json:"-"`
	}
	got := map[string]line{} // by row and protocol
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		var timed struct {
			T *float64 `json:"upstream_header_time"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("access log line %q: %v", sc.Text(), err)
		}
		json.Unmarshal(sc.Bytes(), &timed)
		l.Timed = timed.T != nil && *timed.T > 0
		_, q, _ := strings.Cut(l.Path, "?")
		got[q] = l
	}
	for i, r := range rows {
		for _, proto := range protos {
			if proto == "h3" && unparsable(r.path) {
				continue
			}
			tag := fmt.Sprintf("row=%d&proto=%s", i, proto)
			l, ok := got[tag]
			want := line{Site: r.site, Method: r.method, Path: fmt.Sprintf("%s?%s", r.path, tag), Status: r.status, Protocol: l.Protocol}
			if r.upstream {
				want.Upstream, want.UpstreamStatus, want.Timed = up.hostPort(), r.status, true
			}
			if r.silent {
				want.Upstream, want.UpstreamStatus = silent.Addr().String(), r.status
			}
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

// unparsable reports whether Go's url package refuses a request target,
// as quic-go's HTTP/3 server does before the engine sees it.
func unparsable(target string) bool {
	_, err := url.ParseRequestURI(target)
	return err != nil
}

// TestMostSpecificNameWins: a name goes to whatever names it most
// specifically, site or route (exact, then the longest wildcard, then
// "*"), on every protocol, as its certificate and minimum version are
// chosen; a route's wildcard or "*" does not take a name a site names
// more specifically.
func TestMostSpecificNameWins(t *testing.T) {
	rootA, rootB, rootC := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(rootA, "f.txt"), "file-a")
	writeFile(t, filepath.Join(rootB, "f.txt"), "file-b")
	writeFile(t, filepath.Join(rootC, "f.txt"), "file-c")
	pki := newPKI(t, t.TempDir(), "exact.p.test", "*.p.test", "*.s.p.test", "z.s.p.test", "named.test", "unnamed.test")
	up, hits := countingBackend(t)
	site := func(domain, root string) string {
		return fmt.Sprintf("[[sites]]\ndomain = %q\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\nmin_version = \"1.2\"\n",
			domain, root, pki.certFile, pki.keyFile)
	}
	ts := start(t, site("exact.p.test", rootA)+site("*.s.p.test", rootB)+site("named.test", rootC)+
		fmt.Sprintf(`[reverse_proxy]
enabled = true
[reverse_proxy.tls]
cert = %q
key = %q
min_version = "1.3"
[[reverse_proxy.routes]]
domain = "*.p.test"
upstreams = [%[3]q]
[[reverse_proxy.routes]]
domain = "*"
upstreams = [%[3]q]
[[reverse_proxy.routes]]
domain = "z.s.p.test"
path_prefix = "/api/"
upstreams = [%[3]q]
`, pki.certFile, pki.keyFile, up.hostPort())+ktlsAuto)

	rows := []struct {
		name, body string // body "" for the upstream
		v12        bool
	}{
		{"exact.p.test", "file-a", false},
		{"exact.p.test", "file-a", true}, // the site's minimum version, not the route's
		{"x.s.p.test", "file-b", false},
		{"x.s.p.test", "file-b", true},
		{"named.test", "file-c", false},
		{"other.p.test", "", false},
		{"unnamed.test", "", false},
	}
	for _, r := range rows {
		for _, proto := range []string{"h1", "h2", "h3"} {
			if r.v12 && proto == "h3" {
				continue // QUIC is TLS 1.3
			}
			before := hits.Load()
			code, body, err := namedRequest(t, ts.addr, pki.pool, proto, "GET", r.name, r.name, "/f.txt", r.v12)
			if err != nil {
				t.Fatalf("%s %+v: %v", proto, r, err)
			}
			want := r.body
			if want == "" {
				want = "upstream " + r.name + " /f.txt"
			}
			if code != 200 || body != want {
				t.Errorf("%s %+v: %d %q, want 200 %q", proto, r, code, body, want)
			}
			if reached := hits.Load() > before; reached != (r.body == "") {
				t.Errorf("%s %+v: upstream reached %v", proto, r, reached)
			}
		}
	}
	// A name a route's domain names more specifically than any site's
	// (z.s.p.test over *.s.p.test): a path none of its prefixes takes is
	// 404, not the less specific site's file under the route's facts.
	for _, proto := range []string{"h1", "h2", "h3"} {
		before := hits.Load()
		code, body, err := namedRequest(t, ts.addr, pki.pool, proto, "GET", "z.s.p.test", "z.s.p.test", "/f.txt", false)
		if err != nil || code != 404 || strings.Contains(body, "file-b") || hits.Load() != before {
			t.Errorf("%s z.s.p.test /f.txt: %d %q %v; want 404 from no site", proto, code, body, err)
		}
	}
}

// TestPassthroughMostSpecific: a passthrough wildcard relays only the
// names no site or terminating route names more specifically.
func TestPassthroughMostSpecific(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "f.txt"), "file-a")
	origin := startTLSOrigin(t, "x.pt.test", digestOrigin("origin"))
	pki := newPKI(t, t.TempDir(), "*.site.pt.test", "*.t.pt.test")
	up, hits := countingBackend(t)
	ts := start(t, passthroughConfig(fmt.Sprintf(`[[sites]]
domain = "*.site.pt.test"
root = %q
[sites.tls]
cert = %q
key = %q
`, root, pki.certFile, pki.keyFile)+ktlsAuto, "*.pt.test", origin.addr)+fmt.Sprintf(`[reverse_proxy.tls]
cert = %q
key = %q
[[reverse_proxy.routes]]
domain = "*.t.pt.test"
tls_termination = true
upstreams = [%q]
`, pki.certFile, pki.keyFile, up.hostPort()))

	msg := []byte("through the relay")
	got, cn, err := passRoundTrip(ts.addr, "x.pt.test", &tls.Config{RootCAs: origin.pki.pool}, nil, msg)
	if err != nil || cn != "x.pt.test" || got != digestLine("origin", msg) {
		t.Errorf("x.pt.test: %q from %q, %v; want the origin's relayed answer", got, cn, err)
	}
	for _, proto := range []string{"h1", "h2"} {
		code, body, err := namedRequest(t, ts.addr, pki.pool, proto, "GET", "a.site.pt.test", "a.site.pt.test", "/f.txt", false)
		if err != nil || code != 200 || body != "file-a" {
			t.Errorf("%s a.site.pt.test: %d %q %v; want the site's file", proto, code, body, err)
		}
		before := hits.Load()
		code, body, err = namedRequest(t, ts.addr, pki.pool, proto, "GET", "a.t.pt.test", "a.t.pt.test", "/x", false)
		if err != nil || code != 200 || body != "upstream a.t.pt.test /x" || hits.Load() == before {
			t.Errorf("%s a.t.pt.test: %d %q %v; want the terminating route's upstream", proto, code, body, err)
		}
	}
}
