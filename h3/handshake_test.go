package h3

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/mediaship/engine/internal/selfsigned"
)

// lossyRelay forwards datagrams between one client (the last address that
// sent to it) and a server, and drops the server's while drop is set.
type lossyRelay struct {
	in, up *net.UDPConn
	drop   atomic.Bool
	mu     sync.Mutex
	client *net.UDPAddr // guarded by mu
}

func newLossyRelay(t *testing.T, server *net.UDPAddr) *lossyRelay {
	t.Helper()
	in, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.DialUDP("udp", nil, server)
	if err != nil {
		t.Fatal(err)
	}
	r := &lossyRelay{in: in, up: up}
	t.Cleanup(func() { in.Close(); up.Close() })
	go func() {
		b := make([]byte, 65536)
		for {
			n, from, err := in.ReadFromUDP(b)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.client = from
			r.mu.Unlock()
			up.Write(b[:n])
		}
	}()
	go func() {
		b := make([]byte, 65536)
		for {
			n, err := up.Read(b)
			if err != nil {
				return
			}
			r.mu.Lock()
			to := r.client
			r.mu.Unlock()
			if !r.drop.Load() && to != nil {
				in.WriteToUDP(b[:n], to)
			}
		}
	}()
	return r
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestHandshaking: a handshake under way is counted from the client's
// first Initial until the server accepts the connection, or until the
// handshake ends unaccepted (its timeout); HandshakesDone waits for it.
// A server that handed over closes its listener only then, since closing
// it refuses the handshakes under way (CONNECTION_REFUSED).
func TestHandshaking(t *testing.T) {
	cert, err := selfsigned.New("localhost", time.Hour, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Listen(Config{Addr: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{*cert}},
		Handler: http.NotFoundHandler(), HandshakeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })
	relay := newLossyRelay(t, s.Addr())
	clientTLS := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h3"}}
	var conns []*quic.Conn // kept open: an accepted connection stays so
	t.Cleanup(func() {
		for _, c := range conns {
			c.CloseWithError(0, "")
		}
	})
	dial := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() {
			c, err := quic.DialAddr(ctx, relay.in.LocalAddr().String(), clientTLS, &quic.Config{HandshakeIdleTimeout: 20 * time.Second})
			if err == nil {
				conns = append(conns, c) // read after done
			}
			done <- err
		}()
		return done
	}

	// The server's answers are lost: the handshake stays under way.
	relay.drop.Store(true)
	done := dial(context.Background())
	if !waitFor(10*time.Second, func() bool { return s.Handshaking() == 1 }) {
		t.Fatalf("Handshaking = %d while the server's answers are lost, want 1", s.Handshaking())
	}
	// They come through again (the client sends its Initial again): the
	// handshake completes, the connection is accepted, and no handshake
	// is under way.
	relay.drop.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handshake did not complete once the server's packets came through")
	}
	if !waitFor(10*time.Second, func() bool { return s.Handshaking() == 0 }) {
		t.Fatalf("Handshaking = %d after the connection was accepted, want 0", s.Handshaking())
	}
	if n := s.Stats().Connections; n != 1 {
		t.Fatalf("accepted %d connections, want 1", n)
	}

	// A client that gives up: its handshake ends on the server's
	// timeout, unaccepted, and HandshakesDone returns once it has.
	relay.drop.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done = dial(ctx)
	if !waitFor(10*time.Second, func() bool { return s.Handshaking() == 1 }) {
		t.Fatalf("Handshaking = %d for the second client, want 1", s.Handshaking())
	}
	cancel()
	<-done
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if left := s.HandshakesDone(wctx, 0); left != 0 || wctx.Err() != nil {
		t.Fatalf("HandshakesDone = %d (context: %v), want 0 once the abandoned handshake timed out", left, wctx.Err())
	}
	if n := s.Stats().Connections; n != 1 {
		t.Fatalf("accepted %d connections, want still 1", n)
	}
}
