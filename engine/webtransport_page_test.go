package engine_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/wt"
)

// TestDiagnosticsPage: a GET of the endpoint's path answers the
// diagnostics page over HTTP/1.1, HTTP/2 and HTTP/3, with the endpoint's
// limits and the certificate's hash written in and a policy that runs
// only its own script and style; HEAD answers its head, another method
// 405. With page = false, or without [webtransport], the path is a
// site's like any other (404 here).
func TestDiagnosticsPage(t *testing.T) {
	root := t.TempDir()
	wt := "[webtransport]\nenabled = true\nmax_bytes_per_session = \"8MiB\"\nmax_streams_per_session = 3\n"
	ts, pki := startTLS(t, root, ktlsAuto+wt)
	url := "https://localhost:" + portOf(ts.addr) + "/.well-known/engine/diagnostics"
	leaf := readCert(t, pki.certFile)
	sum := sha256.Sum256(leaf.Raw)
	h3, _ := h3Client(t, pki)
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"h1", pki.client(nil)}, {"h2", h2Client(pki)}, {"h3", h3}} {
		resp, err := c.client.Get(url)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("%s: %d %q, want 200 text/html", c.name, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		for _, want := range []string{`"max_bytes_per_session":8388608`, `"max_streams_per_session":3`,
			`"certificate_hashes":["` + hex.EncodeToString(sum[:]) + `"]`, `<title>engine: WebTransport diagnostics</title>`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("%s: the page lacks %s", c.name, want)
			}
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.HasPrefix(csp, "default-src 'none'; script-src 'sha256-") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", c.name, csp)
		}
		if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: Cache-Control %q, X-Content-Type-Options %q", c.name, resp.Header.Get("Cache-Control"), resp.Header.Get("X-Content-Type-Options"))
		}
	}
	for method, want := range map[string]int{"HEAD": 200, "POST": 405, "DELETE": 405} {
		req, _ := http.NewRequest(method, url, nil)
		resp, err := pki.client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || method == "HEAD" && (len(b) != 0 || resp.ContentLength < 1000) {
			t.Errorf("%s: %d with %d body bytes (Content-Length %d), want %d", method, resp.StatusCode, len(b), resp.ContentLength, want)
		}
	}
	for name, extra := range map[string]string{"page = false": wt + "page = false\n", "no [webtransport]": ""} {
		other, pki := startTLS(t, root, ktlsAuto+extra)
		resp, err := pki.client(nil).Get("https://localhost:" + portOf(other.addr) + "/.well-known/engine/diagnostics")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("%s: GET of the path is %d, want 404 (the site's)", name, resp.StatusCode)
		}
	}
}

// readCert reads the first certificate of a PEM file.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOwnOrigin: a session from the endpoint's own origin (https:// + its
// :authority) needs no allowed_origins entry when a site names that host
// (by itself or a wildcard), or the host is an IP literal or localhost;
// not when only "*" answers the name, where a page elsewhere could take
// it by DNS rebinding and pass the certificate's published hash (outside
// attack finding 3).
func TestOwnOrigin(t *testing.T) {
	pki := newPKI(t, t.TempDir(), "localhost")
	root := t.TempDir()
	ts := start(t, fmt.Sprintf(ktlsAuto+`[[sites]]
domain = "*"
root = %q
[sites.tls]
cert = %q
key = %q
[[sites]]
domain = "*.media.test"
root = %q
[sites.tls]
cert = %q
key = %q
[webtransport]
enabled = true
`, root, pki.certFile, pki.keyFile, root, pki.certFile, pki.keyFile))
	port := portOf(ts.addr)
	for _, tc := range []struct {
		host   string // the :authority's host and the SNI
		origin string
		want   int
	}{
		{"evil.test", "https://evil.test:" + port, 403},       // only "*" names it
		{"a.media.test", "https://a.media.test:" + port, 200}, // a wildcard site names it
		{"a.media.test", "https://b.media.test:" + port, 403}, // another host
		{"a.media.test", "http://a.media.test:" + port, 403},  // another scheme
		{"127.0.0.1", "https://127.0.0.1:" + port, 200},       // an IP literal
		{"localhost", "https://localhost:" + port, 200},       // localhost
		{"localhost", "https://localhost:" + port + "0", 403}, // another port
	} {
		ctx, cancel := context.WithTimeout(context.Background(), scale(10*time.Second))
		c, err := wt.DialConn(ctx, ts.addr, &tls.Config{InsecureSkipVerify: true, ServerName: tc.host}, nil)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		s, resp, err := c.Dial(ctx, "https://"+net.JoinHostPort(tc.host, port)+"/.well-known/engine/diagnostics?mode=echo",
			http.Header{"Origin": {tc.origin}})
		got := 0
		if resp != nil {
			got = resp.StatusCode
		}
		if got != tc.want {
			t.Errorf(":authority %s, Origin %s: %d (%v), want %d", tc.host, tc.origin, got, err, tc.want)
		}
		if s != nil {
			s.Close(0, "")
		}
		c.Close()
		cancel()
	}
}

// TestDiagnosticsPageAutorun: the page starts its tests from ?run=1 only
// when the browser says the user opened it or it led to itself
// (Sec-Fetch-Site none or same-origin); from another site, or from a
// client that does not say, it waits for its Run button (outside attack
// finding 2).
func TestDiagnosticsPageAutorun(t *testing.T) {
	ts, pki := startTLS(t, t.TempDir(), ktlsAuto+"[webtransport]\nenabled = true\n")
	url := "https://localhost:" + portOf(ts.addr) + "/.well-known/engine/diagnostics?run=1"
	for site, want := range map[string]bool{"none": true, "same-origin": true, "same-site": false, "cross-site": false, "": false} {
		req, _ := http.NewRequest("GET", url, nil)
		if site != "" {
			req.Header.Set("Sec-Fetch-Site", site)
		}
		resp, err := pki.client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), fmt.Sprintf(`"autorun":%v`, want)) {
			t.Errorf("Sec-Fetch-Site %q: the page does not say autorun %v", site, want)
		}
	}
}
