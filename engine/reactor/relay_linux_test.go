package reactor

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// relayHandler relays each accepted connection to a backend, both ways,
// with Relay: what a passthrough proxy does after it has routed.
type relayHandler struct {
	backend netip.AddrPort
	up      Handler // the upstream side's handler; nil on it
}

type relayPair struct {
	c, u    *Conn
	started bool
	done    bool // both directions ended: closes are clean
}

func (h *relayHandler) Open(c *Conn) {
	if h.up == nil {
		return // the upstream side: its state is set by Dial's caller
	}
	p := &relayPair{c: c}
	c.State = p
	u, err := c.Loop().Dial(h.backend, 5*time.Second, h.up)
	if err != nil {
		c.Abort()
		return
	}
	p.u, u.State = u, p
}

func (h *relayHandler) Serve(x *Conn) {
	p := x.State.(*relayPair)
	if !p.started {
		if x != p.u || !x.Connected() {
			return
		}
		p.started = true
		if in := p.c.Input(); len(in) > 0 {
			p.u.Write(in)
			p.c.Consume(len(in))
		}
		p.u.Relay(p.c)
		p.c.Relay(p.u)
		return
	}
	if p.c.EOF() && p.u.EOF() && !p.c.Pending() && !p.u.Pending() {
		p.done = true
		p.c.Close()
		p.u.Close()
	}
}

func (h *relayHandler) Closed(x *Conn) {
	p, _ := x.State.(*relayPair)
	if p == nil {
		return
	}
	for _, o := range []*Conn{p.c, p.u} {
		if o != nil && o != x && !o.Closed() {
			if p.done {
				o.Close()
			} else {
				o.Abort()
			}
		}
	}
}

func startRelay(t *testing.T, cfg Config, backend net.Listener) *Group {
	t.Helper()
	h := &relayHandler{backend: netip.MustParseAddrPort(backend.Addr().String()), up: &relayHandler{}}
	cfg.NewHandler = func(*Loop) Handler { return h }
	return startGroup(t, cfg)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// TestRelay: bytes both ways at once arrive whole through splice; a
// half-close passes on in each direction while the other keeps
// flowing; a backend's reset reaches the client as a reset, not a clean
// end; and a relay that is quiet for longer than the send timeout stays
// open (waiting on the source is not a stalled peer).
func TestRelay(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	conns := make(chan *net.TCPConn, 4)
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			conns <- c.(*net.TCPConn)
		}
	}()
	g := startRelay(t, Config{Workers: 1, ReadBuffer: 20 << 10, SendTimeout: 300 * time.Millisecond}, backend)
	dial := func() (*net.TCPConn, *net.TCPConn) {
		t.Helper()
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-conns:
			return c.(*net.TCPConn), b
		case <-time.After(5 * time.Second):
			t.Fatal("the relay never reached the backend")
		}
		return nil, nil
	}

	t.Run("both ways and half-close", func(t *testing.T) {
		c, b := dial()
		defer c.Close()
		defer b.Close()
		up, down := pattern(8<<20, 1), pattern(8<<20, 2)
		errc := make(chan error, 2)
		go func() { _, err := c.Write(up); c.CloseWrite(); errc <- err }()
		go func() {
			got, err := io.ReadAll(b) // ends at the client's half-close, passed on
			if err == nil && !bytes.Equal(got, up) {
				err = errors.New("backend got different bytes")
			}
			if err == nil {
				_, err = b.Write(down) // the other direction still flows
			}
			b.CloseWrite()
			errc <- err
		}()
		got, err := io.ReadAll(c)
		if err != nil || !bytes.Equal(got, down) {
			t.Fatalf("client read %d bytes (err %v), want %d identical", len(got), err, len(down))
		}
		for range 2 {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("quiet past the send timeout", func(t *testing.T) {
		c, b := dial()
		defer c.Close()
		defer b.Close()
		time.Sleep(time.Second) // SendTimeout is 300 ms
		c.Write([]byte("ping"))
		buf := make([]byte, 4)
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(b, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("after a quiet second the relay passed %q, err %v", buf, err)
		}
	})

	t.Run("pipes kept for reuse are empty", func(t *testing.T) {
		for _, l := range g.loops {
			res := make(chan string, 1)
			l.Post(func() {
				for _, p := range l.pipes {
					if !pipeEmpty(p[0]) {
						res <- "a kept pipe holds bytes"
						return
					}
				}
				if len(l.pipes) == 0 {
					res <- "no pipe kept after two relays ended"
					return
				}
				res <- ""
			})
			if msg := <-res; msg != "" {
				t.Fatal(msg)
			}
		}
	})

	t.Run("a stream's tail below the batch mark", func(t *testing.T) {
		// Past batchAfter bytes the backend's socket wakes the loop only
		// for batchLowat bytes: a tail shorter than that, with no FIN
		// behind it, must still be relayed, and so must the small
		// messages after it.
		c, b := dial()
		defer c.Close()
		defer b.Close()
		var before int64
		for _, l := range g.loops {
			before += l.stats.batches.Load()
		}
		bulk := pattern(4<<20, 3)
		go b.Write(bulk)
		got := make([]byte, len(bulk))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, bulk) {
			t.Fatalf("client read %d bytes of the stream: %v", len(got), err)
		}
		var after int64
		for _, l := range g.loops {
			after += l.stats.batches.Load()
		}
		if after == before {
			t.Fatal("a 4 MiB stream was never batched")
		}
		for i, msg := range []string{"the tail, 1000 bytes " + string(pattern(979, 4)), "ping", "pong"} {
			b.Write([]byte(msg))
			buf := make([]byte, len(msg))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
				t.Fatalf("message %d after the stream: read %d bytes, %v", i, len(buf), err)
			}
		}
	})

	t.Run("backend reset", func(t *testing.T) {
		c, b := dial()
		defer c.Close()
		b.Write([]byte("partial"))
		time.Sleep(50 * time.Millisecond)
		b.SetLinger(0)
		b.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("client read %q then %v; want a reset", got, err)
		}
	})
}

// idleHandler echoes, and marks every connection idle from its start,
// as a relay on which nothing moves is.
type idleHandler struct{ echoHandler }

func (idleHandler) Open(c *Conn) { c.MarkIdle(true) }

// TestReclaimIdle: at its share of MaxConns a loop closes the
// connection its handler marked idle longest, once past ReclaimAfter, to
// admit a new one; before that the new one is refused. Each connection
// is known open (it echoed) before the next is made, so their order is
// certain; the only clock is ReclaimAfter, a second, against a test
// that takes a few milliseconds to reach its refusal and sleeps past it
// before the reclaim.
func TestReclaimIdle(t *testing.T) {
	const reclaimAfter = time.Second
	g := startGroup(t, Config{Workers: 1, MaxConns: 2, ReclaimAfter: reclaimAfter,
		NewHandler: func(*Loop) Handler { return idleHandler{} }})
	buf := make([]byte, 2)
	open := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("hi"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("a connection was not served: %v", err)
		}
		return c
	}
	closedSoon := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF || errors.Is(err, syscall.ECONNRESET)
	}
	first := open()
	defer first.Close()
	second := open()
	defer second.Close()
	early, err := net.Dial("tcp", g.Addr()) // neither is idle a second yet: refused
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if !closedSoon(early) {
		t.Fatal("a third connection was admitted before any was idle ReclaimAfter")
	}
	time.Sleep(reclaimAfter + 100*time.Millisecond)
	third := open()
	defer third.Close()
	if !closedSoon(first) {
		t.Error("the connection idle longest was not the one closed")
	}
	second.Write([]byte("ok"))
	second.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(second, buf); err != nil {
		t.Errorf("the younger idle connection was closed too: %v", err)
	}
}

// spliceHandler splices a counted body from a backend that never sends
// it, as a proxied response whose upstream stalls.
type spliceHandler struct{ relayHandler }

func (h *spliceHandler) Serve(x *Conn) {
	p := x.State.(*relayPair)
	if !p.started && x == p.u && x.Connected() {
		p.started = true
		p.c.Splice(p.u, 1<<20)
	}
}

// TestSpliceStallTimesOut: a counted Splice whose source sends nothing
// is a stall the send timeout ends (unlike a Relay, whose quiet is its
// owner's to bound).
func TestSpliceStallTimesOut(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			defer c.Close() // silent until the test ends
		}
	}()
	h := &spliceHandler{relayHandler{backend: netip.MustParseAddrPort(backend.Addr().String()), up: &spliceHandler{}}}
	g := startGroup(t, Config{Workers: 1, SendTimeout: 300 * time.Millisecond, NewHandler: func(*Loop) Handler { return h }})
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a splice from a silent source: read %v; want the connection closed by the send timeout", err)
	}
}
