package reactor

import (
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/testnet"
	"golang.org/x/sys/unix"

	"github.com/mediaship/engine/internal/reuseport"
)

// echoHandler answers each chunk of input with the same bytes.
type echoHandler struct{}

func (echoHandler) Open(c *Conn) {}
func (echoHandler) Serve(c *Conn) {
	in := c.Input()
	if len(in) > 0 {
		c.Write(in)
		c.Consume(len(in))
	}
	if c.EOF() && !c.Pending() {
		c.Close()
	}
}
func (echoHandler) Closed(c *Conn) {}

// startGroup runs a group on a free loopback port until the test ends;
// its loops echo unless cfg names a handler.
func startGroup(t *testing.T, cfg Config) *Group {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	if cfg.NewHandler == nil {
		cfg.NewHandler = func(*Loop) Handler { return echoHandler{} }
	}
	g, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Run() }()
	t.Cleanup(func() {
		g.Shutdown(t.Context())
		<-done
	})
	return g
}

func TestEcho(t *testing.T) {
	g := startGroup(t, Config{Workers: 2})
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, 1<<20) // larger than the input buffer: exercises full-buffer reads
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != string(msg) {
		t.Fatalf("echo returned %d bytes (err %v), want %d identical", len(got), err, len(msg))
	}
}

// TestSteeringByCPU proves the eBPF program: a client pinned to CPU k
// sends its SYN from CPU k (loopback runs the receive path on the sending
// CPU), so the connection must land on the loop pinned to CPU k.
func TestSteeringByCPU(t *testing.T) {
	cpus := allowedCPUs()
	if len(cpus) < 2 {
		t.Skip("needs at least 2 CPUs")
	}
	g := startGroup(t, Config{Workers: len(cpus), Pin: true})
	if g.Steering() != "eBPF by receiving CPU" {
		if os.Getenv("ENGINE_REQUIRE_EBPF") != "" {
			t.Fatalf("eBPF steering required (ENGINE_REQUIRE_EBPF) but not loaded: %s", g.Steering())
		}
		t.Skipf("eBPF steering not available here (%s); run as root on a kernel with BPF_PROG_TYPE_SK_REUSEPORT", g.Steering())
	}
	const per = 20
	for k, cpu := range cpus {
		before := g.loops[k].stats.accepted.Load()
		done := make(chan error)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var one, old unix.CPUSet
			unix.SchedGetaffinity(0, &old)
			defer unix.SchedSetaffinity(0, &old)
			one.Set(cpu)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				done <- err
				return
			}
			for i := 0; i < per; i++ {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
				if err != nil {
					done <- err
					return
				}
				err = unix.Connect(fd, &unix.SockaddrInet4{Port: portOf(g.Addr()), Addr: [4]byte{127, 0, 0, 1}})
				unix.Close(fd)
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for g.loops[k].stats.accepted.Load()-before < per && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := g.loops[k].stats.accepted.Load() - before; got != per {
			t.Errorf("CPU %d: loop %d accepted %d of %d connections (per loop: %v)", cpu, k, got, per, g.Stats().PerLoop)
		}
	}
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n := 0
	for _, c := range p {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestAcceptOutOfDescriptors: when accept fails with EMFILE the loop
// pauses accepting instead of spinning on the still-readable listener,
// and accepts again once descriptors are free.
func TestAcceptOutOfDescriptors(t *testing.T) {
	g := startGroup(t, Config{Workers: 1})
	var old unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &old)
	// Count descriptors in use, and allow only a few more.
	ents, _ := os.ReadDir("/proc/self/fd")
	lim := unix.Rlimit{Cur: uint64(len(ents) + 6), Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	restore := func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &old) }
	defer restore()
	var clients []int
	for i := 0; i < 10; i++ {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			break // the client side ran out first
		}
		clients = append(clients, fd)
		unix.Connect(fd, &unix.SockaddrInet4{Port: portOf(g.Addr()), Addr: [4]byte{127, 0, 0, 1}})
	}
	time.Sleep(time.Second)
	errs := g.Stats().AcceptErr
	if errs == 0 {
		t.Fatalf("no accept failure with %d clients against a limit of %d", len(clients), lim.Cur)
	}
	if errs > 20 {
		t.Errorf("%d accept failures in a second: the loop spins on EMFILE", errs)
	}
	for _, fd := range clients {
		unix.Close(fd)
	}
	restore()
	c, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Errorf("after descriptors were freed: %q %v", buf, err)
	}
}

// chunks is a Source of fixed chunks.
type chunks struct {
	left     [][]byte
	released *bool
}

func (s *chunks) Next(int) ([]byte, error) {
	if len(s.left) == 0 {
		return nil, nil
	}
	b := s.left[0]
	s.left = s.left[1:]
	return b, nil
}
func (s *chunks) Release() { *s.released = true }

// orderHandler queues, on the first input, memory, a source, a control
// function and more memory, and records what the control saw.
type orderHandler struct {
	sentAtCtrl chan int64
	released   bool
}

func (h *orderHandler) Open(c *Conn) {}
func (h *orderHandler) Serve(c *Conn) {
	if len(c.Input()) == 0 {
		return
	}
	c.Consume(len(c.Input()))
	c.Write([]byte("head|"))
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = 'x'
	}
	c.WriteSource(&chunks{left: [][]byte{[]byte("a|"), big, []byte("|b|")}, released: &h.released})
	c.Control(func(fd int) error {
		h.sentAtCtrl <- c.Sent()
		return nil
	})
	c.Write([]byte("tail"))
	c.CloseAfterFlush()
}
func (h *orderHandler) Closed(c *Conn) {}

func TestSourceAndControlOrder(t *testing.T) {
	h := &orderHandler{sentAtCtrl: make(chan int64, 1)}
	cfg := Config{Workers: 1, Addr: "127.0.0.1:0", NewHandler: func(*Loop) Handler { return h }}
	g, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Run() }()
	defer func() { g.Shutdown(t.Context()); <-done }()
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("go"))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	want := "head|a|" + strings.Repeat("x", 300<<10) + "|b|tail"
	if string(got) != want {
		t.Fatalf("got %d bytes, want %d in order", len(got), len(want))
	}
	if at := <-h.sentAtCtrl; at != int64(len(want)-len("tail")) {
		t.Errorf("control ran after %d bytes, want %d (everything queued before it)", at, len(want)-len("tail"))
	}
	if !h.released {
		t.Error("source not released")
	}
}

// tickHandler echoes and counts deadline sweeps; more is what Tick
// reports. settled says the last sweep found nothing left to do (no
// connection open, nothing to flush), so the loop sleeps after it until
// an event; a connection accepted since clears it.
type tickHandler struct {
	echoHandler
	loop    *Loop
	ticks   atomic.Int32
	more    atomic.Bool
	settled atomic.Bool
}

func (h *tickHandler) Open(c *Conn) { h.settled.Store(false) }

func (h *tickHandler) Tick() bool {
	h.ticks.Add(1)
	more := h.more.Load()
	h.settled.Store(!more && h.loop.stats.open.Load() == 0)
	return more
}

// TestIdleLoopSleeps: a loop with no connections and nothing left to
// flush waits for its next event without waking for sweeps (each wake of
// an idle loop costs the runtime a monitor wake-up and a thread hand-off),
// still sweeps once after its last connection closes, and keeps sweeping
// while its handler says it has more to do.
func TestIdleLoopSleeps(t *testing.T) {
	h := &tickHandler{}
	cfg := Config{Workers: 1, Addr: "127.0.0.1:0", NewHandler: func(l *Loop) Handler { h.loop = l; return h }}
	g, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Run() }()
	defer func() { g.Shutdown(t.Context()); <-done }()

	quiet := func(what string) {
		t.Helper()
		before := h.ticks.Load()
		time.Sleep(4 * sweepEvery)
		if n := h.ticks.Load() - before; n != 0 {
			t.Fatalf("%s: the idle loop swept %d times in %v; want none", what, n, 4*sweepEvery)
		}
	}
	echo := func() {
		t.Helper()
		c, err := net.Dial("tcp", g.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("ping"))
		c.(*net.TCPConn).CloseWrite()
		if b, err := io.ReadAll(c); err != nil || string(b) != "ping" {
			t.Fatalf("echo: %q, %v", b, err)
		}
		c.Close()
	}
	waitTicks := func(what string, n int32) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); h.ticks.Load() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d sweeps, want at least %d", what, h.ticks.Load(), n)
			}
		}
	}
	// settle waits for the sweep after which the loop may sleep, rather
	// than for the time it should take.
	settle := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !h.settled.Load(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no sweep found the loop with nothing left to do (%d sweeps)", what, h.ticks.Load())
			}
		}
	}

	waitTicks("start", 1)
	settle("start")
	quiet("after start")

	before := h.ticks.Load()
	echo()
	settle("after the connection closed") // the sweep that flushes after the close
	if h.ticks.Load() == before {
		t.Fatal("no sweep after the last connection closed")
	}
	quiet("after the last connection closed")

	h.more.Store(true)
	before = h.ticks.Load()
	echo()
	waitTicks("handler has more to flush", before+6)
	h.more.Store(false)
	settle("after the handler flushed") // the one more sweep, which reads false
	quiet("after the handler flushed")
}

// dialHandler writes msg once connected and collects the reply until
// the peer closes; done receives what it got and the dial error.
type dialHandler struct {
	msg  string
	got  []byte
	done chan dialResult
}

type dialResult struct {
	got     string
	err     error
	connect bool
}

func (h *dialHandler) Open(c *Conn) {
	if c.Connected() {
		panic("connected before connect finished")
	}
}

func (h *dialHandler) Serve(c *Conn) {
	if h.msg != "" {
		c.Write([]byte(h.msg))
		h.msg = ""
	}
	h.got = append(h.got, c.Input()...)
	c.Consume(len(c.Input()))
	if c.EOF() {
		c.Close()
	}
}

func (h *dialHandler) Closed(c *Conn) {
	h.done <- dialResult{string(h.got), c.DialErr(), c.DialErr() == nil}
}

// TestDial: a loop's outbound connection (the reverse proxy's way to its
// upstreams) connects, talks, and reports a refused connection as its
// DialErr; it does not count as one of the loop's client connections.
func TestDial(t *testing.T) {
	g := startGroup(t, Config{Workers: 1})
	l := g.loops[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b := make([]byte, 5)
		io.ReadFull(c, b)
		c.Write([]byte("reply:" + string(b)))
		c.Close()
	}()
	dial := func(addr string, h *dialHandler) {
		t.Helper()
		ap := netip.MustParseAddrPort(addr)
		errc := make(chan error, 1)
		l.Post(func() {
			_, err := l.Dial(ap, 5*time.Second, h)
			errc <- err
		})
		if err := <-errc; err != nil {
			h.done <- dialResult{err: err}
		}
	}
	h := &dialHandler{msg: "hello", done: make(chan dialResult, 1)}
	dial(ln.Addr().String(), h)
	select {
	case r := <-h.done:
		if r.err != nil || r.got != "reply:hello" {
			t.Fatalf("dial: got %q, err %v", r.got, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("outbound connection never finished")
	}
	if open := g.Stats().Open; open != 0 {
		t.Errorf("an outbound connection counted as open client connections: %d", open)
	}

	h = &dialHandler{msg: "hello", done: make(chan dialResult, 1)}
	dial(testnet.RefusedAddr(t), h) // nothing listens there
	select {
	case r := <-h.done:
		if r.err == nil || !strings.Contains(r.err.Error(), "refused") {
			t.Fatalf("dial to a closed port: err %v, got %q", r.err, r.got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("refused connection never reported")
	}
}

// TestListeningLocalhost: a handed-over localhost socket keeps its name,
// so that the group's other sockets and the QUIC socket bound after an
// upgrade are bound to the loopback device too, not to every address
// (before, an upgrade bound QUIC on [::] for a localhost listener).
func TestListeningLocalhost(t *testing.T) {
	fd, bound, err := reuseport.Listen("localhost:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if got, err := listening(fd); err != nil || got != bound {
		t.Errorf("listening(localhost socket) = %q, %v; want %q", got, err, bound)
	}
	wfd, wbound, err := reuseport.Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wfd)
	if got, err := listening(wfd); err != nil || got != wbound {
		t.Errorf("listening(127.0.0.1 socket) = %q, %v; want %q", got, err, wbound)
	}
}
