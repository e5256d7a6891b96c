package engine_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
)

// countingBackend is an upstream that answers "upstream HOST PATH" and
// counts the requests it saw.
func countingBackend(t *testing.T) (*backend, *atomic.Int64) {
	var n atomic.Int64
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, "upstream "+r.Host+" "+r.URL.Path)
	}))
	return b, &n
}

// namedGet sends one GET over a fresh connection whose handshake names sni
// (TLS 1.2 at most when v12), with Host host, over proto: "h1", "h2" or
// "h3". It returns the status and body.
func namedGet(t *testing.T, addr string, pool *x509.CertPool, proto, sni, host, path string, v12 bool) (int, string, error) {
	t.Helper()
	return namedRequest(t, addr, pool, proto, "GET", sni, host, path, v12)
}

// namedRequest is namedGet with another method.
func namedRequest(t *testing.T, addr string, pool *x509.CertPool, proto, method, sni, host, path string, v12 bool) (int, string, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: pool, ServerName: sni}
	if v12 {
		cfg.MaxVersion = tls.VersionTLS12
	}
	var rt http.RoundTripper
	switch proto {
	case "h1":
		tr := &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		rt = tr
	case "h2":
		tr := &http2.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		rt = tr
	case "h3":
		tr := &http3.Transport{TLSClientConfig: cfg}
		defer tr.Close()
		rt = tr
	}
	req, err := http.NewRequest(method, "https://"+addr+path, nil)
	if err != nil {
		// A target url.Parse refuses ("/x/%u002e") goes as written.
		req, _ = http.NewRequest(method, "https://"+addr+"/", nil)
		req.URL.Opaque = path
	}
	req.Host = host
	resp, err := (&http.Client{Transport: rt, Timeout: scale(20 * time.Second)}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && proto != "h3" && (v12 && resp.TLS.Version != tls.VersionTLS12 || !v12 && resp.TLS.Version != tls.VersionTLS13) {
		t.Fatalf("%s SNI %s: negotiated TLS %x", proto, sni, resp.TLS.Version)
	}
	return resp.StatusCode, string(body), err
}

// TestMisdirectedRouteVersion: the TLS facts of a connection (the name
// its handshake chose, the version it settled on) must be ones the
// request's Host would have been given, whether a site or a proxy route
// answers that Host. One certificate covers every name here, so only the
// minimum version tells them apart. A TLS 1.2 client naming a site that
// allows 1.2 cannot reach a TLS 1.3-only route by its Host (the upstream
// sees nothing), nor, with routes that allow 1.2, a 1.3-only site through
// a route's name; what the facts allow is served on HTTP/1.1, HTTP/2 and
// HTTP/3.
func TestMisdirectedRouteVersion(t *testing.T) {
	root := siteRoot(t)
	pki := newPKI(t, t.TempDir(), "old.test", "new.test", "api.test")
	up, seen := countingBackend(t)
	conf := func(proxyMin string) string {
		return fmt.Sprintf(ktlsAuto+`
[[sites]]
domain = "old.test"
root = %[1]q
[sites.tls]
cert = %[2]q
key = %[3]q
min_version = "1.2"
[[sites]]
domain = "new.test"
root = %[1]q
[sites.tls]
cert = %[2]q
key = %[3]q
[reverse_proxy]
enabled = true
[reverse_proxy.tls]
cert = %[2]q
key = %[3]q
min_version = %[5]q
[[reverse_proxy.routes]]
domain = "api.test"
upstreams = [%[4]q]
[[reverse_proxy.routes]]
domain = "new.test"
path_prefix = "/api/"
upstreams = [%[4]q]
`, root, pki.certFile, pki.keyFile, up.hostPort(), proxyMin)
	}
	type check struct {
		proto, sni, host, path string
		v12                    bool
		want                   int
	}
	run := func(ts *testServer, checks []check) {
		t.Helper()
		for _, c := range checks {
			before := seen.Load()
			code, body, err := namedGet(t, ts.addr, pki.pool, c.proto, c.sni, c.host, c.path, c.v12)
			if err != nil {
				t.Errorf("%s SNI %s Host %s %s (TLS 1.2: %v): %v", c.proto, c.sni, c.host, c.path, c.v12, err)
				continue
			}
			if code != c.want {
				t.Errorf("%s SNI %s Host %s %s (TLS 1.2: %v): %d %.60q, want %d", c.proto, c.sni, c.host, c.path, c.v12, code, body, c.want)
			}
			if n := seen.Load() - before; c.want == 421 && n != 0 {
				t.Errorf("%s SNI %s Host %s %s (TLS 1.2: %v): refused, yet the upstream saw %d request(s)", c.proto, c.sni, c.host, c.path, c.v12, n)
			}
			if c.want == 200 && strings.HasPrefix(c.path, "/api/") != strings.HasPrefix(body, "upstream ") {
				t.Errorf("%s SNI %s Host %s %s: answered %.60q by the wrong side", c.proto, c.sni, c.host, c.path, body)
			}
		}
	}

	// Routes TLS 1.3 only ([reverse_proxy.tls] and new.test's own).
	ts := start(t, conf("1.3"))
	var checks []check
	for _, p := range []string{"h1", "h2"} {
		checks = append(checks,
			// A 1.3-only route, by Host, on a 1.2 connection made for a
			// site that allows 1.2: refused before the upstream.
			check{p, "old.test", "api.test", "/api/x", true, 421},
			check{p, "old.test", "new.test", "/api/x", true, 421},
			check{p, "old.test", "new.test", "/alpha.txt", true, 421},
			// The same over 1.3, which every name accepts with this
			// certificate; and each name by itself.
			check{p, "old.test", "api.test", "/api/x", false, 200},
			check{p, "old.test", "new.test", "/api/x", false, 200},
			check{p, "api.test", "api.test", "/api/x", false, 200},
			check{p, "new.test", "new.test", "/api/x", false, 200},
			check{p, "old.test", "old.test", "/alpha.txt", true, 200},
		)
	}
	checks = append(checks,
		check{"h3", "old.test", "api.test", "/api/x", false, 200},
		check{"h3", "api.test", "api.test", "/api/x", false, 200},
		check{"h3", "new.test", "new.test", "/api/x", false, 200},
	)
	run(ts, checks)
	ts.stop()

	// Routes that allow TLS 1.2: api.test's name no longer reaches the
	// 1.3-only site (nor new.test's route) over 1.2.
	ts = start(t, conf("1.2"))
	checks = nil
	for _, p := range []string{"h1", "h2"} {
		checks = append(checks,
			check{p, "api.test", "new.test", "/alpha.txt", true, 421},
			check{p, "api.test", "new.test", "/api/x", true, 421},
			check{p, "api.test", "api.test", "/api/x", true, 200},
			check{p, "api.test", "old.test", "/alpha.txt", true, 200},
			check{p, "api.test", "new.test", "/alpha.txt", false, 200},
		)
	}
	run(ts, checks)
}

// TestMisdirectedRouteCertificate: a site and a route with certificates
// of their own. A connection made for one (its certificate) does not
// carry requests for the other, in either direction, on HTTP/1.1, HTTP/2
// and HTTP/3; each is served on its own.
func TestMisdirectedRouteCertificate(t *testing.T) {
	root := siteRoot(t)
	site := newPKI(t, t.TempDir(), "files.test")
	proxy := newPKI(t, t.TempDir(), "api.test", "files.test")
	pool := site.pool.Clone()
	pool.AppendCertsFromPEM(mustRead(t, proxy.caFile))
	up, seen := countingBackend(t)
	ts := start(t, fmt.Sprintf(ktlsAuto+`
[[sites]]
domain = "files.test"
root = %q
[sites.tls]
cert = %q
key = %q
[reverse_proxy]
enabled = true
[reverse_proxy.tls]
cert = %q
key = %q
[[reverse_proxy.routes]]
domain = "api.test"
upstreams = [%q]
[[reverse_proxy.routes]]
domain = "files.test"
path_prefix = "/api/"
upstreams = [%[6]q]
`, root, site.certFile, site.keyFile, proxy.certFile, proxy.keyFile, up.hostPort()))
	for _, p := range []string{"h1", "h2", "h3"} {
		for _, c := range []struct {
			sni, host, path string
			want            int
		}{
			{"files.test", "files.test", "/alpha.txt", 200},
			{"files.test", "files.test", "/api/x", 200},
			{"api.test", "api.test", "/api/x", 200},
			// The route's name (its certificate, which also covers
			// files.test) does not reach the site, nor the site's name
			// the route.
			{"api.test", "files.test", "/alpha.txt", 421},
			{"api.test", "files.test", "/api/x", 421},
			{"files.test", "api.test", "/api/x", 421},
		} {
			before := seen.Load()
			code, body, err := namedGet(t, ts.addr, pool, p, c.sni, c.host, c.path, false)
			if err != nil {
				t.Errorf("%s SNI %s Host %s %s: %v", p, c.sni, c.host, c.path, err)
				continue
			}
			if code != c.want {
				t.Errorf("%s SNI %s Host %s %s: %d %.60q, want %d", p, c.sni, c.host, c.path, code, body, c.want)
			}
			if n := seen.Load() - before; c.want == 421 && n != 0 {
				t.Errorf("%s SNI %s Host %s %s: refused, yet the upstream saw %d request(s)", p, c.sni, c.host, c.path, n)
			}
		}
	}
}

// TestUnservedName: a handshake for a name no site and no route names
// (or for no name) is refused with unrecognized_name, over TCP and QUIC,
// unless something takes such names (here a site marked default), and a
// request naming one on another name's connection gets 421 unless the
// default would have answered it with the same facts.
func TestUnservedName(t *testing.T) {
	root := siteRoot(t)
	a := newPKI(t, t.TempDir(), "a.test", "api.test")
	up, _ := countingBackend(t)
	conf := func(def bool) string {
		return fmt.Sprintf(ktlsAuto+`
[[sites]]
domain = "a.test"
root = %[1]q
default = %[5]v
[sites.tls]
cert = %[2]q
key = %[3]q
[reverse_proxy]
enabled = true
[reverse_proxy.tls]
cert = %[2]q
key = %[3]q
[[reverse_proxy.routes]]
domain = "api.test"
upstreams = [%[4]q]
`, root, a.certFile, a.keyFile, up.hostPort(), def)
	}
	// The client checks nothing but who answers: a name nothing serves
	// has no certificate of its own to check.
	insecure := func(sni string) *tls.Config { return &tls.Config{ServerName: sni, InsecureSkipVerify: true} }

	logs := &syncBuffer{}
	ts := startLog(t, conf(false), logs)
	for _, sni := range []string{"nothing.test", ""} {
		c, err := tls.Dial("tcp", ts.addr, insecure(sni))
		if err == nil {
			c.Close()
			t.Errorf("TCP handshake with SNI %q completed; want unrecognized_name", sni)
		} else if !strings.Contains(err.Error(), "unrecognized name") {
			t.Errorf("TCP handshake with SNI %q: %v; want unrecognized_name", sni, err)
		}
		c12, err := tls.Dial("tcp", ts.addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
		if err == nil {
			c12.Close()
			t.Errorf("TLS 1.2 handshake with SNI %q completed; want unrecognized_name", sni)
		} else if !strings.Contains(err.Error(), "unrecognized name") {
			t.Errorf("TLS 1.2 handshake with SNI %q: %v; want unrecognized_name", sni, err)
		}
	}
	if !waitFor(scale(5*time.Second), func() bool { return strings.Contains(logs.String(), "no site or route serves the server name") }) {
		t.Errorf("the refused handshakes' log lines do not say why:\n%s", logs)
	}
	tr := &http3.Transport{TLSClientConfig: insecure("nothing.test")}
	if resp, err := (&http.Client{Transport: tr, Timeout: scale(20 * time.Second)}).Get("https://" + ts.addr + "/alpha.txt"); err == nil {
		resp.Body.Close()
		t.Errorf("QUIC handshake with SNI nothing.test completed; want unrecognized_name")
	} else if !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("QUIC handshake with SNI nothing.test: %v; want unrecognized_name", err)
	}
	tr.Close()
	for _, p := range []string{"h1", "h2", "h3"} {
		for _, c := range []struct {
			sni, host, path string
			want            int
		}{
			{"a.test", "a.test", "/alpha.txt", 200},
			{"api.test", "api.test", "/x", 200},
			{"a.test", "nothing.test", "/alpha.txt", 421},
			{"api.test", "nothing.test", "/alpha.txt", 421},
			{"a.test", "127.0.0.1", "/alpha.txt", 421},
		} {
			if code, body, err := namedGet(t, ts.addr, a.pool, p, c.sni, c.host, c.path, false); err != nil || code != c.want {
				t.Errorf("no default: %s SNI %s Host %s: %d %.60q %v, want %d", p, c.sni, c.host, code, body, err, c.want)
			}
		}
	}
	ts.stop()

	// a.test marked default takes every name nothing names, with its own
	// certificate and facts.
	ts = start(t, conf(true))
	for _, sni := range []string{"nothing.test", ""} {
		c, err := tls.Dial("tcp", ts.addr, insecure(sni))
		if err != nil {
			t.Errorf("with a default site: handshake with SNI %q: %v", sni, err)
			continue
		}
		if names := c.ConnectionState().PeerCertificates[0].DNSNames; len(names) == 0 || names[0] != "a.test" {
			t.Errorf("with a default site: SNI %q got the certificate of %v, want a.test's", sni, names)
		}
		c.Close()
	}
	for _, p := range []string{"h1", "h2", "h3"} {
		for _, c := range []struct {
			sni, host string
			want      int
		}{
			{"a.test", "nothing.test", 200},
			{"a.test", "127.0.0.1", 200},
			{"api.test", "nothing.test", 200}, // the same certificate and version
		} {
			if code, body, err := namedGet(t, ts.addr, a.pool, p, c.sni, c.host, "/alpha.txt", false); err != nil || code != c.want {
				t.Errorf("default site: %s SNI %s Host %s: %d %.60q %v, want %d", p, c.sni, c.host, code, body, err, c.want)
			}
		}
	}
}

// TestMalformedHost: an authority HTTP/1.1's parser refuses (a port that
// is no number, a "port" that is a name, a wildcard) is refused on every
// protocol, never served from the connection's site: 400 on HTTP/1.1 and
// HTTP/3, the stream reset on HTTP/2 (RFC 9113 §8.1.1: malformed).
func TestMalformedHost(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "secret.txt"), "secret-a")
	pki := newPKI(t, t.TempDir(), "a.test")
	ts := start(t, fmt.Sprintf(ktlsAuto+"[[sites]]\ndomain = \"a.test\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n",
		root, pki.certFile, pki.keyFile))
	for _, host := range []string{"a.test:abc", "a.test:99999", "a.test:b.test", ":b.test", "*.a.test"} {
		for _, proto := range []string{"h1", "h2", "h3"} {
			code, body, err := namedGet(t, ts.addr, pki.pool, proto, "a.test", host, "/secret.txt", false)
			switch {
			case proto == "h2" && err != nil && strings.Contains(err.Error(), "PROTOCOL_ERROR"):
			case err != nil:
				t.Errorf("%s Host %q: %v", proto, host, err)
			case code != 400:
				t.Errorf("%s Host %q: %d %q; want 400", proto, host, code, body)
			}
		}
	}
}

// TestMisdirectedFirst: a request whose Host the connection's facts do
// not serve is answered 421 whatever its method, on every protocol, not
// 405 as if the other site had judged it.
func TestMisdirectedFirst(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(rootA, "f.txt"), "a")
	writeFile(t, filepath.Join(rootB, "f.txt"), "b")
	a := newPKI(t, t.TempDir(), "a.test")
	b := newPKI(t, t.TempDir(), "b.test")
	ts := start(t, fmt.Sprintf(ktlsAuto+"[[sites]]\ndomain = \"a.test\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n"+
		"[[sites]]\ndomain = \"b.test\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n",
		rootA, a.certFile, a.keyFile, rootB, b.certFile, b.keyFile))
	for _, proto := range []string{"h1", "h2", "h3"} {
		for _, method := range []string{"POST", "DELETE", "GET"} {
			if code, body, err := namedRequest(t, ts.addr, a.pool, proto, method, "a.test", "b.test", "/f.txt", false); err != nil || code != 421 {
				t.Errorf("%s %s with Host b.test on a.test's connection: %d %q %v; want 421", proto, method, code, body, err)
			}
		}
		if code, _, err := namedRequest(t, ts.addr, a.pool, proto, "POST", "a.test", "a.test", "/f.txt", false); err != nil || code != 405 {
			t.Errorf("%s POST to a.test: %d %v; want 405", proto, code, err)
		}
	}
}

// TestMisdirectedTLSPolicy: a name's key_exchanges and session_tickets
// = false are its connection's facts too: a request naming it on a
// connection whose handshake named another name, one that allows key
// exchanges or tickets it does not, is 421; the other way round is
// served.
func TestMisdirectedTLSPolicy(t *testing.T) {
	root := siteRoot(t)
	pki := newPKI(t, t.TempDir(), "s1.test", "s3.test", "s4.test")
	site := func(name, extra string) string {
		return fmt.Sprintf("[[sites]]\ndomain = %q\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n%s", name, root, pki.certFile, pki.keyFile, extra)
	}
	ts := start(t, ktlsAuto+site("s1.test", "")+site("s3.test", "key_exchanges = [\"P-384\"]\n")+site("s4.test", "session_tickets = false\n"))
	for _, tc := range []struct {
		sni, host string
		want      int
	}{
		{"s1.test", "s3.test", 421},
		{"s1.test", "s4.test", 421},
		{"s3.test", "s1.test", 200},
		{"s4.test", "s1.test", 200},
		{"s3.test", "s3.test", 200},
	} {
		for _, proto := range []string{"h1", "h2", "h3"} {
			code, _, err := namedRequest(t, ts.addr, pki.pool, proto, "GET", tc.sni, tc.host, "/index.html", false)
			if err != nil || code != tc.want {
				t.Errorf("%s SNI %s Host %s: %d %v, want %d", proto, tc.sni, tc.host, code, err, tc.want)
			}
		}
	}
}
