package engine_test

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
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
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n"+wt)
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
		other, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n"+extra)
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
