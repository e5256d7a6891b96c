package reactor

import (
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// bulkHandler reads a stream to its end, noting the largest input it
// was handed at once. The first time it is served it holds its loop
// until the sender is ahead (sent), so that more than one small read's
// worth is waiting in the socket whatever the machine's load: how much
// arrives between two reads is otherwise the scheduler's choice.
type bulkHandler struct {
	bulk   bool
	max    int
	n      int
	sent   *atomic.Int64
	waited bool
	done   chan struct{}
}

func (h *bulkHandler) Open(c *Conn) { c.SetBulkInput(h.bulk) }

func (h *bulkHandler) Serve(c *Conn) {
	in := c.Input()
	h.max = max(h.max, len(in))
	h.n += len(in)
	c.Consume(len(in))
	if c.EOF() {
		c.Close()
		return
	}
	if !h.waited {
		h.waited = true
		for end := time.Now().Add(5 * time.Second); h.sent.Load() < int64(h.n)+96<<10 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
	}
}

func (h *bulkHandler) Closed(c *Conn) { close(h.done) }

// TestBulkInput: a connection in bulk mode reads in pieces larger than
// Config.ReadBuffer, one not in bulk mode never does, and every bulk
// buffer is handed back when the connection closes.
func TestBulkInput(t *testing.T) {
	const readBuf, size = 32 << 10, 8 << 20
	g := startGroup(t, Config{Workers: 1, ReadBuffer: readBuf})
	l := g.loops[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var sent atomic.Int64 // by the connection being read; one at a time
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(countWriter{c, &sent}, io.LimitReader(zeroReader{}, size))
				c.Close()
			}()
		}
	}()
	for _, bulk := range []bool{false, true} {
		sent.Store(0)
		h := &bulkHandler{bulk: bulk, sent: &sent, done: make(chan struct{})}
		l.Post(func() {
			if _, err := l.Dial(netip.MustParseAddrPort(ln.Addr().String()), 5*time.Second, h); err != nil {
				t.Error(err)
				close(h.done)
			}
		})
		select {
		case <-h.done:
		case <-time.After(20 * time.Second):
			t.Fatal("the stream never ended")
		}
		if h.n != size {
			t.Fatalf("bulk %v: read %d bytes of %d", bulk, h.n, size)
		}
		if bulk && h.max <= readBuf || !bulk && h.max > readBuf {
			t.Errorf("bulk %v: largest input %d bytes; ReadBuffer is %d, a bulk buffer %d", bulk, h.max, readBuf, bulkReadBuffer)
		}
		inUse := make(chan int)
		l.Post(func() { inUse <- l.bigInUse })
		if n := <-inUse; n != 0 {
			t.Errorf("bulk %v: %d bulk buffers still counted in use after the close", bulk, n)
		}
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (w countWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.n.Add(int64(n))
	return n, err
}
