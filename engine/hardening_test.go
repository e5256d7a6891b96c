package engine_test

// Regression tests for what an outside attack on the running server
// found: each waiting state has a deadline, and names and paths from
// clients never become links, redirects or extra work.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/ktls"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// longWaits keeps every timeout but the one a test is about far away, so
// a close can only come from the deadline under test.
const longWaits = "header_timeout = \"60s\"\nidle_timeout = \"60s\"\nsend_timeout = \"60s\"\nbody_timeout = \"60s\"\n"

// limits returns a [limits] table: longWaits with the lines of the given
// keys ("key", "value", ...) replaced.
func limits(over ...string) string {
	lines := strings.Split(strings.TrimSpace(longWaits), "\n")
	for i, l := range lines {
		for j := 0; j+1 < len(over); j += 2 {
			if strings.HasPrefix(l, over[j]+" ") {
				lines[i] = fmt.Sprintf("%s = %q", over[j], over[j+1])
			}
		}
	}
	return "[limits]\n" + strings.Join(lines, "\n") + "\n"
}

// TestBodyNeverSent: a request that announces a body and never sends it
// gets its answer, and the connection is closed at body_timeout (nginx's
// body timeout), on plain TCP and over TLS; such connections cannot lock
// other clients out at max_connections.
func TestBodyNeverSent(t *testing.T) {
	root := siteRoot(t)
	cases := []struct{ name, req string }{
		{"content-length", "GET /alpha.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"},
		{"chunked", "GET /alpha.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"chunk half sent", "GET /alpha.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc"},
		{"trailer unfinished", "GET /alpha.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: 1"},
	}
	t.Run("plain", func(t *testing.T) {
		ts := start(t, fmt.Sprintf("root = %q\n", root)+limits("body_timeout", "1s"))
		for _, tc := range cases {
			c := dial(t, ts.addr)
			c.send(tc.req)
			if resp, body := c.response("GET"); resp.StatusCode != 200 || string(body) != "abcdefghijklmnopqrstuvwxyz" {
				t.Errorf("%s: %d %q", tc.name, resp.StatusCode, body)
			}
			if !c.closed(scale(10 * time.Second)) {
				t.Errorf("%s: connection open past body_timeout (1s)", tc.name)
			}
		}
	})
	t.Run("drip", func(t *testing.T) {
		// A body trickled a byte at a time is still cut off: the deadline
		// is for the whole body, not between bytes.
		ts := start(t, fmt.Sprintf("root = %q\n", root)+limits("body_timeout", "1s"))
		c := dial(t, ts.addr)
		c.send("GET /alpha.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
		c.response("GET")
		t0 := time.Now()
		for time.Since(t0) < scale(10*time.Second) {
			if _, err := c.Write([]byte{'x'}); err != nil {
				break
			}
			if c.closed(200 * time.Millisecond) {
				break
			}
		}
		if !c.closed(time.Millisecond) {
			t.Error("a dripped body kept the connection open")
		}
	})
	t.Run("TLS", func(t *testing.T) {
		ts, pki := startTLS(t, root, ktlsAuto+limits("body_timeout", "1s"))
		for _, tc := range cases {
			conn, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			io.WriteString(conn, tc.req)
			conn.SetDeadline(time.Now().Add(scale(10 * time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s: %v %v", tc.name, resp, err)
			}
			io.ReadAll(resp.Body)
			if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s over TLS: connection open past body_timeout (1s): %v", tc.name, err)
			}
		}
	})
	t.Run("lockout", func(t *testing.T) {
		ts := start(t, fmt.Sprintf("root = %q\nworkers = 1\n", root)+limits("body_timeout", "1s")+"max_connections = 3\n")
		for i := 0; i < 3; i++ {
			c := dial(t, ts.addr)
			c.send(cases[0].req)
			c.response("GET")
		}
		if !waitFor(scale(10*time.Second), func() bool { return ts.Stats().Open == 0 }) {
			t.Fatalf("%d connections waiting for bodies still hold their slots", ts.Stats().Open)
		}
		c := dial(t, ts.addr)
		c.send(get("/alpha.txt"))
		if resp, _ := c.response("GET"); resp.StatusCode != 200 {
			t.Errorf("a fresh client got %d", resp.StatusCode)
		}
	})
}

// TestFirstRequestHeaderTimeout: a connection that sends nothing, or
// starts its first request and stops, is closed at header_timeout (as
// nginx does), not idle_timeout; for TLS the handshake counts too, and for
// HTTP/2 the preface and first HEADERS.
func TestFirstRequestHeaderTimeout(t *testing.T) {
	root := siteRoot(t)
	cfg := limits("header_timeout", "1s")
	t.Run("plain", func(t *testing.T) {
		ts := start(t, fmt.Sprintf("root = %q\n", root)+cfg)
		if c := dial(t, ts.addr); !c.closed(scale(10 * time.Second)) {
			t.Error("silent connection open past header_timeout")
		}
		// One byte at once, then the rest slowly: the deadline runs from
		// accept, not from the first byte.
		c := dial(t, ts.addr)
		t0 := time.Now()
		c.send("G")
		time.Sleep(700 * time.Millisecond)
		c.send("ET /alpha.txt HTTP/1.1\r\n")
		if !c.closed(scale(10*time.Second)) || time.Since(t0) > scale(10*time.Second) {
			t.Error("first request head open past header_timeout from accept")
		}
	})
	t.Run("TLS", func(t *testing.T) {
		ts, pki := startTLS(t, root, ktlsAuto+cfg)
		raw := dial(t, ts.addr) // no ClientHello at all
		if !raw.closed(scale(10 * time.Second)) {
			t.Error("connection without a ClientHello open past header_timeout")
		}
		conn, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(scale(10 * time.Second)))
		if _, err := conn.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Error("TLS connection without a request open past header_timeout")
		}
	})
	t.Run("h2", func(t *testing.T) {
		ts, pki := startTLS(t, root, ktlsAuto+cfg)
		r := dialH2(t, ts.addr, pki)
		r.conn.SetReadDeadline(time.Now().Add(scale(10 * time.Second)))
		for {
			if _, err := r.read(); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Error("HTTP/2 connection without a request open past header_timeout")
				}
				break
			}
		}
	})
	t.Run("idle after a request", func(t *testing.T) {
		// After a response, idle_timeout (60s here) applies, not
		// header_timeout: a keep-alive connection stays.
		ts := start(t, fmt.Sprintf("root = %q\n", root)+cfg)
		c := dial(t, ts.addr)
		c.send(get("/alpha.txt"))
		c.response("GET")
		if c.closed(2500 * time.Millisecond) {
			t.Error("keep-alive connection closed at header_timeout instead of idle_timeout")
		}
	})
}

// TestH2HeaderBlockTimeout: HEADERS without END_HEADERS and no
// CONTINUATION blocks the whole connection (RFC 9113 §6.10); it ends with
// GOAWAY ENHANCE_YOUR_CALM at header_timeout, not idle_timeout.
func TestH2HeaderBlockTimeout(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto+limits("header_timeout", "1s"))
	r := dialH2(t, ts.addr, pki)
	r.get(1, "/alpha.txt")
	r.until(scale(10*time.Second), func(f http2.Frame) bool {
		return f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream)
	})
	r.eb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/alpha.txt"}, {":authority", "localhost"}} {
		r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: r.eb.Bytes(), EndStream: true, EndHeaders: false})
	r.until(scale(10*time.Second), isGoAway(http2.ErrCodeEnhanceYourCalm))
	if n := ts.Stats().H2Events["header block timeout"]; n != 1 {
		t.Errorf("header block timeouts counted %d, want 1", n)
	}
}

// TestH3StreamWithoutHeaders: a request stream whose HEADERS never come
// (the client keeping QUIC alive with PINGs) cannot hold the connection:
// it is closed idle_timeout after the last request.
func TestH3StreamWithoutHeaders(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto+limits("idle_timeout", "2s"))
	ctx, cancel := context.WithTimeout(context.Background(), scale(10*time.Second))
	defer cancel()
	conn, err := quic.DialAddr(ctx, ts.addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost", NextProtos: []string{"h3"}},
		&quic.Config{KeepAlivePeriod: 300 * time.Millisecond, MaxIdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	str, err := conn.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	// Half a HEADERS frame: type, a length of 100, and 3 bytes.
	str.Write(append(quicvarint.Append(quicvarint.Append(nil, 0x01), 100), 1, 2, 3))
	select {
	case <-conn.Context().Done():
	case <-time.After(scale(15 * time.Second)):
		t.Fatal("a stream without HEADERS held its connection past idle_timeout")
	}
}

// TestListingLinks: names an uploader chose never become markup or a
// link elsewhere in a directory listing; every link leads to its file.
func TestListingLinks(t *testing.T) {
	root := t.TempDir()
	names := []string{"javascript:alert(document.domain)", `quote"d`, "<b>bold", "a&b", "#frag", "?query",
		"100%", "two words", "new\nline", "bad\xffutf8", "café", "data:text,x"}
	for i, n := range names {
		writeFile(t, filepath.Join(root, "d", n), fmt.Sprintf("file %d", i))
	}
	ts := start(t, fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\ndirectory_listing = true\n", root))
	resp, err := http.Get(ts.url + "/d/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	links := regexp.MustCompile(`<a href="([^"]*)">`).FindAllStringSubmatch(string(page), -1)
	if len(links) != len(names)+1 {
		t.Fatalf("%d links for %d names:\n%s", len(links), len(names), page)
	}
	if strings.Contains(string(page), "<b>") || strings.Contains(string(page), `href="javascript`) {
		t.Errorf("a name became markup or a scheme:\n%s", page)
	}
	base, _ := url.Parse(ts.url + "/d/")
	got := map[string]bool{}
	for _, l := range links[1:] {
		ref, err := url.Parse(l[1])
		if err != nil || ref.Scheme != "" || ref.Host != "" {
			t.Errorf("link %q is not relative: %v", l[1], err)
			continue
		}
		u := base.ResolveReference(ref)
		r, err := http.Get(u.String())
		if err != nil {
			t.Errorf("following %q: %v", l[1], err)
			continue
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("link %q: %d", l[1], r.StatusCode)
		}
		got[string(body)] = true
	}
	for i, n := range names {
		if !got[fmt.Sprintf("file %d", i)] {
			t.Errorf("no link leads to %q", n)
		}
	}
}

// TestDirectoryRedirect: the slash redirect is built from the cleaned
// path: "//evil.example" never becomes "Location: //evil.example/".
func TestDirectoryRedirect(t *testing.T) {
	root := siteRoot(t)
	os.MkdirAll(filepath.Join(root, "evil.example"), 0o755)
	os.MkdirAll(filepath.Join(root, "a b"), 0o755)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	for _, tc := range []struct{ path, want string }{
		{"//evil.example", "/evil.example/"},
		{"///evil.example", "/evil.example/"},
		{"/%2Fevil.example", "/evil.example/"},
		{"/./evil.example", "/evil.example/"},
		{"/%2F%2Fevil.example?x=1", "/evil.example/?x=1"},
		{"/docs", "/docs/"},
		{"/a%20b", "/a%20b/"},
	} {
		c := dial(t, ts.addr)
		c.send("GET " + tc.path + " HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, _ := c.response("GET")
		if loc := resp.Header.Get("Location"); resp.StatusCode != 301 || loc != tc.want {
			t.Errorf("GET %s: %d Location %q, want 301 %q", tc.path, resp.StatusCode, loc, tc.want)
		}
	}
}

// TestChunkedTrailerBareLF: a bare LF where the trailer section starts is
// refused; the request pipelined after it is never answered.
func TestChunkedTrailerBareLF(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	c := dial(t, ts.addr)
	c.send("GET /index.html HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\nGET /alpha.txt HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := c.response("GET")
	if resp.StatusCode != 200 || string(body) != "<h1>home</h1>\n" {
		t.Errorf("first request: %d %q", resp.StatusCode, body)
	}
	if !c.closed(scale(3 * time.Second)) {
		t.Error("connection open after a bare LF in the trailer section: the next request could be swallowed or smuggled")
	}
}

// TestRangesCoalesced: overlapping and adjacent ranges are merged; ranges
// adding up to more than the file get the whole file.
func TestRangesCoalesced(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	const alpha = "abcdefghijklmnopqrstuvwxyz"
	for _, tc := range []struct {
		rng, cr, body string
		status        int
	}{
		{"bytes=0-,0-", "", alpha, 200},
		{"bytes=0-25,0-25,0-25", "", alpha, 200},
		{"bytes=0-5,3-9", "bytes 0-9/26", alpha[:10], 206},
		{"bytes=10-12,0-4,5-9", "bytes 0-12/26", alpha[:13], 206},
	} {
		c := dial(t, ts.addr)
		c.send(get("/alpha.txt", "Range: "+tc.rng+"\r\n"))
		resp, body := c.response("GET")
		if resp.StatusCode != tc.status || string(body) != tc.body || resp.Header.Get("Content-Range") != tc.cr {
			t.Errorf("Range %s: %d %q Content-Range %q; want %d %q %q", tc.rng, resp.StatusCode, body,
				resp.Header.Get("Content-Range"), tc.status, tc.body, tc.cr)
		}
	}
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt", "Range: bytes=0-1,4-5,3-3\r\n"))
	resp, body := c.response("GET")
	if resp.StatusCode != 206 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "multipart/byteranges") ||
		strings.Count(string(body), "Content-Range:") != 2 || !strings.Contains(string(body), "bytes 3-5/26") {
		t.Errorf("disjoint and adjacent ranges: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	// The boundary is chosen per response, so no file can contain it in
	// advance and forge parts.
	c.send(get("/alpha.txt", "Range: bytes=0-1,4-5\r\n"))
	resp2, _ := c.response("GET")
	if b1, b2 := resp.Header.Get("Content-Type"), resp2.Header.Get("Content-Type"); b1 == b2 || len(b1) < len("multipart/byteranges; boundary=")+20 {
		t.Errorf("multipart boundaries %q and %q: fixed or short", b1, b2)
	}
}

// TestHiddenFiles: hidden_files = "deny" answers 404 for dotfiles and dot
// directories (not /.well-known/) and leaves them out of listings; the
// default serves them, as nginx does.
func TestHiddenFiles(t *testing.T) {
	root := siteRoot(t)
	writeFile(t, filepath.Join(root, ".env"), "SECRET=1")
	writeFile(t, filepath.Join(root, ".git/config"), "[core]")
	writeFile(t, filepath.Join(root, "sub/.htpasswd"), "x")
	writeFile(t, filepath.Join(root, ".well-known/security.txt"), "Contact: x")
	deny := start(t, fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\nhidden_files = \"deny\"\ndirectory_listing = true\n", root))
	serve := start(t, fmt.Sprintf("root = %q\n", root))
	for _, tc := range []struct {
		path       string
		deny, open int
	}{
		{"/.env", 404, 200}, {"/.git/config", 404, 200}, {"/sub/.htpasswd", 404, 200},
		{"/%2egit/config", 404, 200}, {"/.git/", 404, 404}, {"/.well-known/security.txt", 200, 200}, {"/alpha.txt", 200, 200},
	} {
		for _, s := range []struct {
			ts   *testServer
			want int
		}{{deny, tc.deny}, {serve, tc.open}} {
			c := dial(t, s.ts.addr)
			c.send(get(tc.path))
			if resp, _ := c.response("GET"); resp.StatusCode != s.want {
				t.Errorf("GET %s: %d, want %d", tc.path, resp.StatusCode, s.want)
			}
		}
	}
	// Symbolic links inside the root that lead to dotfiles are judged by
	// where they lead.
	os.Symlink("../.env", filepath.Join(root, "sub", "env"))
	os.Symlink(".git", filepath.Join(root, "gitdir"))
	os.Symlink(".env", filepath.Join(root, "index.html.gz"))
	for _, tc := range []struct {
		path       string
		deny, open int
	}{{"/sub/env", 404, 200}, {"/gitdir/config", 404, 200}} {
		for _, s := range []struct {
			ts   *testServer
			want int
		}{{deny, tc.deny}, {serve, tc.open}} {
			c := dial(t, s.ts.addr)
			c.send(get(tc.path))
			if resp, _ := c.response("GET"); resp.StatusCode != s.want {
				t.Errorf("GET %s: %d, want %d", tc.path, resp.StatusCode, s.want)
			}
		}
	}
	c := dial(t, deny.addr)
	c.send(get("/index.html", "Accept-Encoding: gzip\r\n"))
	if _, body := c.response("GET"); strings.Contains(string(body), "SECRET") {
		t.Error("a precompressed sidecar linked to a dotfile was served")
	}
	c = dial(t, deny.addr)
	c.send(get("/sub/"))
	if resp, body := c.response("GET"); resp.StatusCode != 200 || strings.Contains(string(body), "htpasswd") {
		t.Errorf("listing with hidden_files = deny: %d\n%s", resp.StatusCode, body)
	}
}

// TestDataAfterCloseNotify: application data after the client's
// close_notify is ignored (RFC 8446 §6.1); what came before is answered.
func TestDataAfterCloseNotify(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto)
	c := dialRawTLS(t, ts.addr, pki)
	c.inject(ktls.RecordApplicationData, []byte(get("/alpha.txt")))
	c.inject(ktls.RecordAlert, []byte{1, 0}) // close_notify
	c.inject(ktls.RecordApplicationData, []byte(get("/index.html")))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("request before close_notify: %d %q", resp.StatusCode, body)
	}
	if resp, err := http.ReadResponse(c.r, nil); err == nil {
		t.Errorf("a request after close_notify was answered: %s", resp.Status)
	}

	// A request and close_notify in one write (one TCP segment): the
	// request is answered at once, then the connection closes.
	c = dialRawTLS(t, ts.addr, pki)
	req, _ := c.seal.Seal(nil, ktls.RecordApplicationData, []byte(get("/alpha.txt")))
	req, _ = c.seal.Seal(req, ktls.RecordAlert, []byte{1, 0})
	c.raw.Write(req)
	c.raw.SetReadDeadline(time.Now().Add(scale(3 * time.Second)))
	resp, err = http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("request sent with close_notify: %v", err)
	}
	if body, _ := io.ReadAll(resp.Body); string(body) != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("request sent with close_notify: %d %q", resp.StatusCode, body)
	}
}

// TestMisdirectedSNI: a request whose Host names a site with another TLS
// policy than the site its SNI chose (certificate, minimum version) is
// answered 421, over HTTP/1.1 and HTTP/2; one with the same policy is
// served.
func TestMisdirectedSNI(t *testing.T) {
	root := siteRoot(t)
	a := newPKI(t, t.TempDir(), "a.test")
	b := newPKI(t, t.TempDir(), "b.test")
	ts := start(t, fmt.Sprintf(ktlsAuto+`
[[sites]]
domain = "a.test"
root = %[1]q
[sites.tls]
cert = %[2]q
key = %[3]q
min_version = "1.2"
[[sites]]
domain = "c.test"
root = %[1]q
[sites.tls]
cert = %[2]q
key = %[3]q
[[sites]]
domain = "b.test"
root = %[1]q
[sites.tls]
cert = %[4]q
key = %[5]q
`, root, a.certFile, a.keyFile, b.certFile, b.keyFile))
	pool := a.pool.Clone()
	pool.AppendCertsFromPEM(mustRead(t, b.caFile))
	for _, tc := range []struct {
		name      string
		sni, host string
		version   uint16
		h2        bool
		want      int
	}{
		{"same site", "a.test", "a.test", tls.VersionTLS12, false, 200},
		{"1.3-only site by Host over 1.2", "a.test", "c.test", tls.VersionTLS12, false, 421},
		{"1.3-only site by Host over 1.2, h2", "a.test", "c.test", tls.VersionTLS12, true, 421},
		{"same certificate over 1.3", "a.test", "c.test", tls.VersionTLS13, false, 200},
		{"other certificate", "a.test", "b.test", tls.VersionTLS13, false, 421},
		{"other certificate, h2", "a.test", "b.test", tls.VersionTLS13, true, 421},
		{"Host with port and case", "b.test", "B.TEST:443", tls.VersionTLS13, false, 200},
	} {
		cfg := &tls.Config{RootCAs: pool, ServerName: tc.sni, MaxVersion: tc.version}
		var c *http.Client
		if tc.h2 {
			c = &http.Client{Transport: &http2.Transport{TLSClientConfig: cfg}}
		} else {
			c = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		}
		req, _ := http.NewRequest("GET", "https://"+ts.addr+"/alpha.txt", nil)
		req.Host = tc.host
		resp, err := c.Do(req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: SNI %s Host %s TLS %x: %d, want %d", tc.name, tc.sni, tc.host, resp.TLS.Version, resp.StatusCode, tc.want)
		}
	}
}

// TestMisdirectedSNIH3: the same rule over HTTP/3 (always TLS 1.3, so
// only the certificate can differ).
func TestMisdirectedSNIH3(t *testing.T) {
	root := siteRoot(t)
	a := newPKI(t, t.TempDir(), "a.test")
	b := newPKI(t, t.TempDir(), "b.test")
	ts := start(t, fmt.Sprintf(ktlsAuto+"[[sites]]\ndomain = \"a.test\"\nroot = %[1]q\n[sites.tls]\ncert = %[2]q\nkey = %[3]q\n"+
		"[[sites]]\ndomain = \"b.test\"\nroot = %[1]q\n[sites.tls]\ncert = %[4]q\nkey = %[5]q\n", root, a.certFile, a.keyFile, b.certFile, b.keyFile))
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: a.pool, ServerName: "a.test"}}
	defer tr.Close()
	for host, want := range map[string]int{"a.test": 200, "b.test": 421} {
		req, _ := http.NewRequest("GET", "https://"+ts.addr+"/alpha.txt", nil)
		req.Host = host
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("HTTP/3, SNI a.test, Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHashOnce: a file opened as several cache entries (under several
// names) while it is being hashed is hashed once, not once per entry;
// every entry gets the digest when the one hashing finishes.
func TestHashOnce(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "sparse.bin")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// 2 GiB of holes: a second or more of hashing, no disk.
	if err := f.Truncate(2 << 30); err != nil {
		t.Skipf("no sparse files here: %v", err)
	}
	f.Close()
	// Other names for the same file: each is an entry of its own in the
	// open-file cache, with the same content identity (a chmod or a hard
	// link would change the file's change time, so its identity).
	for i := range 3 {
		if err := os.Symlink("sparse.bin", filepath.Join(root, fmt.Sprintf("alias%d.bin", i))); err != nil {
			t.Fatal(err)
		}
	}
	ts := start(t, fmt.Sprintf("root = %q\n[integrity]\nworkers = 1\n", root))
	head := func(name string) *http.Response {
		c := dial(t, ts.addr)
		c.send("HEAD /" + name + " HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, _ := c.response("HEAD")
		return resp
	}
	head("sparse.bin") // queues hashing
	for i := range 3 {
		head(fmt.Sprintf("alias%d.bin", i))
	}
	if !waitFor(scale(60*time.Second), func() bool { return head("sparse.bin").Header.Get("Repr-Digest") != "" }) {
		t.Fatal("no digest after a minute")
	}
	st := ts.Stats()
	if st.HashesJoined == 0 {
		t.Fatalf("the file was hashed before it was asked for again (hashed %d); the test did not exercise a second entry", st.FilesHashed)
	}
	if st.FilesHashed != 1 {
		t.Errorf("the file was hashed %d times, want once", st.FilesHashed)
	}
}

// TestH2WindowTrickle: a stream window reopened a byte at a time does not
// hold the stream (and its connection slot): it is reset at send_timeout
// as a shut window is.
func TestH2WindowTrickle(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto+limits("send_timeout", "1s"))
	r := dialH2(t, ts.addr, pki, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	r.fr.WriteWindowUpdate(0, 1<<30)
	r.get(1, "/big.bin")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				r.mu.Lock()
				r.fr.WriteWindowUpdate(1, 1)
				r.mu.Unlock()
			}
		}
	}()
	f := r.until(scale(15*time.Second), func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst := f.(*http2.RSTStreamFrame); rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeCancel {
		t.Fatalf("reset %v", rst)
	}
}

// TestH2ProvokedResets: streams the client makes the server reset (a
// zero WINDOW_UPDATE after each request: MadeYouReset, CVE-2025-8671)
// spend the rapid-reset budget: the connection ends with GOAWAY
// ENHANCE_YOUR_CALM.
func TestH2ProvokedResets(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto)
	r := dialH2(t, ts.addr, pki)
	r.fr.AllowIllegalWrites = true
	go func() {
		for id := uint32(1); id < 5000; id += 2 {
			r.get(id, "/alpha.txt")
			r.mu.Lock()
			err := r.fr.WriteWindowUpdate(id, 0)
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	r.until(scale(15*time.Second), isGoAway(http2.ErrCodeEnhanceYourCalm))
	if n := ts.Stats().H2Events["rapid reset"]; n != 1 {
		t.Errorf("rapid reset events %d, want 1", n)
	}
}

// TestSilentConnectionsCannotLockOut: connections that never send a
// request cannot keep new clients out at max_connections: the oldest
// waiting one makes room.
func TestSilentConnectionsCannotLockOut(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\nworkers = 1\n", root)+limits()+"max_connections = 4\n")
	// A client that has begun its request outlasts connections that have
	// sent nothing.
	begun := dial(t, ts.addr)
	begun.send("GET /alpha.txt HTTP/1.1\r\n")
	time.Sleep(50 * time.Millisecond)
	for i := 0; i < 12; i++ {
		dial(t, ts.addr) // silent: no request
		time.Sleep(10 * time.Millisecond)
		if open := ts.Stats().Open; open > 4 {
			t.Fatalf("%d connections open, max_connections = 4", open)
		}
	}
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt"))
	if resp, _ := c.response("GET"); resp.StatusCode != 200 {
		t.Errorf("a client behind silent connections got %d", resp.StatusCode)
	}
	if st := ts.Stats(); st.Reclaimed < 8 {
		t.Errorf("Reclaimed %d, want at least 8", st.Reclaimed)
	}
	begun.send("Host: x\r\n\r\n")
	if resp, _ := begun.response("GET"); resp.StatusCode != 200 {
		t.Errorf("the client that had begun its request got %d", resp.StatusCode)
	}
}

// TestH2StreamRotation: a client that never opens a window but keeps a new
// stream waiting before the last is reset cannot hold its connection: it
// ends with GOAWAY ENHANCE_YOUR_CALM about send_timeout after its
// responses stopped progressing.
func TestH2StreamRotation(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto+limits("send_timeout", "1s"))
	r := dialH2(t, ts.addr, pki, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for id := uint32(1); ; id += 2 {
			r.get(id, "/big.bin")
			select {
			case <-stop:
				return
			case <-time.After(700 * time.Millisecond):
			}
		}
	}()
	r.until(scale(15*time.Second), isGoAway(http2.ErrCodeEnhanceYourCalm))
}
