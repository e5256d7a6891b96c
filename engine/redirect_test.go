package engine_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestRedirectHTTP: the [redirect_http] listener answers 308 to the
// https:// URL of every name the TLS listener serves, path and query as
// sent, and 421 (no Location) for any other Host, so that it is never an
// open redirect.
func TestRedirectHTTP(t *testing.T) {
	dir := t.TempDir()
	pki := newPKI(t, dir, "media.example.com")
	toml := fmt.Sprintf(`listen = "127.0.0.1:0"
[kernel]
ktls = "auto"
[[sites]]
domain = "media.example.com"
root = %q
[sites.tls]
cert = %q
key = %q
[[sites]]
domain = "*.cdn.example.com"
root = %q
[redirect_http]
listen = "127.0.0.1:0"
`, dir, pki.certFile, pki.keyFile, dir)
	srv := start(t, toml)
	port := portOf(srv.addr)

	c := dial(t, srv.RedirectAddr())
	for _, tc := range []struct {
		req, status, location string
	}{
		{"GET /a/b?x=1&y=%20z HTTP/1.1\r\nHost: media.example.com\r\n\r\n", "308", "https://media.example.com:" + port + "/a/b?x=1&y=%20z"},
		{"GET /? HTTP/1.1\r\nHost: MEDIA.Example.COM.:80\r\n\r\n", "308", "https://media.example.com:" + port + "/?"},
		{"GET //evil.example/x HTTP/1.1\r\nHost: media.example.com\r\n\r\n", "308", "https://media.example.com:" + port + "//evil.example/x"},
		{"GET /v.mp4 HTTP/1.1\r\nHost: a.cdn.example.com\r\n\r\n", "308", "https://a.cdn.example.com:" + port + "/v.mp4"},
		{"POST /upload HTTP/1.1\r\nHost: media.example.com\r\nContent-Length: 5\r\n\r\nhello", "308", "https://media.example.com:" + port + "/upload"},
		{"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", "421", ""},
		{"GET / HTTP/1.1\r\nHost: cdn.example.com\r\n\r\n", "421", ""},
		{"GET http://evil.example/ HTTP/1.1\r\nHost: media.example.com\r\n\r\n", "421", ""},
		{"GET /.well-known/acme-challenge/x HTTP/1.1\r\nHost: media.example.com\r\n\r\n", "308", "https://media.example.com:" + port + "/.well-known/acme-challenge/x"},
		{"GET /a\"b?q=<x>'{|}^` HTTP/1.1\r\nHost: media.example.com\r\n\r\n", "308", "https://media.example.com:" + port + "/a%22b?q=%3Cx%3E'%7B%7C%7D%5E%60"},
	} {
		c.send(tc.req)
		resp, body := c.response("GET")
		if fmt.Sprint(resp.StatusCode) != tc.status || resp.Header.Get("Location") != tc.location {
			t.Errorf("%q: %d Location %q, want %s %q", tc.req, resp.StatusCode, resp.Header.Get("Location"), tc.status, tc.location)
		}
		if len(body) == 0 || resp.ContentLength != int64(len(body)) {
			t.Errorf("%q: body of %d bytes, Content-Length %d", tc.req, len(body), resp.ContentLength)
		}
	}
	c.send("HEAD /x HTTP/1.1\r\nHost: media.example.com\r\n\r\n")
	if resp, body := c.response("HEAD"); resp.StatusCode != 308 || len(body) != 0 {
		t.Errorf("HEAD: %d with %d body bytes", resp.StatusCode, len(body))
	}
	// HTTP/1.0 without Host: nothing to redirect to.
	c2 := dial(t, srv.RedirectAddr())
	c2.send("GET / HTTP/1.0\r\n\r\n")
	if resp, _ := c2.response("GET"); resp.StatusCode != 421 || resp.Header.Get("Location") != "" {
		t.Errorf("HTTP/1.0 without Host: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A Host that is not a host.
	c3 := dial(t, srv.RedirectAddr())
	c3.send("GET / HTTP/1.1\r\nHost: media.example.com/evil\r\n\r\n")
	if resp, _ := c3.response("GET"); resp.StatusCode != 400 {
		t.Errorf("bad Host: %d, want 400", resp.StatusCode)
	}
	// The TLS listener is not disturbed, and no TLS on the plain one.
	if st := srv.Stats(); st.Redirects != 8 {
		t.Errorf("Redirects = %d, want 8", st.Redirects)
	}
}

// TestRedirectHTTPPort: https_port writes the port clients reach (behind
// a NAT or a load balancer); 443 is left out of Location.
func TestRedirectHTTPPort(t *testing.T) {
	dir := t.TempDir()
	pki := newPKI(t, dir, "media.example.com")
	for _, tc := range []struct{ port, want string }{{"8443", "https://media.example.com:8443/x?q"}, {"443", "https://media.example.com/x?q"}} {
		srv := start(t, fmt.Sprintf("listen = \"127.0.0.1:0\"\n[kernel]\nktls = \"auto\"\n[[sites]]\ndomain = \"media.example.com\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n[redirect_http]\nlisten = \"127.0.0.1:0\"\nhttps_port = %s\n",
			dir, pki.certFile, pki.keyFile, tc.port))
		c := dial(t, srv.RedirectAddr())
		c.send("GET /x?q HTTP/1.1\r\nHost: media.example.com\r\n\r\n")
		resp, _ := c.response("GET")
		if got := resp.Header.Get("Location"); resp.StatusCode != 308 || got != tc.want {
			t.Errorf("https_port %s: %d %q, want 308 %q", tc.port, resp.StatusCode, got, tc.want)
		}
		if strings.Contains(resp.Header.Get("Location"), "\r") {
			t.Error("CR in Location")
		}
	}
}
