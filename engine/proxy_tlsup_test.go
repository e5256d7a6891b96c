package engine_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/nginxtest"
)

// clientPKI makes a CA and a client certificate (clientAuth) it signs, in
// dir: the CA's file (for nginx's ssl_client_certificate) and the
// certificate's and key's.
func clientPKI(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	p := newPKIFor(t, dir, x509.ExtKeyUsageClientAuth, "edge-1")
	return p.caFile, p.certFile, p.keyFile
}

// freeAddr is a 127.0.0.1 address no one listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestProxyUpstreamTLS: routes speak TLS to a real TLS server (nginx):
// a 100 MiB file arrives byte-exact and small requests reuse pooled TLS
// connections; the upstream's certificate is verified (against the
// route's ca, for tls_server_name, or for the upstream's IP address) and
// a failed verification is a 502 that says why in the log, never a
// response from an unverified upstream; a client certificate is shown
// to an upstream that asks for one.
func TestProxyUpstreamTLS(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	_, sum := linkBig(t, root, "big.bin")
	writeFile(t, root+"/small.txt", "small file over TLS")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	up := newPKI(t, dir, "origin.test")
	clientCA, clientCert, clientKey := clientPKI(t, dir)
	mtls := freeAddr(t)
	addr := nginxtest.Start(t, fmt.Sprintf(`
    sendfile on;
    keepalive_timeout 30s;
    keepalive_requests 1000000;
    ssl_certificate %[3]q;
    ssl_certificate_key %[4]q;
    server {
        listen %%[2]s ssl;
        root %[1]q;
    }
    server {
        listen %[5]s ssl;
        root %[1]q;
        ssl_verify_client on;
        ssl_client_certificate %[6]q;
        keepalive_timeout 300ms;
    }`, root, "", up.certFile, up.keyFile, mtls, clientCA))

	route := func(upstream, extra string) string {
		return proxyConfig(t, "/", "upstream_tls = true\n"+extra, upstream)
	}
	get := func(ts *testServer, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(ts.url + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer resp.Body.Close()
		h := sha256.New()
		io.Copy(h, resp.Body)
		return resp.StatusCode, hex.EncodeToString(h.Sum(nil))
	}
	small := sha256.Sum256([]byte("small file over TLS"))

	t.Run("verified by ca, for tls_server_name", func(t *testing.T) {
		ts := start(t, route(addr, fmt.Sprintf("ca = %q\ntls_server_name = \"origin.test\"\n", up.caFile)))
		if st, got := get(ts, "/big.bin"); st != 200 || got != sum {
			t.Fatalf("100 MiB through TLS: status %d, digest match %v", st, got == sum)
		}
		for range 50 {
			if st, got := get(ts, "/small.txt"); st != 200 || got != hex.EncodeToString(small[:]) {
				t.Fatalf("small: status %d, digest match %v", st, got == hex.EncodeToString(small[:]))
			}
		}
		st := ts.Stats()
		if st.ProxyOpened > 2 || st.ProxyReused < 49 {
			t.Fatalf("51 sequential requests opened %d TLS connections and reused %d times; want them pooled", st.ProxyOpened, st.ProxyReused)
		}
	})
	t.Run("HTTP/2 and HTTP/3 clients", func(t *testing.T) {
		pki := newPKI(t, t.TempDir(), "localhost")
		ts := start(t, tlsProxyConfig(pki, addr, "")+fmt.Sprintf("upstream_tls = true\nca = %q\ntls_server_name = \"origin.test\"\n", up.caFile))
		h3, _ := h3Client(t, pki)
		for _, c := range []struct {
			proto  int
			client *http.Client
		}{{2, h2Client(pki)}, {3, h3}} {
			resp, err := c.client.Get("https://localhost:" + portOf(ts.addr) + "/big.bin")
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != c.proto || hex.EncodeToString(h.Sum(nil)) != sum {
				t.Fatalf("HTTP/%d: status %d, HTTP/%d, %d bytes, err %v", c.proto, resp.StatusCode, resp.ProtoMajor, n, err)
			}
		}
	})
	t.Run("verified for the upstream's IP address", func(t *testing.T) {
		ts := start(t, route(addr, fmt.Sprintf("ca = %q\n", up.caFile)))
		if st, _ := get(ts, "/small.txt"); st != 200 {
			t.Fatalf("status %d; the certificate names 127.0.0.1", st)
		}
	})
	for _, tc := range []struct{ name, extra, why string }{
		{"system roots", "", "certificate signed by unknown authority"},
		{"another name", fmt.Sprintf("ca = %q\ntls_server_name = \"other.test\"\n", up.caFile), "not other.test"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			var log syncBuffer
			ts := startLog(t, route(addr, tc.extra), &log)
			if st, _ := get(ts, "/small.txt"); st != 502 {
				t.Fatalf("status %d from an upstream whose certificate does not verify; want 502", st)
			}
			if !strings.Contains(log.String(), tc.why) {
				t.Fatalf("the log does not say why (%q):\n%s", tc.why, log.String())
			}
			if f := ts.Stats().ProxyFailed; f == 0 {
				t.Fatal("the failed handshake is not counted as a failed upstream connection")
			}
		})
	}
	t.Run("client certificate", func(t *testing.T) {
		without := start(t, route(mtls, fmt.Sprintf("ca = %q\n", up.caFile)))
		if st, _ := get(without, "/small.txt"); st != 400 {
			t.Fatalf("without a client certificate nginx answered %d through the proxy; want its 400", st)
		}
		with := start(t, route(mtls, fmt.Sprintf("ca = %q\ntls_client_cert = %q\ntls_client_key = %q\n", up.caFile, clientCert, clientKey)))
		if st, got := get(with, "/small.txt"); st != 200 || got != hex.EncodeToString(small[:]) {
			t.Fatalf("with the client certificate: status %d, digest match %v", st, got == hex.EncodeToString(small[:]))
		}
		// This upstream closes idle connections after 300 ms: the pooled
		// TLS connection it closed is seen closed (through the bridge)
		// and never handed a request that would fail.
		for range 3 {
			time.Sleep(600 * time.Millisecond)
			if st, _ := get(with, "/small.txt"); st != 200 {
				t.Fatalf("after the upstream closed the idle connection: status %d", st)
			}
		}
		if n := with.Stats().ProxyOpened; n != 4 {
			t.Fatalf("opened %d TLS connections for 4 requests 600 ms apart (the upstream closes them after 300 ms); want 4", n)
		}
	})
	t.Run("upstream down", func(t *testing.T) {
		ts := start(t, route(freeAddr(t), fmt.Sprintf("ca = %q\n", up.caFile)))
		if st, _ := get(ts, "/small.txt"); st != 502 {
			t.Fatalf("status %d with nothing listening; want 502", st)
		}
	})
}

// hostileTLS serves TLS on loopback with up's certificate, handing each
// connection (its request head read) to serve; clientCAs, when set,
// requires a client certificate it signs.
func hostileTLS(t *testing.T, up *testPKI, clientCAs *x509.CertPool, serve func(c *tls.Conn, raw *net.TCPConn)) string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(up.certFile, up.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCAs != nil {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			raw, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { raw.Close() })
			go func() {
				c := tls.Server(raw, cfg)
				if c.Handshake() != nil {
					raw.Close()
					return
				}
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						raw.Close()
						return
					}
					if line == "\r\n" {
						break
					}
				}
				serve(c, raw.(*net.TCPConn))
			}()
		}
	}()
	return l.Addr().String()
}

// TestProxyUpstreamTLSHostile: what a broken or hostile TLS upstream does
// reaches the client as what it is. A response cut by a reset (or a bad
// record) is a cut, never a whole response; an upstream that stops
// reading holds nothing after the client's 504 (no goroutine, socket or
// buffer left behind); a TLS 1.3 upstream that refuses the engine's
// (missing) client certificate after the handshake is a failed upstream:
// the next one answers.
func TestProxyUpstreamTLSHostile(t *testing.T) {
	dir := t.TempDir()
	up := newPKI(t, dir, "origin.test")
	route := func(extra string, upstreams ...string) string {
		return proxyConfig(t, "/", fmt.Sprintf("upstream_tls = true\nca = %q\ntls_server_name = \"origin.test\"\n%s", up.caFile, extra), upstreams...)
	}
	t.Run("cut by a reset", func(t *testing.T) {
		addr := hostileTLS(t, up, nil, func(c *tls.Conn, raw *net.TCPConn) {
			c.Write([]byte("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"))
			c.Write(bytes.Repeat([]byte("x"), 100000))
			raw.SetLinger(0)
			raw.Close()
		})
		ts := start(t, route("", addr))
		resp, err := http.Get(ts.url + "/a")
		if err == nil {
			var n int64
			n, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Fatalf("a response the upstream's reset cut ended cleanly after %d bytes", n)
			}
		}
	})
	t.Run("stops reading", func(t *testing.T) {
		hold := make(chan struct{})
		defer close(hold)
		addr := hostileTLS(t, up, nil, func(c *tls.Conn, raw *net.TCPConn) { <-hold })
		ts := start(t, route("response_timeout = \"1s\"\nread_timeout = \"1s\"\n", addr))
		base := runtime.NumGoroutine()
		for range 5 {
			resp, err := http.Post(ts.url+"/up", "application/octet-stream", bytes.NewReader(make([]byte, 8<<20)))
			if err != nil {
				continue // the engine may close before the body is all sent
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 504 {
				t.Fatalf("status %d from an upstream that stopped reading; want 504", resp.StatusCode)
			}
		}
		// The upstream's own 5 handlers stay (blocked until the test
		// ends); the engine's two per bridge must not.
		if !waitFor(10*time.Second, func() bool { return runtime.NumGoroutine() <= base+5+4 }) {
			t.Fatalf("%d goroutines 10 s after the 504s (%d before): the bridges to an upstream that stopped reading were left behind", runtime.NumGoroutine(), base)
		}
	})
	t.Run("closes before the response", func(t *testing.T) {
		addr := hostileTLS(t, up, nil, func(c *tls.Conn, raw *net.TCPConn) { c.Close() })
		ts := start(t, route("", addr))
		fds := func() int { ents, _ := os.ReadDir("/proc/self/fd"); return len(ents) }
		base := fds()
		for range 20 {
			resp, err := http.Get(ts.url + "/a")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 502 {
				t.Fatalf("status %d; want 502", resp.StatusCode)
			}
		}
		http.DefaultClient.CloseIdleConnections()
		// The engine's upstream sockets go with each 502, not at
		// response_timeout (60 s).
		if !waitFor(3*time.Second, func() bool { return fds() <= base+4 }) {
			t.Fatalf("%d descriptors open after 20 upstream closes (%d before): the upstream connections were left open", fds(), base)
		}
	})
	t.Run("client certificate refused after the handshake", func(t *testing.T) {
		clientCA, _, _ := clientPKI(t, t.TempDir())
		pem, _ := os.ReadFile(clientCA)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		refusing := hostileTLS(t, up, pool, func(c *tls.Conn, raw *net.TCPConn) {
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nrefused"))
			c.Close()
		})
		good := hostileTLS(t, up, nil, func(c *tls.Conn, raw *net.TCPConn) {
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"))
			c.Close()
		})
		var log syncBuffer
		ts := startLog(t, route("", refusing, good), &log)
		for i := range 8 {
			resp, err := http.Get(ts.url + "/a")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("request %d: %d %q; want the upstream that accepts the engine to answer", i, resp.StatusCode, b)
			}
		}
		if ts.Stats().ProxyFailed == 0 || !strings.Contains(log.String(), "certificate") {
			t.Fatalf("the refusing upstream was not counted failed, or the log does not say why:\n%s", log.String())
		}
	})
}
