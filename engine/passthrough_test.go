package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/clienthello"
	"github.com/mediaship/engine/internal/nginxtest"
	"github.com/mediaship/engine/quicinitial"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// tlsOrigin is a TLS server standing for a passthrough origin: it holds
// its own certificate and answers each connection with serve.
type tlsOrigin struct {
	addr string
	pki  *testPKI
}

// startTLSOrigin runs a crypto/tls server for name until the test ends.
// serve gets each connection after its handshake.
func startTLSOrigin(t *testing.T, name string, serve func(c *tls.Conn), more ...string) *tlsOrigin {
	t.Helper()
	pki := newPKI(t, t.TempDir(), append([]string{name}, more...)...)
	cert, err := tls.LoadX509KeyPair(pki.certFile, pki.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"echo", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				tc.SetDeadline(time.Now().Add(scale(30 * time.Second)))
				if tc.Handshake() == nil {
					serve(tc)
				}
			}()
		}
	}()
	return &tlsOrigin{addr: ln.Addr().String(), pki: pki}
}

// digestOrigin reads to the client's close_notify (its half-close),
// then answers with its name and the SHA-256 of what it read.
func digestOrigin(name string) func(c *tls.Conn) {
	return func(c *tls.Conn) {
		h := sha256.New()
		if _, err := io.Copy(h, c); err != nil {
			return
		}
		fmt.Fprintf(c, "%s %x", name, h.Sum(nil))
		c.CloseWrite()
	}
}

// passthroughConfig routes each name to its origin, relayed.
func passthroughConfig(extra string, routes ...string) string {
	var b strings.Builder
	b.WriteString("shutdown_grace = \"2s\"\n" + extra + "\n[reverse_proxy]\nenabled = true\ntls_termination = false\n")
	for i := 0; i+1 < len(routes); i += 2 {
		fmt.Fprintf(&b, "[[reverse_proxy.routes]]\ndomain = %q\nupstreams = [%q]\n", routes[i], routes[i+1])
	}
	return b.String()
}

// segmentedConn writes its first limit bytes as TCP segments of one byte
// each (TCP_NODELAY and a pause between them), then passes writes on.
type segmentedConn struct {
	net.Conn
	limit int
}

func (c *segmentedConn) Write(p []byte) (int, error) {
	n := 0
	for c.limit > 0 && n < len(p) {
		if _, err := c.Conn.Write(p[n : n+1]); err != nil {
			return n, err
		}
		n++
		c.limit--
		if n%16 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	m, err := c.Conn.Write(p[n:])
	return n + m, err
}

// refragmentConn re-frames the first TLS record written through it (the
// ClientHello) as records of at most size bytes of handshake data, as a
// client may (RFC 8446 §5.1).
type refragmentConn struct {
	net.Conn
	size int
	done bool
}

func (c *refragmentConn) Write(p []byte) (int, error) {
	if c.done || len(p) < 5 || p[0] != 22 {
		return c.Conn.Write(p)
	}
	c.done = true
	n := int(binary.BigEndian.Uint16(p[3:5]))
	body, rest := p[5:5+n], p[5+n:]
	var out []byte
	for len(body) > 0 {
		k := min(len(body), c.size)
		out = append(out, 22, p[1], p[2], byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	if _, err := c.Conn.Write(append(out, rest...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// passRoundTrip opens a TLS connection through the engine at addr for
// name, trusting only pool, sends msg, half-closes, and returns the
// origin's answer and the certificate the client saw.
func passRoundTrip(addr, name string, conf *tls.Config, wrap func(net.Conn) net.Conn, msg []byte) (string, string, error) {
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", "", err
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(scale(30 * time.Second)))
	var nc net.Conn = raw
	if wrap != nil {
		nc = wrap(raw)
	}
	conf = conf.Clone()
	conf.ServerName = name
	c := tls.Client(nc, conf)
	if err := c.Handshake(); err != nil {
		return "", "", err
	}
	cn := c.ConnectionState().PeerCertificates[0].Subject.CommonName
	if _, err := c.Write(msg); err != nil {
		return "", cn, err
	}
	if err := c.CloseWrite(); err != nil {
		return "", cn, err
	}
	got, err := io.ReadAll(c)
	return string(got), cn, err
}

func digestLine(name string, msg []byte) string {
	return fmt.Sprintf("%s %x", name, sha256.Sum256(msg))
}

// TestPassthroughTCP: connections are relayed by the ClientHello's
// server name to the origin that holds the certificate, two origins
// behind one port; the client sees the origin's certificate and ALPN
// choice; a ClientHello sent a byte per TCP segment, or split over many
// TLS records, or large, still routes; half-closes pass both ways
// (each origin answers after the client's close_notify); what cannot be
// routed gets the right alert and a count.
func TestPassthroughTCP(t *testing.T) {
	a := startTLSOrigin(t, "a.test", digestOrigin("a"))
	b := startTLSOrigin(t, "b.test", digestOrigin("b"), "*.b.test")
	var logs syncBuffer
	ts := startLog(t, passthroughConfig("", "a.test", a.addr, "*.b.test", b.addr), &logs)
	confA := &tls.Config{RootCAs: a.pki.pool, NextProtos: []string{"echo"}}
	confB := &tls.Config{RootCAs: b.pki.pool}
	msg := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB up

	t.Run("routes by SNI", func(t *testing.T) {
		got, cn, err := passRoundTrip(ts.addr, "a.test", confA, nil, msg)
		if err != nil || cn != "a.test" || got != digestLine("a", msg) {
			t.Fatalf("a.test: answer %q, certificate %q, err %v", got, cn, err)
		}
		got, cn, err = passRoundTrip(ts.addr, "x.b.test", confB, nil, msg[:1000])
		if err != nil || cn != "b.test" || got != digestLine("b", msg[:1000]) {
			t.Fatalf("x.b.test: answer %q, certificate %q, err %v", got, cn, err)
		}
	})

	t.Run("ALPN is the origin's", func(t *testing.T) {
		raw, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		conf := confA.Clone()
		conf.ServerName = "a.test"
		c := tls.Client(raw, conf)
		if err := c.Handshake(); err != nil {
			t.Fatal(err)
		}
		if p := c.ConnectionState().NegotiatedProtocol; p != "echo" {
			t.Errorf("negotiated %q; the origin offers \"echo\"", p)
		}
	})

	t.Run("ClientHello a byte per segment", func(t *testing.T) {
		wrap := func(c net.Conn) net.Conn { return &segmentedConn{Conn: c, limit: 4096} }
		got, cn, err := passRoundTrip(ts.addr, "a.test", confA, wrap, []byte("hello"))
		if err != nil || cn != "a.test" || got != digestLine("a", []byte("hello")) {
			t.Fatalf("answer %q, certificate %q, err %v", got, cn, err)
		}
	})

	t.Run("large ClientHello over many records", func(t *testing.T) {
		// 30 ALPN names of 200 bytes: a ClientHello of about 7.5 KiB
		// (with the post-quantum key share), sent as records of 500
		// bytes: 16 records.
		conf := confA.Clone()
		for i := range 30 {
			conf.NextProtos = append(conf.NextProtos, fmt.Sprintf("%03d%s", i, strings.Repeat("p", 197)))
		}
		wrap := func(c net.Conn) net.Conn { return &refragmentConn{Conn: c, size: 500} }
		got, cn, err := passRoundTrip(ts.addr, "a.test", conf, wrap, []byte("big hello"))
		if err != nil || cn != "a.test" || got != digestLine("a", []byte("big hello")) {
			t.Fatalf("answer %q, certificate %q, err %v", got, cn, err)
		}
	})

	before := ts.Stats().PassFailures
	refused := []struct {
		name   string
		sni    string
		conf   *tls.Config
		alert  string
		reason string
	}{
		{"no SNI", "", &tls.Config{InsecureSkipVerify: true}, "unrecognized name", "no_sni"},
		{"SNI without a route", "c.test", &tls.Config{InsecureSkipVerify: true}, "unrecognized name", "no_route"},
		{"ClientHello over 16 KiB", "a.test", bigHelloConfig(confA, 80), "error decoding message", "bad_hello"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := passRoundTrip(ts.addr, tt.sni, tt.conf, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.alert) {
				t.Fatalf("handshake error %v; want the alert %q", err, tt.alert)
			}
		})
	}
	t.Run("not TLS", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		if !bytes.Equal(got, []byte{21, 3, 3, 0, 2, 2, 10}) {
			t.Fatalf("plain HTTP got % x; want an unexpected_message alert", got)
		}
	})
	after := ts.Stats().PassFailures
	for _, reason := range []string{"no_sni", "no_route", "bad_hello", "not_tls"} {
		if after[reason] != before[reason]+1 {
			t.Errorf("failures[%s] went from %d to %d; want one more", reason, before[reason], after[reason])
		}
	}
	if !strings.Contains(logs.String(), "reason=no_route sni=c.test") {
		t.Errorf("no log line names the unrouted server name:\n%s", logs.String())
	}
	st := ts.Stats()
	if !waitFor(5*time.Second, func() bool { st = ts.Stats(); return st.PassActive == 0 }) || st.PassRelayed < 5 ||
		st.PassBytesUp < int64(len(msg)) || st.PassBytesDown < 100 {
		t.Errorf("counters: relayed %d, active %d, up %d, down %d", st.PassRelayed, st.PassActive, st.PassBytesUp, st.PassBytesDown)
	}
}

// bigHelloConfig makes a client whose ClientHello carries n ALPN names
// of 250 bytes.
func bigHelloConfig(base *tls.Config, n int) *tls.Config {
	conf := base.Clone()
	for i := range n {
		conf.NextProtos = append(conf.NextProtos, fmt.Sprintf("%03d%s", i, strings.Repeat("q", 247)))
	}
	return conf
}

// TestPassthroughUpstreams: an upstream that refuses is skipped for the
// next one; with none left the client gets internal_error; a relay on
// which nothing moves for the route's idle_timeout is closed.
func TestPassthroughUpstreams(t *testing.T) {
	a := startTLSOrigin(t, "a.test", func(c *tls.Conn) {
		io.Copy(c, c) // echo until the client's close
	})
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	ts := startLog(t, fmt.Sprintf(`shutdown_grace = "2s"
log_level = "debug"
[reverse_proxy]
enabled = true
tls_termination = false
[[reverse_proxy.routes]]
domain = "a.test"
upstreams = [%q, %q]
idle_timeout = "1s"
[[reverse_proxy.routes]]
domain = "down.test"
upstreams = [%q]
`, deadAddr, a.addr, deadAddr), io.Discard)
	conf := &tls.Config{RootCAs: a.pki.pool, ServerName: "a.test"}
	for i := range 3 {
		c, err := tls.Dial("tcp", ts.addr, conf)
		if err != nil {
			t.Fatalf("connection %d: %v (the refused upstream must be skipped)", i, err)
		}
		c.Write([]byte("ping"))
		buf := make([]byte, 4)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo: %q %v", buf, err)
		}
		if i == 2 {
			// Idle: the relay closes after about 1 s.
			start := time.Now()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			_, err := c.Read(buf)
			var ne net.Error
			if err == nil || errors.As(err, &ne) && ne.Timeout() || time.Since(start) > 8*time.Second {
				t.Errorf("idle relay: read %v after %v; want it closed after idle_timeout", err, time.Since(start))
			}
		}
		c.Close()
	}
	_, err := tls.Dial("tcp", ts.addr, &tls.Config{InsecureSkipVerify: true, ServerName: "down.test"})
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Errorf("every upstream down: %v; want an internal_error alert", err)
	}
	if n := ts.Stats().PassFailures["upstream_unreachable"]; n != 1 {
		t.Errorf("upstream_unreachable = %d, want 1", n)
	}
}

// TestPassthroughNginx: nginx holds the certificate and the files; the
// engine relays to it by SNI on the port where it also serves its own
// site (a listener mixing modes). A 100 MiB download through the relay
// is byte-exact and goes by splice; a second origin behind "pp.test"
// reads the PROXY protocol v2 header and sees the client's own address.
func TestPassthroughNginx(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	_, sum := linkBig(t, root, "big.bin")
	origin := newPKI(t, t.TempDir(), "origin.test", "pp.test")
	os.Chmod(filepath.Dir(origin.keyFile), 0o755)
	ngx := nginxtest.Start(t, fmt.Sprintf(`
    sendfile on;
    server {
        listen %%[2]s ssl;
        ssl_certificate %s;
        ssl_certificate_key %s;
        root %s;
    }`, origin.certFile, origin.keyFile, root))
	ngxPP := nginxtest.Start(t, fmt.Sprintf(`
    server {
        listen %%[2]s ssl proxy_protocol;
        ssl_certificate %s;
        ssl_certificate_key %s;
        location / { return 200 "$proxy_protocol_addr:$proxy_protocol_port"; }
    }`, origin.certFile, origin.keyFile))

	site := t.TempDir()
	writeFile(t, filepath.Join(site, "local.txt"), "served by the engine itself")
	own := newPKI(t, t.TempDir(), "files.test")
	ts := start(t, fmt.Sprintf(`shutdown_grace = "2s"
[kernel]
ktls = "auto"
[[sites]]
domain = "files.test"
root = %q
[sites.tls]
cert = %q
key = %q
[reverse_proxy]
enabled = true
tls_termination = false
[[reverse_proxy.routes]]
domain = "origin.test"
upstreams = [%q]
[[reverse_proxy.routes]]
domain = "pp.test"
upstreams = [%q]
proxy_protocol = "v2"
`, site, own.certFile, own.keyFile, ngx, ngxPP))

	var local net.Addr
	client := func(pool *x509.CertPool) *http.Client {
		return &http.Client{Timeout: scale(60 * time.Second), Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			DisableKeepAlives: true, // each relay ends with its response
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", ts.addr)
				if err == nil {
					local = c.LocalAddr()
				}
				return c, err
			},
		}}
	}
	port := portOf(ts.addr)
	resp, err := client(origin.pool).Get("https://origin.test:" + port + "/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || hex.EncodeToString(h.Sum(nil)) != sum || resp.TLS.PeerCertificates[0].Subject.CommonName != "origin.test" {
		t.Fatalf("100 MiB through the relay: status %d, %d bytes, err %v, digest match %v", resp.StatusCode, n, err, hex.EncodeToString(h.Sum(nil)) == sum)
	}

	resp, err = client(own.pool).Get("https://files.test:" + port + "/local.txt")
	if err != nil {
		t.Fatalf("the engine's own site on the same port: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "served by the engine itself" || resp.TLS.PeerCertificates[0].Subject.CommonName != "files.test" {
		t.Fatalf("own site: %d %q", resp.StatusCode, body)
	}

	// A request on the engine's own connection naming a relayed domain
	// is misdirected: the origin answers that name.
	tc, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: own.pool, ServerName: "files.test"})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tc, "GET /big.bin HTTP/1.1\r\nHost: origin.test:%s\r\n\r\n", port)
	mis, err := http.ReadResponse(bufio.NewReader(tc), nil)
	tc.Close()
	if err != nil || mis.StatusCode != 421 {
		t.Errorf("Host of a relayed domain on the engine's own connection: %v %v; want 421", mis, err)
	}

	resp, err = client(origin.pool).Get("https://pp.test:" + port + "/")
	if err != nil {
		t.Fatalf("PROXY protocol origin: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != local.String() {
		t.Errorf("the origin saw the client as %q; the client is %s", body, local)
	}

	st := ts.Stats()
	if !waitFor(5*time.Second, func() bool { st = ts.Stats(); return st.PassActive == 0 }) || st.PassRelayed != 2 || st.PassBytesDown < 100<<20 || st.BytesSplice < 100<<20 {
		t.Errorf("counters: relayed %d, active %d, down %d, spliced %d", st.PassRelayed, st.PassActive, st.PassBytesDown, st.BytesSplice)
	}
}

// startH3Origin runs a quic-go HTTP/3 server for name on a UDP port of
// its own: "/" answers its name, "/bytes" 24 MiB of a pattern.
func startH3Origin(t *testing.T, name string) (string, *testPKI) {
	t.Helper()
	pki, cert, udp := h3OriginSocket(t, name)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin "+name) })
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(h3OriginBytes))
		io.Copy(w, io.LimitReader(&pattern{}, h3OriginBytes))
	})
	srv := &http3.Server{Handler: mux, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}})}
	go srv.Serve(udp)
	t.Cleanup(func() { srv.Close(); udp.Close() })
	return udp.LocalAddr().String(), pki
}

const h3OriginBytes = 24 << 20

// h3OriginSocket is what an HTTP/3 origin for name needs: its PKI, its
// certificate, and a UDP socket on loopback.
func h3OriginSocket(t *testing.T, name string) (*testPKI, tls.Certificate, *net.UDPConn) {
	t.Helper()
	pki := newPKI(t, t.TempDir(), name)
	cert, err := tls.LoadX509KeyPair(pki.certFile, pki.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return pki, cert, udp
}

// quicPassClient is an HTTP/3 client that reaches every name at the
// engine's UDP address, trusting pool.
func quicPassClient(t *testing.T, engineAddr string, pool *x509.CertPool) *http.Client {
	tr := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		QUICConfig:      &quic.Config{HandshakeIdleTimeout: scale(2 * time.Second)},
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, engineAddr, tc, qc)
		},
	}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: scale(60 * time.Second)}
}

// TestPassthroughQUIC: quic-go's HTTP/3 client reaches, through one
// engine port, the quic-go HTTP/3 origin its ClientHello names (read
// from the Initial packets, which quic-go's hello spans two of); the
// answer and its certificate are the origin's; 24 MiB come through
// byte-exact. On a listener that serves HTTP/3 itself the engine's own
// site still answers beside the relayed names; on one that does not, a
// name without a route is dropped and counted.
func TestPassthroughQUIC(t *testing.T) {
	addrA, pkiA := startH3Origin(t, "a.test")
	addrB, pkiB := startH3Origin(t, "b.test")
	pool := pkiA.pool.Clone()
	for _, p := range []*testPKI{pkiB} {
		pem, _ := os.ReadFile(p.caFile)
		pool.AppendCertsFromPEM(pem)
	}
	want := sha256.New()
	io.Copy(want, io.LimitReader(&pattern{}, h3OriginBytes))
	wantSum := hex.EncodeToString(want.Sum(nil))

	check := func(t *testing.T, c *http.Client, port, name string) {
		t.Helper()
		resp, err := c.Get("https://" + name + ":" + port + "/")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "origin "+name || resp.TLS.PeerCertificates[0].Subject.CommonName != name {
			t.Fatalf("%s answered %q with the certificate of %q", name, body, resp.TLS.PeerCertificates[0].Subject.CommonName)
		}
	}
	download := func(t *testing.T, c *http.Client, port, name string) {
		t.Helper()
		resp, err := c.Get("https://" + name + ":" + port + "/bytes")
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || n != h3OriginBytes || hex.EncodeToString(h.Sum(nil)) != wantSum {
			t.Fatalf("%s: %d bytes, err %v, digest match %v", name, n, err, hex.EncodeToString(h.Sum(nil)) == wantSum)
		}
	}

	t.Run("passthrough only", func(t *testing.T) {
		ts := start(t, passthroughConfig("", "a.test", addrA, "b.test", addrB))
		c := quicPassClient(t, ts.addr, pool)
		port := portOf(ts.addr)
		check(t, c, port, "a.test")
		check(t, c, port, "b.test")
		download(t, c, port, "a.test")
		if _, err := c.Get("https://c.test:" + port + "/"); err == nil {
			t.Fatal("c.test has no route, yet answered")
		}
		st := ts.Stats()
		if st.QUICPassRelayed != 2 || st.QUICPassBytesDown < h3OriginBytes || st.QUICPassFailures["no_route"] < 1 {
			t.Errorf("counters: relayed %d, down %d, up %d, failures %v", st.QUICPassRelayed, st.QUICPassBytesDown, st.QUICPassBytesUp, st.QUICPassFailures)
		}
	})

	t.Run("beside the engine's own HTTP/3", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, filepath.Join(root, "local.txt"), "engine's own")
		own := newPKI(t, t.TempDir(), "files.test")
		ts := start(t, passthroughConfig(fmt.Sprintf("[kernel]\nktls = \"auto\"\n[[sites]]\ndomain = \"files.test\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n",
			root, own.certFile, own.keyFile), "a.test", addrA, "b.test", addrB))
		pem, _ := os.ReadFile(own.caFile)
		pool := pool.Clone()
		pool.AppendCertsFromPEM(pem)
		c := quicPassClient(t, ts.addr, pool)
		port := portOf(ts.addr)
		check(t, c, port, "b.test")
		resp, err := c.Get("https://files.test:" + port + "/local.txt")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "engine's own" || resp.ProtoMajor != 3 {
			t.Fatalf("own site over HTTP/3: %d %q", resp.StatusCode, body)
		}
		download(t, c, port, "a.test")
		if st := ts.Stats(); st.QUICPassRelayed != 2 || st.H3Connections != 1 {
			t.Errorf("relayed %d, own HTTP/3 connections %d", st.QUICPassRelayed, st.H3Connections)
		}
	})
}

// firstFlight is a quic-go client's first flight for sni, sent nowhere
// it could be answered: what a spoofer replays. It is read until the
// ClientHello in it is whole (quic-go's takes two Initial packets, in
// one or two datagrams).
func firstFlight(t *testing.T, sni string) [][]byte {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go quic.DialAddr(ctx, pc.LocalAddr().String(), &tls.Config{ServerName: sni, NextProtos: []string{"h3"}}, nil)
	var hello quicinitial.Hello
	var flight [][]byte
	buf := make([]byte, 2048)
	pc.SetReadDeadline(time.Now().Add(scale(30 * time.Second)))
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("the client's first flight for %s: %d datagrams, then %v", sni, len(flight), err)
		}
		flight = append(flight, bytes.Clone(buf[:n]))
		if _, err := hello.Add(buf[:n]); !errors.Is(err, clienthello.ErrIncomplete) {
			if err != nil {
				t.Fatalf("the client's first flight for %s: %v", sni, err)
			}
			return flight
		}
	}
}

// TestPassthroughQUICSharedSocket: connections that share one client
// socket (one quic.Transport) are each routed by their own server name,
// and a first flight forged from that socket's address (a spoofer's
// single packet) opens nothing in place of the live connection.
func TestPassthroughQUICSharedSocket(t *testing.T) {
	addrA, pkiA := startH3Origin(t, "a.test")
	addrB, pkiB := startH3Origin(t, "b.test")
	ts := start(t, passthroughConfig("[limits]\nheader_timeout = \"2s\"\n", "a.test", addrA, "b.test", addrB))
	pool := pkiA.pool.Clone()
	pem, _ := os.ReadFile(pkiB.caFile)
	pool.AppendCertsFromPEM(pem)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	qt := &quic.Transport{Conn: udp}
	defer qt.Close()
	engine, _ := net.ResolveUDPAddr("udp", ts.addr)
	client := func() *http.Client {
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool},
			QUICConfig:      &quic.Config{HandshakeIdleTimeout: scale(2 * time.Second)},
			Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				return qt.Dial(ctx, engine, tc, qc)
			},
		}
		t.Cleanup(func() { tr.Close() })
		return &http.Client{Transport: tr, Timeout: scale(20 * time.Second)}
	}
	get := func(c *http.Client, name string) (string, error) {
		resp, err := c.Get("https://" + name + ":" + portOf(ts.addr) + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	ca, cb, cc := client(), client(), client()
	if got, err := get(ca, "a.test"); err != nil || got != "origin a.test" {
		t.Fatalf("a.test: %q %v", got, err)
	}
	if got, err := get(cb, "b.test"); err != nil || got != "origin b.test" {
		t.Fatalf("b.test on the same socket after a.test: %q %v; want b.test's origin", got, err)
	}
	if got, err := get(cc, "c.test"); err == nil {
		t.Fatalf("c.test (no route) on the same socket answered %q", got)
	}
	// A forged first flight for b.test from the live connections' address:
	// it opens a flow beside theirs.
	relayed := ts.Stats().QUICPassRelayed
	for _, d := range firstFlight(t, "b.test") {
		qt.WriteTo(d, engine)
	}
	if !waitFor(scale(10*time.Second), func() bool { return ts.Stats().QUICPassRelayed == relayed+1 }) {
		t.Fatalf("a forged first flight for b.test: %d flows relayed; want %d", ts.Stats().QUICPassRelayed, relayed+1)
	}
	for _, name := range []string{"a.test", "b.test"} {
		if got, err := get(map[string]*http.Client{"a.test": ca, "b.test": cb}[name], name); err != nil || got != "origin "+name {
			t.Fatalf("%s after a forged Initial from its address: %q %v", name, got, err)
		}
	}

	// Beside the engine's own HTTP/3: its connection first, then a
	// relayed one, on one socket.
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "index.html"), "engine's own")
	own := newPKI(t, t.TempDir(), "files.test")
	mixed := start(t, passthroughConfig(fmt.Sprintf("[kernel]\nktls = \"auto\"\n[[sites]]\ndomain = \"files.test\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n",
		root, own.certFile, own.keyFile), "a.test", addrA))
	pem, _ = os.ReadFile(own.caFile)
	pool.AppendCertsFromPEM(pem)
	engine, _ = net.ResolveUDPAddr("udp", mixed.addr)
	ts = mixed
	cf, ca2 := client(), client()
	if got, err := get(cf, "files.test"); err != nil || got != "engine's own" {
		t.Fatalf("files.test (the engine's own HTTP/3): %q %v", got, err)
	}
	if got, err := get(ca2, "a.test"); err != nil || got != "origin a.test" {
		t.Fatalf("a.test after the engine's own connection on the same socket: %q %v", got, err)
	}
	if got, err := get(cf, "files.test"); err != nil || got != "engine's own" {
		t.Fatalf("files.test again: %q %v", got, err)
	}
}

// TestPassthroughQUICSpoofed: a client's first flight replayed from
// addresses that never answer (what a spoofed flood looks like) opens
// flows that are dropped once header_timeout passes unanswered; at
// max_connections flows a new one takes the place of the oldest
// unanswered one, never of a real client's, whose connection goes on.
func TestPassthroughQUICSpoofed(t *testing.T) {
	addrA, pkiA := startH3Origin(t, "a.test")
	ts := start(t, passthroughConfig("[limits]\nheader_timeout = \"1s\"\nmax_connections = 4\n", "a.test", addrA))
	real := quicPassClient(t, ts.addr, pkiA.pool)
	get := func(when string) {
		t.Helper()
		resp, err := real.Get("https://a.test:" + portOf(ts.addr) + "/")
		if err != nil {
			t.Fatalf("the real client %s: %v", when, err)
		}
		resp.Body.Close()
	}
	get("before the flood")

	// Six first flights, each its own hello: one hello replayed is
	// relayed once (below).
	var flights [][][]byte
	for range 6 {
		flights = append(flights, firstFlight(t, "a.test"))
	}

	engine, _ := net.ResolveUDPAddr("udp", ts.addr)
	send := func(flight [][]byte) {
		c, err := net.DialUDP("udp", nil, engine)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		for _, d := range flight {
			c.Write(d)
		}
	}
	for _, flight := range flights {
		send(flight)
	}
	// All six are relayed, each in the place of an unanswered one once
	// four are open: at least three are gone by then (exactly three when
	// the machine is quick; more when header_timeout passed for some
	// meanwhile), and never the real client's (the next get).
	st := ts.Stats()
	if !waitFor(scale(5*time.Second), func() bool { st = ts.Stats(); return st.QUICPassRelayed == 7 }) ||
		st.QUICPassUnconfirmed < 3 {
		t.Fatalf("six replayed first flights beside one real client, room for four: relayed %d, dropped unconfirmed %d (want 7, at least 3), failures %v",
			st.QUICPassRelayed, st.QUICPassUnconfirmed, st.QUICPassFailures)
	}
	get("during the flood")
	if !waitFor(scale(10*time.Second), func() bool { st = ts.Stats(); return st.QUICPassActive == 1 }) || st.QUICPassUnconfirmed != 6 {
		t.Fatalf("unanswered flows: %d flows still open, %d dropped unconfirmed; want 1 (the real one) and 6", st.QUICPassActive, st.QUICPassUnconfirmed)
	}
	get("after the flood")

	// A first flight replayed from another address while its flow is
	// open is not relayed again (as a hello come back round a loop).
	flight := firstFlight(t, "a.test")
	send(flight)
	send(flight)
	// Both counts are waited for: the second flight's loop can be
	// counted before the first one's relay is.
	if !waitFor(scale(5*time.Second), func() bool {
		st = ts.Stats()
		return st.QUICPassFailures["loop"] == 1 && st.QUICPassRelayed == 8
	}) {
		t.Fatalf("one first flight from two addresses: relayed %d in all (want 8), failures %v (want loop 1)", st.QUICPassRelayed, st.QUICPassFailures)
	}
}

// freeTCPUDPPort is a port free on 127.0.0.1 for TCP and UDP both, as
// a passthrough listener takes; another process may take it before it
// is used.
func freeTCPUDPPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		ln.Close()
		if err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no port free for TCP and UDP")
	return 0
}

// TestPassthroughLoop: two servers whose passthrough routes point at
// each other (each configuration is valid on its own) relay a client's
// hello round once, not without end: the hello that comes back to a
// relay that already carries it is refused as a loop, for TCP and for
// QUIC; the TCP client gets its connection closed, not a hang.
func TestPassthroughLoop(t *testing.T) {
	portA := freeTCPUDPPort(t)
	b := startLog(t, passthroughConfig("", "a.test", fmt.Sprintf("127.0.0.1:%d", portA)), nil)
	a := startLog(t, passthroughConfig(fmt.Sprintf("listen = \"127.0.0.1:%d\"", portA), "a.test", b.addr), nil)

	raw, err := net.DialTimeout("tcp", a.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(scale(10 * time.Second)))
	err = tls.Client(raw, &tls.Config{ServerName: "a.test"}).Handshake()
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("handshake through the loop: %v; want the connection refused, promptly", err)
	}
	if sa, sb := a.Stats(), b.Stats(); sa.PassFailures["loop"] != 1 || sa.PassRelayed+sb.PassRelayed > 2 {
		t.Errorf("TCP: loops refused %d (a) %d (b), relayed %d (a) %d (b); want one refusal and two relays", sa.PassFailures["loop"], sb.PassFailures["loop"], sa.PassRelayed, sb.PassRelayed)
	}

	c, err := net.Dial("udp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, d := range firstFlight(t, "a.test") {
		c.Write(d)
	}
	for end := time.Now().Add(scale(10 * time.Second)); a.Stats().QUICPassFailures["loop"] == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("QUIC: no loop refused in 10 s; relayed %d (a) %d (b)", a.Stats().QUICPassRelayed, b.Stats().QUICPassRelayed)
		}
	}
	time.Sleep(100 * time.Millisecond) // what a loop would relay meanwhile
	if sa, sb := a.Stats(), b.Stats(); sa.QUICPassRelayed+sb.QUICPassRelayed > 2 {
		t.Errorf("QUIC: relayed %d (a) %d (b); want the client's flow and its one relay", sa.QUICPassRelayed, sb.QUICPassRelayed)
	}
}

// TestPassthroughQUICRetry: an origin that validates every client's
// address with a Retry is reached through the relay: the client's first
// flight again, with the same hello under the ID the Retry gave (which
// the router learns from the Retry), goes on the client's own flow, not
// refused as a hello a relay already carries.
func TestPassthroughQUICRetry(t *testing.T) {
	pki, cert, udp := h3OriginSocket(t, "a.test")
	retried := make(chan struct{}, 16)
	tr := &quic.Transport{Conn: udp, VerifySourceAddress: func(net.Addr) bool {
		select {
		case retried <- struct{}{}:
		default:
		}
		return true
	}}
	ln, err := tr.ListenEarly(http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin a.test") })}
	go srv.ServeListener(ln)
	t.Cleanup(func() { srv.Close(); ln.Close(); tr.Close() })

	ts := start(t, passthroughConfig("", "a.test", udp.LocalAddr().String()))
	resp, err := quicPassClient(t, ts.addr, pki.pool).Get("https://a.test:" + portOf(ts.addr) + "/")
	if err != nil {
		t.Fatalf("through a Retry: %v (failures %v)", err, ts.Stats().QUICPassFailures)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "origin a.test" || len(retried) == 0 {
		t.Fatalf("answer %q, Retries sent %d", body, len(retried))
	}
	if st := ts.Stats(); st.QUICPassRelayed != 1 {
		t.Errorf("%d flows relayed for one connection; failures %v", st.QUICPassRelayed, st.QUICPassFailures)
	}
}

// TestPassthroughTotals: the totals line a stopping server logs counts
// what passthrough relayed (spliced, so never among its writes).
func TestPassthroughTotals(t *testing.T) {
	a := startTLSOrigin(t, "a.test", digestOrigin("a"))
	var logs syncBuffer
	ts := startLog(t, passthroughConfig("", "a.test", a.addr), &logs)
	msg := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB up
	if got, _, err := passRoundTrip(ts.addr, "a.test", &tls.Config{RootCAs: a.pki.pool}, nil, msg); err != nil || got != digestLine("a", msg) {
		t.Fatalf("relay: %q, %v", got, err)
	}
	ts.stop()
	var line string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "msg=totals") {
			line = l
		}
	}
	var relays, relayed int64
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, "relays="); ok {
			fmt.Sscan(v, &relays)
		}
		if v, ok := strings.CutPrefix(f, "relayed_bytes="); ok {
			fmt.Sscan(v, &relayed)
		}
	}
	if relays != 1 || relayed < int64(len(msg)) {
		t.Errorf("totals: relays %d, relayed_bytes %d; want 1 and at least the %d bytes sent:\n%s", relays, relayed, len(msg), line)
	}
}

// TestPassthroughAccessLog: a relayed connection gets its access log
// line when it ends, in json (client, name, route, upstream, bytes each
// way, duration) and in combined (nginx stream's basic format, the
// upstream and the name after it).
func TestPassthroughAccessLog(t *testing.T) {
	a := startTLSOrigin(t, "a.test", digestOrigin("a"))
	msg := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB up
	for _, format := range []string{"json", "combined"} {
		t.Run(format, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "access.log")
			ts := start(t, passthroughConfig(fmt.Sprintf("access_log = %q\naccess_log_format = %q\n", logPath, format), "a.test", a.addr))
			if got, _, err := passRoundTrip(ts.addr, "a.test", &tls.Config{RootCAs: a.pki.pool}, nil, msg); err != nil || got != digestLine("a", msg) {
				t.Fatalf("relay: %q, %v", got, err)
			}
			ts.stop()
			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			line := strings.TrimSpace(string(b))
			if format == "combined" {
				re := regexp.MustCompile(`^127\.0\.0\.1 \[[^]]+\] TCP 200 (\d+) (\d+) \d+\.\d{3} "` + regexp.QuoteMeta(a.addr) + `" "a\.test"$`)
				m := re.FindStringSubmatch(line)
				var down, up int64
				if m != nil {
					fmt.Sscan(m[1], &down)
					fmt.Sscan(m[2], &up)
				}
				if m == nil || up < int64(len(msg)) || down == 0 {
					t.Errorf("combined relay line %q", line)
				}
				return
			}
			var l struct {
				Client, Relay, SNI, Route, Upstream string
				Status                              int
				Up                                  int64   `json:"bytes_up"`
				Down                                int64   `json:"bytes_down"`
				Duration                            float64 `json:"duration"`
			}
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("json relay line %q: %v", line, err)
			}
			if l.Client != "127.0.0.1" || l.Relay != "tcp" || l.Status != 200 || l.SNI != "a.test" || l.Route != "a.test" || l.Upstream != a.addr ||
				l.Up < int64(len(msg)) || l.Down == 0 || l.Duration <= 0 {
				t.Errorf("json relay line %q", line)
			}
		})
	}
	// A connection no upstream took gets its line too, status 502, naming
	// the upstream tried, as nginx's stream module logs it.
	t.Run("unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := l.Addr().String()
		l.Close()
		logPath := filepath.Join(t.TempDir(), "access.log")
		ts := start(t, passthroughConfig(fmt.Sprintf("access_log = %q\naccess_log_format = \"json\"\n", logPath), "a.test", dead))
		if _, _, err := passRoundTrip(ts.addr, "a.test", &tls.Config{InsecureSkipVerify: true}, nil, []byte("x")); err == nil {
			t.Fatal("a relay to a closed port succeeded")
		}
		ts.stop()
		b, _ := os.ReadFile(logPath)
		var l2 struct {
			Relay, SNI, Upstream string
			Status               int
			Up                   int64 `json:"bytes_up"`
		}
		line := strings.TrimSpace(string(b))
		if err := json.Unmarshal([]byte(line), &l2); err != nil || l2.Relay != "tcp" || l2.Status != 502 || l2.SNI != "a.test" || l2.Upstream != dead || l2.Up != 0 {
			t.Errorf("relay line for an unreachable upstream %q (%v)", line, err)
		}
	})

	// A QUIC flow gets its line as it ends (here at the stop), with the
	// datagram bytes each way.
	t.Run("quic", func(t *testing.T) {
		addr, pki := startH3Origin(t, "a.test")
		logPath := filepath.Join(t.TempDir(), "access.log")
		ts := start(t, passthroughConfig(fmt.Sprintf("access_log = %q\naccess_log_format = \"json\"\n", logPath), "a.test", addr))
		c := quicPassClient(t, ts.addr, pki.pool)
		resp, err := c.Get("https://a.test:" + portOf(ts.addr) + "/bytes")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != h3OriginBytes {
			t.Fatalf("%d bytes through the relay", n)
		}
		ts.stop()
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Client, Relay, SNI, Route, Upstream string
			Up                                  int64   `json:"bytes_up"`
			Down                                int64   `json:"bytes_down"`
			Duration                            float64 `json:"duration"`
		}
		line := strings.TrimSpace(string(b))
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("json relay line %q: %v", line, err)
		}
		if l.Client != "127.0.0.1" || l.Relay != "quic" || l.SNI != "a.test" || l.Route != "a.test" || l.Upstream != addr ||
			l.Down < h3OriginBytes || l.Up == 0 || l.Duration <= 0 {
			t.Errorf("json QUIC relay line %q", line)
		}
	})
}
