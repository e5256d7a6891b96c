package ktls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// testCert is a self-signed P-256 certificate for "localhost".
func testCert(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// event is one call from the handshake goroutine, delivered in order, as
// Loop.Post delivers them to a reactor.
type event struct {
	kind string // "want", "send", "done"
	data []byte
	s    *Session
	err  error
}

type chanIO chan event

func (c chanIO) Want(out []byte) { c <- event{kind: "want", data: out} }
func (c chanIO) Done(out []byte, s *Session, err error) {
	c <- event{kind: "done", data: out, s: s, err: err}
}

// serveOne plays the reactor for one connection: it feeds whole records to
// the handshake, then answers each application record with its upper-case
// copy through our record layer. With await above zero it starts the
// handshake with StartAwaited and waits up to await for each step in
// Await; steps tells how many ended there and how many through
// HandshakeIO.
func serveOne(t *testing.T, conn net.Conn, cfg *tls.Config, await time.Duration, steps *stepCount) *Session {
	raw := make(chan []byte, 16)
	go func() {
		for {
			b := make([]byte, 4096)
			n, err := conn.Read(b)
			if n > 0 {
				raw <- b[:n]
			}
			if err != nil {
				close(raw)
				return
			}
		}
	}()
	ev := make(chanIO, 64)
	var h *Handshake
	var buf []byte
	wanted := false
	var s *Session
	handle := func(e event) bool {
		conn.Write(e.data)
		switch e.kind {
		case "want":
			wanted = true
		case "done":
			if e.err != nil {
				t.Errorf("handshake: %v", e.err)
				return false
			}
			s = e.s
		}
		return true
	}
	awaitStep := func() bool {
		if await <= 0 {
			return true
		}
		timer := time.NewTimer(await)
		defer timer.Stop()
		st, ok := h.Await(timer)
		if !ok {
			return true // through ev
		}
		steps.awaited.Add(1)
		e := event{kind: "want", data: st.Out}
		if st.Done {
			e = event{kind: "done", data: st.Out, s: st.Session, err: st.Err}
		}
		return handle(e)
	}
	for s == nil {
		select {
		case e := <-ev:
			steps.io.Add(1)
			if !handle(e) {
				return nil
			}
		case b, ok := <-raw:
			if !ok {
				if h != nil {
					h.Abort()
				}
				t.Error("client closed during the handshake")
				return nil
			}
			buf = append(buf, b...)
		}
		// An awaited step may want the next record at once (the client's
		// Finished behind its change_cipher_spec), and it may be here.
		for fed := true; fed && s == nil; {
			fed = false
			n := RecordLen(buf)
			switch {
			case n == 0 || len(buf) < n:
			case h == nil && await > 0:
				h = StartAwaited(cfg, ev, conn.LocalAddr(), conn.RemoteAddr(), bytes.Clone(buf[:n]))
				buf, fed = buf[n:], true
				if !awaitStep() {
					return nil
				}
			case h == nil:
				h = StartHandshake(cfg, ev, conn.LocalAddr(), conn.RemoteAddr(), bytes.Clone(buf[:n]))
				buf = buf[n:]
			case wanted:
				h.Feed(bytes.Clone(buf[:n]))
				buf, fed = buf[n:], true
				wanted = false
				if !awaitStep() {
					return nil
				}
			}
		}
	}
	// Whatever followed the handshake is application data: ours.
	open, _ := NewOpener(s.Read, s.ReadSeq)
	seal, _ := NewSealer(s.Write, s.WriteSeq)
	for {
		rec, err := open.Open(buf)
		if err != nil {
			t.Errorf("open: %v", err)
			return s
		}
		if rec == nil {
			b, ok := <-raw
			if !ok {
				return s
			}
			buf = append(buf, b...)
			continue
		}
		buf = buf[rec.Wire:]
		out, _ := seal.Seal(nil, RecordApplicationData, bytes.ToUpper(rec.Data))
		conn.Write(out)
	}
}

// stepCount counts how the steps of a handshake ended.
type stepCount struct{ awaited, io atomic.Int64 }

// TestHandshakeKeys runs real crypto/tls clients against the handshake
// driver and our record layer: the keys from the key log and the sequence
// number found after the session tickets must let both sides talk, first
// handshake and resumed alike, with each step's end handed over through
// HandshakeIO or taken by Await.
func TestHandshakeKeys(t *testing.T) {
	t.Run("through HandshakeIO", func(t *testing.T) {
		var steps stepCount
		handshakeKeys(t, 0, &steps)
		if steps.awaited.Load() != 0 || steps.io.Load() == 0 {
			t.Errorf("%d steps awaited and %d through HandshakeIO; want none awaited", steps.awaited.Load(), steps.io.Load())
		}
	})
	t.Run("awaited", func(t *testing.T) {
		var steps stepCount
		handshakeKeys(t, 10*time.Second, &steps)
		if steps.awaited.Load() == 0 || steps.io.Load() != 0 {
			t.Errorf("%d steps awaited and %d through HandshakeIO; want all awaited", steps.awaited.Load(), steps.io.Load())
		}
	})
}

// TestAwaitGivesUp: a step that does not end within Await's timer (here,
// a certificate that takes its time) ends through HandshakeIO instead,
// and the handshake completes.
func TestAwaitGivesUp(t *testing.T) {
	cert, pool := testCert(t)
	release := make(chan struct{})
	cfg := ServerConfig(&tls.Config{MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { <-release; return &cert, nil }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var steps stepCount
	served := make(chan *Session, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		served <- serveOne(t, c, cfg, 20*time.Millisecond, &steps)
	}()
	go func() {
		// Held until Await has surely given up on the first step.
		time.Sleep(300 * time.Millisecond)
		close(release)
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("ping"))
	got := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "PING" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	c.Close()
	if s := <-served; s == nil {
		t.Fatal("no session")
	}
	if steps.io.Load() == 0 {
		t.Errorf("%d steps awaited and none through HandshakeIO: the slow first step was waited for past the timer", steps.awaited.Load())
	}
}

func handshakeKeys(t *testing.T, await time.Duration, steps *stepCount) {
	cert, pool := testCert(t)
	cfg := ServerConfig(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13,
		NextProtos: []string{"http/1.1"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sessions := make(chan *Session, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); sessions <- serveOne(t, c, cfg, await, steps) }()
		}
	}()
	cache := tls.NewLRUClientSessionCache(4)
	for i, want := range []bool{false, true, true} {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost",
			ClientSessionCache: cache, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		for _, msg := range []string{"ping", "second record", string(bytes.Repeat([]byte("x"), 40000))} {
			c.Write([]byte(msg))
			got := make([]byte, len(msg))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != string(bytes.ToUpper([]byte(msg))) {
				t.Fatalf("connection %d: echo of %d bytes: %v", i, len(msg), err)
			}
		}
		if c.ConnectionState().DidResume != want {
			t.Errorf("connection %d: resumed = %v, want %v", i, c.ConnectionState().DidResume, want)
		}
		c.Close()
		s := <-sessions
		if s == nil {
			t.Fatal("no session")
		}
		if s.Resumed != want || s.ALPN != "http/1.1" || s.ServerName != "localhost" {
			t.Errorf("session %d: %+v", i, s)
		}
		t.Logf("connection %d: %s, resumed %v, server's next sequence number %d", i, s.Suite.Name, s.Resumed, s.WriteSeq)
	}
}

func TestHandshakeGarbage(t *testing.T) {
	cert, _ := testCert(t)
	cfg := ServerConfig(&tls.Config{Certificates: []tls.Certificate{cert}})
	ev := make(chanIO, 16)
	StartHandshake(cfg, ev, nil, nil, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	for e := range ev {
		if e.kind == "done" {
			if e.err == nil {
				t.Fatal("handshake accepted plain HTTP")
			}
			return
		}
	}
}

func TestExpandLabel(t *testing.T) {
	// RFC 8448 §3 (Simple 1-RTT Handshake): server handshake traffic
	// secret -> key and iv for TLS_AES_128_GCM_SHA256.
	secret := mustHex("b6 7b 7d 69 0c c1 6c 4e 75 e5 42 13 cb 2d 37 b4 e9 c9 12 bc de d9 10 5d 42 be fd 59 d3 91 ad 38")
	k, err := TrafficKeys(AES128GCM, secret)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustHex("3f ce 51 60 09 c2 17 27 d0 f2 e4 e8 6e e4 03 bc"); !bytes.Equal(k.Key, want) {
		t.Errorf("key % x, want % x", k.Key, want)
	}
	if want := mustHex("5d 31 3e b2 67 12 76 ee 13 00 0b 30"); !bytes.Equal(k.IV[:], want) {
		t.Errorf("iv % x, want % x", k.IV, want)
	}
}

func mustHex(s string) []byte {
	var out []byte
	for _, f := range bytes.Fields([]byte(s)) {
		var b byte
		for _, c := range f {
			b <<= 4
			switch {
			case c >= '0' && c <= '9':
				b |= c - '0'
			default:
				b |= c - 'a' + 10
			}
		}
		out = append(out, b)
	}
	return out
}

// TestHandshakeKeys12 is TestHandshakeKeys for TLS 1.2 clients: keys from
// the master secret, the server random from our ServerHello, the explicit
// nonce of AES-GCM and the implicit one of ChaCha20.
func TestHandshakeKeys12(t *testing.T) {
	cert, pool := testCert(t)
	cfg := ServerConfig(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		CipherSuites: TLS12SuiteIDs(), SessionTicketsDisabled: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sessions := make(chan *Session, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); sessions <- serveOne(t, c, cfg, 0, new(stepCount)) }()
		}
	}()
	for _, id := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256} {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost",
			MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{id}})
		if err != nil {
			t.Fatalf("%s: %v", tls.CipherSuiteName(id), err)
		}
		for _, msg := range []string{"ping", string(bytes.Repeat([]byte("y"), 40000))} {
			c.Write([]byte(msg))
			got := make([]byte, len(msg))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != string(bytes.ToUpper([]byte(msg))) {
				t.Fatalf("%s: echo of %d bytes: %v", tls.CipherSuiteName(id), len(msg), err)
			}
		}
		c.Close()
		if s := <-sessions; s == nil || s.Suite.ID != id || s.Version != tls.VersionTLS12 {
			t.Errorf("%s: session %+v", tls.CipherSuiteName(id), s)
		}
	}
}
