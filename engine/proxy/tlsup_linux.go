package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
func dialTLS(l *reactor.Loop, u *routing.Upstream, timeout, stall time.Duration, h reactor.Handler, note func(string, ...any)) (*reactor.Conn, error) {
	c, side, err := dialSide(l, u.Addr, timeout, h)
	if err != nil {
		return nil, err
	}
	go bridge(l, c, side, u, timeout, stall, note)
	return c, nil
}

// dialSide gives the loop one end of a new socketpair (connecting, until
// Established) and returns the other, for a goroutine.
func dialSide(l *reactor.Loop, addr reactor.Addr, timeout time.Duration, h reactor.Handler) (*reactor.Conn, *net.UnixConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	f := os.NewFile(uintptr(fds[1]), "upstream-side")
	side, err := net.FileConn(f) // a duplicate, in Go's poller
	f.Close()
	if err != nil {
		unix.Close(fds[0])
		return nil, nil, err
	}
	c, err := l.DialVia(fds[0], addr, timeout, h)
	if err != nil {
		side.Close()
		return nil, nil, err
	}
	return c, side.(*net.UnixConn), nil
}

// PipeSource is a Source whose response serve writes into its side of a
// socketpair, on a goroutine of its own: an HTTP/1.1 response ended by
// closing side (a close before the whole body is a cut the client sees).
func PipeSource(serve func(side *net.UnixConn)) Source {
	return func(l *reactor.Loop, timeout time.Duration, h reactor.Handler) (*reactor.Conn, error) {
		c, side, err := dialSide(l, reactor.Addr{}, timeout, h)
		if err != nil {
			return nil, err
		}
		c.Established(nil) // connected at once: the loop runs this
		go serve(side)
		return c, nil
	}
}

// bridge connects to u with TLS within timeout, reports the outcome to
// the loop (Established), and then relays until either side ends.
//
// What the upstream's side ends with decides how the loop's connection
// ends: the upstream's clean end (close_notify, or its FIN) is the end
// of the stream after the last byte; a TLS error or a reset is a reset,
// so that a response cut short on the way is never taken for a whole
// one; and a TLS alert before any byte of a response (a TLS 1.3 server
// refusing the client's certificate after the handshake) fails the
// connection as a refused one would (Fail: the next upstream is tried).
// The loop closing its end closes the TCP connection, whatever the
// upstream does: a blocked read returns at once; a write the upstream
// takes nothing of for stall (it stopped reading) ends the connection.
func bridge(l *reactor.Loop, c *reactor.Conn, side *net.UnixConn, u *routing.Upstream, timeout, stall time.Duration, note func(string, ...any)) {
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
		// Upstream to loop.
		buf := make([]byte, 64<<10)
		var moved int64
		for {
			n, rerr := tc.Read(buf)
			if n > 0 {
				if _, werr := side.Write(buf[:n]); werr != nil {
					raw.Close()
					return // the loop closed its end
				}
				moved += int64(n)
			}
			if rerr == nil {
				continue
			}
			if rerr == io.EOF {
				side.CloseWrite() // the upstream's clean end
				return
			}
			var oe *net.OpError
			refused := moved == 0 && errors.As(rerr, &oe) && oe.Op == "remote error"
			note("upstream TLS connection failed", "upstream", u.Name, "bytes", moved, "err", rerr)
			l.Post(func() {
				if refused {
					c.Fail(fmt.Errorf("upstream refused the TLS connection: %w", rerr))
				} else {
					c.Abort()
				}
				side.Close()
			})
			raw.Close()
			return
		}
	}()
	// Loop to upstream: the loop closing its end ends the connection, at
	// once (raw, not tc: tc.Close waits for a write under way).
	buf := make([]byte, 32<<10)
	for {
		n, err := side.Read(buf)
		if n > 0 {
			raw.SetWriteDeadline(time.Now().Add(stall))
			if _, werr := tc.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	raw.Close()
	side.Close()
}
