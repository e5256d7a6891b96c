package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/routing"
)

// dialTLS opens a connection to a TLS upstream for the loop: the loop
// holds one end of a socketpair, as it would a TCP socket, and a
// goroutine (bridge) connects to u, runs the TLS handshake (verified as
// u.TLS says) and then carries the plaintext between the pair and the
// TLS connection. The loop's connection is Connected only once the
// handshake succeeded; a failed connect or handshake is its DialErr, so
// the exchange tries another upstream as after a refused connect.
//
// Why a bridge and not the record layer on the loop: the engine's record
// layer (ktls) and its handshake runner speak the server's side only.
// The bridge costs a copy through the pair and two goroutines per
// upstream connection, on the way to an origin (a cache fill, a proxied
// response), never on a cache hit or a file.
func dialTLS(l *reactor.Loop, u *routing.Upstream, timeout time.Duration, h reactor.Handler) (*reactor.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	f := os.NewFile(uintptr(fds[1]), "upstream-tls")
	side, err := net.FileConn(f) // a duplicate, in Go's poller
	f.Close()
	if err != nil {
		unix.Close(fds[0])
		return nil, err
	}
	c, err := l.DialVia(fds[0], u.Addr, timeout, h)
	if err != nil {
		side.Close()
		return nil, err
	}
	go bridge(l, c, side.(*net.UnixConn), u, timeout)
	return c, nil
}

// bridge connects to u with TLS within timeout, reports the outcome to
// the loop (Established), and then relays until either side ends.
func bridge(l *reactor.Loop, c *reactor.Conn, side *net.UnixConn, u *routing.Upstream, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", u.Addr.String())
	var tc *tls.Conn
	if err == nil {
		tc = tls.Client(raw, u.TLS)
		if err = tc.HandshakeContext(ctx); err != nil {
			raw.Close()
		}
	}
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = errors.New("TLS handshake with the upstream timed out (connect_timeout)")
		}
		// The pair closes after Established, on the loop: its hang-up
		// must not reach the connection first (a closed connection
		// without DialErr is a 502, not another upstream tried).
		l.Post(func() {
			c.Established(err)
			side.Close()
		})
		return
	}
	l.Post(func() { c.Established(nil) })
	go func() {
		// Upstream to loop: at the upstream's end (its close, or
		// close_notify) the loop reads the end of the stream after the
		// last byte.
		buf := make([]byte, 64<<10)
		io.CopyBuffer(side, tc, buf)
		side.CloseWrite()
	}()
	// Loop to upstream: the loop closing its end ends the connection.
	buf := make([]byte, 32<<10)
	io.CopyBuffer(tc, side, buf)
	tc.Close()
	side.Close()
}
