package engine_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// TestTLSKeyExchanges: each site's key_exchanges decides what Go's client
// (offering its default list, with key shares for X25519MLKEM768 and
// X25519) negotiates, by SNI, over TCP and HTTP/3: a site restricted to
// X25519 gets X25519, a site without the key the post-quantum hybrid, a
// site of a curve the client sent no key share for that curve (after a
// HelloRetryRequest), and a proxy route the list of [reverse_proxy.tls].
func TestTLSKeyExchanges(t *testing.T) {
	root := siteRoot(t)
	pki := newPKI(t, t.TempDir(), "x25519.example", "default.example", "p384.example", "proxy.example")
	site := func(domain, extra string) string {
		return fmt.Sprintf("[[sites]]\ndomain = %q\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n%s", domain, root, pki.certFile, pki.keyFile, extra)
	}
	ts := start(t, site("x25519.example", `key_exchanges = ["x25519"]`+"\n")+
		site("default.example", "")+
		site("p384.example", `key_exchanges = ["P-384"]`+"\n")+
		fmt.Sprintf("[reverse_proxy]\nenabled = true\n[reverse_proxy.tls]\ncert = %q\nkey = %q\nkey_exchanges = [\"secp256r1\"]\n[[reverse_proxy.routes]]\ndomain = \"proxy.example\"\nupstreams = [\"127.0.0.1:9\"]\n",
			pki.certFile, pki.keyFile)+
		ktlsAuto)
	tcp := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pki.pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, ts.addr)
		},
	}}
	defer tcp.CloseIdleConnections()
	h3 := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pki.pool},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, ts.addr, tc, qc)
		},
	}
	defer h3.Close()
	for _, tc := range []struct {
		name string
		want tls.CurveID
		file bool // a site: the file is served
	}{
		{"x25519.example", tls.X25519, true},
		{"default.example", tls.X25519MLKEM768, true},
		{"p384.example", tls.CurveP384, true},
		{"proxy.example", tls.CurveP256, false},
	} {
		for _, c := range []struct {
			proto string
			rt    http.RoundTripper
		}{{"TCP", tcp.Transport}, {"HTTP/3", h3}} {
			req, _ := http.NewRequest("GET", "https://"+tc.name+"/alpha.txt", nil)
			resp, err := c.rt.RoundTrip(req)
			if err != nil {
				t.Errorf("%s over %s: %v", tc.name, c.proto, err)
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.TLS == nil {
				t.Errorf("%s over %s: no TLS state", tc.name, c.proto)
				continue
			}
			if got := resp.TLS.CurveID; got != tc.want {
				t.Errorf("%s over %s negotiated %v, want %v", tc.name, c.proto, got, tc.want)
			}
			if tc.file && (resp.StatusCode != 200 || string(body) != "abcdefghijklmnopqrstuvwxyz") {
				t.Errorf("%s over %s: %s %q", tc.name, c.proto, resp.Status, body)
			}
		}
	}
}
