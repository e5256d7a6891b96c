package engine_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
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
	req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
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

	ts := start(t, conf(false))
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
