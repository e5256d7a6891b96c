package engine_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// twoSites is a config of two TLS sites with certificates of their own,
// a.test (first) and b.test, each serving file with its body; extraA and
// extraB are more keys of each [[sites]] and [sites.tls] table.
func twoSites(t *testing.T, file, bodyA, bodyB, extraA, extraB string) string {
	rootA, rootB := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(rootA, file), bodyA)
	writeFile(t, filepath.Join(rootB, file), bodyB)
	a := newPKI(t, t.TempDir(), "a.test")
	b := newPKI(t, t.TempDir(), "b.test")
	return fmt.Sprintf(ktlsAuto+`
[[sites]]
domain = "a.test"
root = %q
%s
[sites.tls]
cert = %q
key = %q
[[sites]]
domain = "b.test"
root = %q
[sites.tls]
cert = %q
key = %q
%s
`, rootA, extraA, a.certFile, a.keyFile, rootB, b.certFile, b.keyFile, extraB)
}

// TestRequestWithoutHost: a request on a TLS connection that names no
// host (HTTP/1.0 without Host, an empty, "." or port-only Host, an
// HTTP/2 request without :authority) is routed and judged by the name
// its handshake was for, never handed to the first site past the
// certificate and minimum version its connection had; one on a
// connection whose handshake named nothing either goes to the default,
// whose facts that handshake had. The first
// site (a.test) is TLS 1.3 only with a certificate of its own; b.test
// takes TLS 1.2 with another.
func TestRequestWithoutHost(t *testing.T) {
	conf := func(def string) string {
		return twoSites(t, "secret.txt", "secret-a", "site-b", def, `min_version = "1.2"`)
	}
	ts := start(t, conf(""))
	dial := func(sni string, v12 bool) *tls.Conn {
		t.Helper()
		cfg := &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}
		if v12 {
			cfg.MaxVersion = tls.VersionTLS12
		}
		c, err := tls.Dial("tcp", ts.addr, cfg)
		if err != nil {
			t.Fatalf("handshake with SNI %q: %v", sni, err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(scale(20 * time.Second)))
		return c
	}
	h1 := func(c *tls.Conn, request string) (int, string) {
		t.Helper()
		io.WriteString(c, request)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", request, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	for _, req := range []string{
		"GET /secret.txt HTTP/1.0\r\n\r\n",
		"GET /secret.txt HTTP/1.0\r\nHost: \r\n\r\n",
		"GET /secret.txt HTTP/1.1\r\nHost: .\r\nConnection: close\r\n\r\n",
		"GET /secret.txt HTTP/1.1\r\nHost: :443\r\nConnection: close\r\n\r\n",
		"GET https://:443/secret.txt HTTP/1.1\r\nHost: :443\r\nConnection: close\r\n\r\n",
	} {
		for _, v12 := range []bool{true, false} {
			if code, body := h1(dial("b.test", v12), req); code != 200 || body != "site-b" {
				t.Errorf("SNI b.test (TLS 1.2 at most: %v), %q: %d %q; want b.test's file", v12, req, code, body)
			}
		}
		if code, body := h1(dial("a.test", false), req); code != 200 || body != "secret-a" {
			t.Errorf("SNI a.test, %q: %d %q; want a.test's file", req, code, body)
		}
	}

	// HTTP/2 without :authority: the Host field names the site, else
	// the SNI does.
	h2 := func(sni string, fields ...string) (string, string) {
		t.Helper()
		c, err := tls.Dial("tcp", ts.addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"h2"}, MaxVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("h2 handshake with SNI %q: %v", sni, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(scale(20 * time.Second)))
		fr := http2.NewFramer(c, c)
		io.WriteString(c, http2.ClientPreface)
		fr.WriteSettings()
		var eb bytes.Buffer
		enc := hpack.NewEncoder(&eb)
		for i := 0; i+1 < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: eb.Bytes(), EndStream: true, EndHeaders: true})
		var status string
		var body []byte
		dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
			if f.Name == ":status" {
				status = f.Value
			}
		})
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("h2 SNI %s %v: %v", sni, fields, err)
			}
			switch f := f.(type) {
			case *http2.HeadersFrame:
				dec.Write(f.HeaderBlockFragment())
				if f.StreamEnded() {
					return status, string(body)
				}
			case *http2.DataFrame:
				body = append(body, f.Data()...)
				if f.StreamEnded() {
					return status, string(body)
				}
			case *http2.RSTStreamFrame, *http2.GoAwayFrame:
				t.Fatalf("h2 SNI %s %v: %v", sni, fields, f)
			}
		}
	}
	base := []string{":method", "GET", ":scheme", "https", ":path", "/secret.txt"}
	if status, body := h2("b.test", append(base, "host", "b.test")...); status != "200" || body != "site-b" {
		t.Errorf("h2 SNI b.test, no :authority, host b.test: %s %q; want b.test's file", status, body)
	}
	if status, body := h2("b.test", base...); status != "200" || body != "site-b" {
		t.Errorf("h2 SNI b.test, no :authority nor host: %s %q; want b.test's file", status, body)
	}
	if status, body := h2("b.test", append(base, "host", "a.test")...); status != "421" {
		t.Errorf("h2 SNI b.test over TLS 1.2, no :authority, host a.test: %s %q; want 421", status, body)
	}

	// HTTP/3 with an authority that names no host.
	tr := &http3.Transport{TLSClientConfig: &tls.Config{ServerName: "b.test", InsecureSkipVerify: true}}
	defer tr.Close()
	for _, host := range []string{".", ":" + portOf(ts.addr)} {
		req, _ := http.NewRequest("GET", "https://"+ts.addr+"/secret.txt", nil)
		req.Host = host
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("h3 Host %q: %v", host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "site-b" {
			t.Errorf("h3 SNI b.test, Host %q: %d %q; want b.test's file", host, resp.StatusCode, body)
		}
	}
	ts.stop()

	// A handshake that names nothing (a.test takes such names as the
	// default) and a request that names nothing: the default's file, as
	// the handshake was given the default's facts (what openssl s_time
	// and HTTP/1.0 probes send, and nginx's default server answers).
	// A Host naming b.test on that connection is 421: b.test has another
	// certificate.
	ts = start(t, conf("default = true"))
	if code, body := h1(dial("", false), "GET /secret.txt HTTP/1.0\r\n\r\n"); code != 200 || body != "secret-a" {
		t.Errorf("no SNI, no Host: %d %q; want the default's (a.test's) file", code, body)
	}
	if code, body := h1(dial("", false), "GET /secret.txt HTTP/1.0\r\nHost: b.test\r\n\r\n"); code != 421 || body == "site-b" {
		t.Errorf("no SNI, Host b.test: %d %q; want 421", code, body)
	}
	if code, body := h1(dial("", false), "GET /secret.txt HTTP/1.0\r\nHost: a.test\r\n\r\n"); code != 200 || body != "secret-a" {
		t.Errorf("no SNI, Host a.test (the default): %d %q; want a.test's file", code, body)
	}
}
