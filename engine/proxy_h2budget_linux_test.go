package engine_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestProxyH2TotalBuffer: HTTP/2 clients that stop reading hold at most
// proxy_h2_tls_total_send_buffer_bytes (and small per-stream amounts
// past it) of proxied responses between them, not their connection
// budgets, and the budget is really used; a client that reads still gets
// its whole response meanwhile.
//
// What the proxy holds is measured outside it: the upstream counts the
// body bytes each of its writes handed to the kernel (the writes block
// once the proxy stops reading), /proc/net/tcp gives the bytes still in
// the two sockets' queues, and the clients count the DATA bytes they got.
// What the proxy read and did not pass on is the difference.
func TestProxyH2TotalBuffer(t *testing.T) {
	const (
		conns  = 4
		budget = 4 << 20 // total, per connection and per stream alike
		window = 1 << 20 // each client's stream and connection window
		chunk  = 16 << 10
		size   = 64 << 20 // more than a stream's window, budget and socket buffers together
	)
	b := newStallBackend(t, size, chunk)
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, tlsProxyConfig(pki, b.addr.String(), fmt.Sprintf(`[runtime.settings]
proxy_h2_tls_max_send_buffer_bytes = %[1]d
proxy_h2_tls_connection_send_buffer_bytes = %[1]d
proxy_h2_tls_total_send_buffer_bytes = %[1]d
`, budget)))

	// Clients that never read past their windows (1 MiB, and no
	// WINDOW_UPDATE after): the proxy sends each that much and must hold
	// or leave upstream the rest.
	var recv [conns]atomic.Int64
	for i := range conns {
		r := dialH2(t, ts.addr, pki, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
		r.fr.WriteWindowUpdate(0, window-65535)
		r.get(1, "/big")
		go func() {
			for {
				f, err := r.read()
				if err != nil {
					return
				}
				switch f := f.(type) {
				case *http2.DataFrame:
					recv[i].Add(int64(len(f.Data())))
				case *http2.SettingsFrame:
					if !f.IsAck() {
						r.mu.Lock()
						r.fr.WriteSettingsAck()
						r.mu.Unlock()
					}
				}
			}
		}()
	}

	// Once nothing moves any more (every upstream write blocked, every
	// queue and client still for half a second), what the proxy read and
	// did not send is what it holds.
	type figures struct{ wrote, queued, recv, gauge int64 }
	measure := func() (figures, bool) {
		up := b.connections()
		if len(up) != conns {
			return figures{}, false
		}
		q := tcpQueues(t)
		var f figures
		for proxy, wrote := range up {
			f.wrote += wrote.Load()
			f.queued += q[[2]netip.AddrPort{b.addr, proxy}].tx + q[[2]netip.AddrPort{proxy, b.addr}].rx
		}
		for i := range recv {
			f.recv += recv[i].Load()
		}
		f.gauge = ts.Stats().ProxyH2Buffered
		return f, true
	}
	var last figures
	still := 0
	if !waitFor(scale(30*time.Second), func() bool {
		f, ok := measure()
		if ok && f == last {
			still++
		} else {
			still = 0
		}
		last = f
		time.Sleep(100 * time.Millisecond)
		return still >= 5
	}) {
		t.Fatalf("the stalled connections never settled: %+v", last)
	}
	held := last.wrote - last.queued - last.recv
	t.Logf("%d stalled connections: the upstream wrote %d KiB, %d KiB are in socket queues, the clients got %d KiB: "+
		"the proxy holds %d KiB (its gauge says %d KiB)", conns, last.wrote>>10, last.queued>>10, last.recv>>10, held>>10, last.gauge>>10)

	// The bounds. Writes are counted once they return, so the upstream
	// may have handed the kernel up to one chunk more per connection
	// than counted: held is low by at most that.
	//
	// Lower: the proxy stops reading a stream only when it has no room
	// (room in proxy_h2.go): past its stream budget, or past the floor
	// with its connection or the server over budget. With all three
	// budgets equal, every way of stopping means at least the budget is
	// held.
	//
	// Upper: a stream takes at most one read (a 256 KiB bulk input
	// buffer) while the server is under budget, so the budget is passed
	// by at most a read per stream; past it a stream only fills up to
	// the 32 KiB floor; and each upstream connection's input buffer
	// holds up to another read not yet taken.
	const read, floor = 256 << 10, 32 << 10
	lower, upper := int64(budget-conns*chunk), int64(budget+conns*(read+floor)+conns*read)
	if held < lower || held > upper {
		t.Errorf("%d stalled connections hold %d KiB; want %d to %d KiB: the server-wide budget of %d KiB, "+
			"plus a read and the 32 KiB floor per stream, plus an input buffer per upstream connection",
			conns, held>>10, lower>>10, upper>>10, budget>>10)
	}
	// The gauge tells the truth: what the streams hold (held, less what
	// waits in the upstream connections' input buffers).
	if last.gauge > held+conns*chunk || last.gauge < held-conns*read {
		t.Errorf("upstream_h2_buffered_bytes says %d KiB; measured %d KiB, of which up to %d KiB in input buffers",
			last.gauge>>10, held>>10, conns*read>>10)
	}

	// Another client still gets its response, whole.
	resp, err := h2Client(pki).Get("https://localhost:" + portOf(ts.addr) + "/read")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != readSize {
		t.Fatalf("a reading client beside the stalled ones got %d of %d bytes: %v", n, readSize, err)
	}
}

// readSize is what stallBackend sends for /read.
const readSize = 8 << 20

// stallBackend is an HTTP/1.1 upstream that answers /big with size bytes
// and /read with readSize, written chunk bytes at a time; it counts, per
// connection, the body bytes its writes handed to the kernel. A write
// blocks while the socket is full, so the count stops where the reader
// (the proxy) stopped reading.
type stallBackend struct {
	addr  netip.AddrPort
	mu    sync.Mutex
	conns map[netip.AddrPort]*atomic.Int64 // by the connection's remote (the proxy's) address
	open  []net.Conn
}

func newStallBackend(t *testing.T, size, chunk int) *stallBackend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &stallBackend{addr: netip.MustParseAddrPort(ln.Addr().String()), conns: map[netip.AddrPort]*atomic.Int64{}}
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, c := range b.open {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wrote := new(atomic.Int64)
			b.mu.Lock()
			b.conns[netip.MustParseAddrPort(c.RemoteAddr().String())] = wrote
			b.open = append(b.open, c)
			b.mu.Unlock()
			go b.serve(c, size, chunk, wrote)
		}
	}()
	return b
}

func (b *stallBackend) serve(c net.Conn, size, chunk int, wrote *atomic.Int64) {
	br := bufio.NewReader(c)
	buf := make([]byte, chunk)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		n := size
		if req.URL.Path == "/read" {
			n = readSize
		}
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", n); err != nil {
			return
		}
		for p := (&pattern{}); n > 0; {
			k := min(n, len(buf))
			p.Read(buf[:k])
			w, err := c.Write(buf[:k])
			wrote.Add(int64(w))
			if err != nil {
				return
			}
			n -= k
		}
	}
}

// connections is every connection the backend accepted, with its count.
func (b *stallBackend) connections() map[netip.AddrPort]*atomic.Int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.conns)
}

// tcpQueue is what the kernel holds for one TCP socket.
type tcpQueue struct {
	tx int64 // written, not yet acknowledged by the peer
	rx int64 // arrived, not yet read
}

// tcpQueues reads /proc/net/tcp: the queues of every IPv4 TCP socket of
// the machine, by local and remote address.
func tcpQueues(t *testing.T) map[[2]netip.AddrPort]tcpQueue {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	addr := func(s string) netip.AddrPort {
		h, p, _ := strings.Cut(s, ":")
		ip, _ := strconv.ParseUint(h, 16, 32)
		port, _ := strconv.ParseUint(p, 16, 16)
		// The address is the kernel's 32-bit word, printed in this
		// machine's byte order.
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(binary.NativeEndian.AppendUint32(nil, uint32(ip)))), uint16(port))
	}
	out := map[[2]netip.AddrPort]tcpQueue{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		tx, rx, _ := strings.Cut(f[4], ":")
		txn, _ := strconv.ParseInt(tx, 16, 64)
		rxn, _ := strconv.ParseInt(rx, 16, 64)
		out[[2]netip.AddrPort{addr(f[1]), addr(f[2])}] = tcpQueue{tx: txn, rx: rxn}
	}
	return out
}
