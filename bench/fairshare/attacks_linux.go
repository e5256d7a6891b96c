package main

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/mediaship/engine/wt"
)

// An attack runs against one server from many loopback addresses until
// its context ends: each of its connections does its one wrong thing,
// and when the server closes it, comes back after a pause (attackers
// persist).
type attack struct {
	name   string
	what   string // for the page
	perAdr int    // connections per address (0: the --per-addr flag)
	addrs  int    // addresses (0: the --addrs flag)
	quic   bool   // needs HTTP/3 (not run against a server without it)
	wt     bool   // needs WebTransport
	run    func(ctx context.Context, a *attackEnv, src net.IP)
}

// attackEnv is what every attacking connection needs, and what they
// count.
type attackEnv struct {
	target string // host:port (TCP and UDP)
	tls    *tls.Config
	h2     *tls.Config
	// Counted over the attack: connections the server let in (TLS
	// handshake done, or QUIC), and those it closed or refused.
	opened, ended atomic.Int64
}

const reconnectPause = 500 * time.Millisecond

var attacks = []attack{
	{name: "slow readers", what: "TLS connections that ask for the 100 MiB file and read 300 bytes a second (receive buffer 4 KiB)", run: slowReader},
	{name: "silent connections", what: "TCP connections that send nothing", run: silent},
	{name: "half heads", what: "TLS connections that send a request head a line every 5 s and never end it (slowloris)", run: halfHead},
	{name: "stalled proxied streams", what: "TLS connections that ask for the 100 MiB file through the reverse proxy and read nothing past the head", run: stalledProxy},
	{name: "HTTP/2 WINDOW_UPDATE flood", what: "HTTP/2 connections (one per address) that send WINDOW_UPDATE frames as fast as the server takes them", perAdr: 1, addrs: 50, run: windowUpdates},
	{name: "idle QUIC connections", what: "QUIC connections (ALPN h3) that make no request and keep the connection alive with PINGs", quic: true, run: idleQUIC},
	{name: "idle WebTransport sessions", what: "WebTransport sessions (mode=echo) opened and left idle, 4 per connection (max_sessions is 64: with more addresses than that, each holding one, nothing tells the honest client from the crowd)", perAdr: 2, addrs: 50, quic: true, wt: true, run: idleWT},
}

// forever runs one connection's attack again and again until ctx ends.
func forever(ctx context.Context, once func() error) {
	for ctx.Err() == nil {
		once()
		select {
		case <-ctx.Done():
		case <-time.After(reconnectPause):
		}
	}
}

// dialTCP connects from src with a small receive buffer (set before the
// handshake, so the window the server sees is small too), closed when
// ctx ends.
func dialTCP(ctx context.Context, a *attackEnv, src net.IP, rcvbuf int) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
	d.Control = func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) {
			// An Ethernet MSS, as a remote client's SYN says: on loopback
			// (MSS 65483) the server's kernel sizes each socket's send
			// buffer for segments 45 times larger, and a thousand slow
			// readers put every socket of the machine under TCP memory
			// pressure, a loopback effect, not one of the server.
			err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1460)
			if err == nil && rcvbuf > 0 {
				err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			}
		})
		return err
	}
	c, err := d.DialContext(ctx, "tcp", a.target)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	return &closer{Conn: c, stop: stop}, nil
}

type closer struct {
	net.Conn
	stop func() bool
}

func (c *closer) Close() error { c.stop(); return c.Conn.Close() }

func dialTLS(ctx context.Context, a *attackEnv, src net.IP, rcvbuf int, conf *tls.Config) (*tls.Conn, error) {
	c, err := dialTCP(ctx, a, src, rcvbuf)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, conf)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	tc.SetDeadline(time.Time{})
	a.opened.Add(1)
	return tc, nil
}

func slowReader(ctx context.Context, a *attackEnv, src net.IP) {
	forever(ctx, func() error {
		c, err := dialTLS(ctx, a, src, 4096, a.tls)
		if err != nil {
			return err
		}
		defer func() { c.Close(); a.ended.Add(1) }()
		if _, err := io.WriteString(c, "GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			return err
		}
		buf := make([]byte, 300)
		for {
			if _, err := c.Read(buf); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	})
}

func silent(ctx context.Context, a *attackEnv, src net.IP) {
	forever(ctx, func() error {
		c, err := dialTCP(ctx, a, src, 0)
		if err != nil {
			return err
		}
		a.opened.Add(1)
		defer func() { c.Close(); a.ended.Add(1) }()
		_, err = c.Read(make([]byte, 1)) // until the server closes it
		return err
	})
}

func halfHead(ctx context.Context, a *attackEnv, src net.IP) {
	forever(ctx, func() error {
		c, err := dialTLS(ctx, a, src, 0, a.tls)
		if err != nil {
			return err
		}
		defer func() { c.Close(); a.ended.Add(1) }()
		if _, err := io.WriteString(c, "GET /small.bin HTTP/1.1\r\nHost: localhost\r\n"); err != nil {
			return err
		}
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(5 * time.Second):
			}
			if _, err := fmt.Fprintf(c, "X-%d: y\r\n", i); err != nil {
				return err
			}
		}
	})
}

func stalledProxy(ctx context.Context, a *attackEnv, src net.IP) {
	forever(ctx, func() error {
		c, err := dialTLS(ctx, a, src, 4096, a.tls)
		if err != nil {
			return err
		}
		defer func() { c.Close(); a.ended.Add(1) }()
		if _, err := io.WriteString(c, "GET /proxy/big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			return err
		}
		// The head and what fits the buffers, then nothing: wait for the
		// server to give up (a read that returns an error).
		c.Read(make([]byte, 512))
		<-ctx.Done()
		return nil
	})
}

// windowUpdates floods WINDOW_UPDATE frames (connection-level, increment
// 1) in batches of 1,000, reading and dropping what the server sends.
func windowUpdates(ctx context.Context, a *attackEnv, src net.IP) {
	frame := make([]byte, 13)
	binary.BigEndian.PutUint32(frame[0:4], 4<<8|0x8) // length 4, type WINDOW_UPDATE
	binary.BigEndian.PutUint32(frame[9:13], 1)
	batch := make([]byte, 0, 13*1000)
	for range 1000 {
		batch = append(batch, frame...)
	}
	forever(ctx, func() error {
		c, err := dialTLS(ctx, a, src, 0, a.h2)
		if err != nil {
			return err
		}
		defer func() { c.Close(); a.ended.Add(1) }()
		if c.ConnectionState().NegotiatedProtocol != "h2" {
			return fmt.Errorf("no h2")
		}
		go io.Copy(io.Discard, c)
		// Preface and an empty SETTINGS frame.
		if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
			return err
		}
		for {
			if _, err := c.Write(batch); err != nil {
				return err
			}
		}
	})
}

// quicFrom is a QUIC transport on a UDP socket bound to src.
func quicFrom(src net.IP) (*quic.Transport, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: src})
	if err != nil {
		return nil, err
	}
	return &quic.Transport{Conn: udp}, nil
}

// closeTransport closes a transport quicFrom made, and its socket (a
// Transport does not close a socket it was given).
func closeTransport(tr *quic.Transport) {
	tr.Close()
	tr.Conn.Close()
}

// dialQUIC connects from src; done closes the connection, its transport
// and its socket.
func dialQUIC(ctx context.Context, a *attackEnv, src net.IP, wtOn bool) (c *quic.Conn, done func(), err error) {
	tr, err := quicFrom(src)
	if err != nil {
		return nil, nil, err
	}
	ua, _ := net.ResolveUDPAddr("udp", a.target)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conf := a.tls.Clone()
	conf.NextProtos = []string{"h3"}
	qc := &quic.Config{KeepAlivePeriod: 5 * time.Second, MaxIdleTimeout: 60 * time.Second, EnableDatagrams: wtOn, EnableStreamResetPartialDelivery: wtOn, MaxIncomingUniStreams: 100}
	if c, err = tr.Dial(dctx, ua, conf, qc); err != nil {
		closeTransport(tr)
		return nil, nil, err
	}
	a.opened.Add(1)
	return c, func() { c.CloseWithError(0, ""); closeTransport(tr) }, nil
}

func idleQUIC(ctx context.Context, a *attackEnv, src net.IP) {
	forever(ctx, func() error {
		c, done, err := dialQUIC(ctx, a, src, false)
		if err != nil {
			return err
		}
		defer func() { done(); a.ended.Add(1) }()
		select {
		case <-ctx.Done():
		case <-c.Context().Done():
		}
		return nil
	})
}

// idleWT opens four sessions on one connection and holds them until the
// server ends them all (or the connection).
func idleWT(ctx context.Context, a *attackEnv, src net.IP) {
	forever(ctx, func() error {
		c, done, err := dialQUIC(ctx, a, src, true)
		if err != nil {
			return err
		}
		defer func() { done(); a.ended.Add(1) }()
		cc, err := wt.NewClientConn(c)
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				sess, _, err := cc.Dial(dctx, "https://localhost:"+port(a.target)+"/wt?mode=echo", nil)
				cancel()
				if err != nil {
					return
				}
				select {
				case <-ctx.Done():
				case <-sess.Done():
				}
			})
		}
		wg.Wait()
		return nil
	})
}

func port(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

// wtClient serves WebTransport on c and returns a function that opens a
// session at a URL and closes it again.
func wtClient(c *quic.Conn) (func(ctx context.Context, url string) error, error) {
	cc, err := wt.NewClientConn(c)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, url string) error {
		sess, _, err := cc.Dial(ctx, url, nil)
		if err != nil {
			return err
		}
		return sess.Close(0, "")
	}, nil
}
