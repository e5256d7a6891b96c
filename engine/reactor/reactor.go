package reactor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/internal/peershare"
	"github.com/mediaship/engine/internal/reuseport"
)

// Handler drives the protocol of every connection on one loop. All its
// methods run on the loop's goroutine.
type Handler interface {
	// Open is called once for a new connection, before any Serve.
	Open(c *Conn)
	// Serve is called when the connection has new input, when everything
	// it queued has been written, and when work started with Conn.Go has
	// finished. It reads with Input and Consume and queues output.
	Serve(c *Conn)
	// Closed is called once when the connection is gone. The handler
	// releases whatever the connection held (file references).
	Closed(c *Conn)
}

// Config configures a Group of loops. The zero value of each field means
// its default.
type Config struct {
	// Addr is the TCP address to listen on.
	Addr string
	// Workers is the number of loops. Zero means runtime.NumCPU().
	Workers int
	// MaxConns bounds open connections over all loops: each loop holds
	// an equal share (as nginx's worker_connections, but divided rather
	// than multiplied). At its share a loop admits a new connection by
	// closing its connection that waits for its client with the nearest
	// deadline, and refuses it when there is none. Zero means 16384.
	MaxConns int
	// ReadBuffer is the size of a connection's input buffer, taken from a
	// pool while the connection has unread input. Zero means 20 KiB.
	ReadBuffer int
	// SendTimeout closes a connection whose peer accepts no bytes for
	// this long while output is queued. Zero means 60s.
	SendTimeout time.Duration
	// LingerTimeout bounds how long a connection closed after an error
	// keeps reading (and discarding) so the client sees the answer before
	// a reset. Zero means 2s.
	LingerTimeout time.Duration
	// WriteBudget is how many bytes one connection may write before the
	// loop turns to others. Zero means 2 MiB.
	WriteBudget int
	// NoSteering skips the eBPF steering program (kernel hash only).
	NoSteering bool
	// Pin binds each loop's thread to one CPU. Zero (false) leaves the
	// threads to the scheduler: pinning helps when clients are remote and
	// NIC interrupts are spread over CPUs, and hurts when clients share
	// the host, since steering then puts a connection's loop on the very
	// CPU its client runs on (measured on loopback: a single download at
	// 75% of nginx pinned, 100% unpinned).
	Pin bool
	// ReclaimAfter is how long a connection its handler marked idle
	// (Conn.MarkIdle: a relay on which nothing moves) must have been
	// idle before a loop at its share closes it to admit a new one, when
	// no connection waits for its client. Zero means 10s.
	ReclaimAfter time.Duration
	// Inherit is listening TCP sockets to serve instead of binding Addr:
	// a previous group's (a reload or a binary upgrade hands them over)
	// or systemd's (socket activation). The group owns them from Listen
	// on. One per worker keeps each loop's socket, and Steering with
	// them; fewer (systemd's one) are shared, loop i watching
	// Inherit[i%len], and connections spread by whichever loop wakes.
	// More than Workers is refused: a socket no loop watches would hold
	// its queued connections until they time out.
	Inherit []int
	// PerAddress, when set, bounds the connections of one client
	// address (counted with every other transport and worker sharing the
	// table): past its limit a new connection is closed at once.
	PerAddress *peershare.Table
	// MinRate is the transfer rate, in bytes a second over RateWindow,
	// below which a connection with a response in flight may be closed
	// to admit a new one at MaxConns (the slowest first), when no
	// connection waits for its client. Zero: responses in flight are
	// never closed for this.
	MinRate int64
	// RateWindow is what MinRate is measured over. Zero means 20s.
	RateWindow time.Duration
	// Steering is the previous group's steering program, adopted with
	// Inherit (one socket per worker) so that connections keep being
	// spread by CPU across a handover; nil attaches a new one.
	Steering *reuseport.Steering
	// NewHandler returns the handler of loop i.
	NewHandler func(l *Loop) Handler
	Logger     *slog.Logger
}

func (c *Config) withDefaults() {
	if c.Workers <= 0 {
		c.Workers = runtime.NumCPU()
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 16384
	}
	if c.ReadBuffer <= 0 {
		c.ReadBuffer = 20 << 10
	}
	if c.ReclaimAfter <= 0 {
		c.ReclaimAfter = 10 * time.Second
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = 60 * time.Second
	}
	if c.RateWindow <= 0 {
		c.RateWindow = 20 * time.Second
	}
	if c.LingerTimeout <= 0 {
		c.LingerTimeout = 2 * time.Second
	}
	if c.WriteBudget <= 0 {
		c.WriteBudget = 2 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Stats are counters summed over loops. A field's metric and help tags
// name and describe it on the engine's /metrics.
type Stats struct {
	Accepted  int64 `metric:"connections_accepted_total" help:"TCP connections accepted."` // connections accepted
	Rejected  int64 // closed at once: over MaxConns with no waiting connection to close
	Reclaimed int64 `metric:"connections_reclaimed_total" help:"Idle connections closed to admit new ones at max_connections."` // waiting connections closed to admit new ones at MaxConns
	// Why connections were closed to admit new ones at MaxConns:
	// ReclaimedWaiting waited for their client (silent, a head under
	// way, keep-alive), ReclaimedIdle were idle relays, ReclaimedSlow had
	// a response in flight moving slower than MinRate. Reclaimed is the
	// three together.
	ReclaimedWaiting, ReclaimedIdle, ReclaimedSlow int64
	// ReclaimedShare had a response in flight for an address holding
	// more connections than the newcomer's (the fair share).
	ReclaimedShare int64
	// RefusedAddress is connections closed at once because their client
	// address held its share (Config.PerAddress).
	RefusedAddress int64
	Open           int64 // connections open now
	BytesMem       int64 // bytes written from memory
	BytesFile      int64 // bytes written by sendfile
	BytesSplice    int64 // bytes written by splice from another socket (proxied bodies)
	Timeouts       int64 // connections closed by a deadline
	Aborted        int64 // connections reset (file shrank, handler abort)
	WriteError     int64 // connections closed on a write error (peer gone)
	AcceptErr      int64 // accept failures (out of descriptors), each pausing accepts briefly
	// How output met the sockets: Writes is the write calls (sendmsg,
	// sendfile) that moved bytes; SocketFull how often a socket refused
	// more (EAGAIN), and FullWait the time, summed over connections, from
	// that refusal to the socket's next writable event. Bytes per write is
	// (BytesMem+BytesFile)/Writes.
	Writes     int64
	SocketFull int64 `metric:"socket_full_total" help:"Times a socket refused more output (EAGAIN): the client or the path is slower than the disk."`
	FullWait   time.Duration
	PerLoop    []int64 // connections accepted, per loop
	// PerLoopOpen is the connections open now, per loop.
	PerLoopOpen []int64
}

// counters are a loop's statistics: each is written by its loop's
// goroutine and read by Stats from any goroutine. They are independent
// counts, not a consistent snapshot.
type counters struct {
	accepted, rejected, reclaimed, open, bytesMem, bytesFile, bytesSplice, timeouts, aborted, writeErr, acceptErrors atomic.Int64
	writes, full, fullWait                                                                                           atomic.Int64
	batches                                                                                                          atomic.Int64 // sockets whose input was batched (batch.go)
	reclaimedWaiting, reclaimedIdle, reclaimedSlow, reclaimedShare, refusedAddress                                   atomic.Int64
}

// ErrClosed is returned by Run after Shutdown.
var ErrClosed = errors.New("reactor: closed")

// Group is the set of loops serving one address.
type Group struct {
	// Immutable after construction.
	cfg   Config
	loops []*Loop
	addr  string
	log   *slog.Logger
	pool  *Pool
	steer string // how connections are spread, for the log
	bpf   *reuseport.Steering
	own   int // distinct listening sockets: the first own loops' (the rest share them)

	wg       sync.WaitGroup
	running  chan struct{} // closed by Run once wg counts the loops
	shutOnce sync.Once     // guards the one posting of drain to every loop
}

// Listen creates the loops and binds their listeners. Nothing is accepted
// until Run.
func Listen(cfg Config) (*Group, error) {
	cfg.withDefaults()
	if cfg.NewHandler == nil {
		return nil, errors.New("reactor: Config.NewHandler is nil")
	}
	g := &Group{cfg: cfg, log: cfg.Logger, pool: NewPool(max(4, 2*cfg.Workers)), running: make(chan struct{})}
	// Loop i serves the i-th CPU this process may use (and runs on it when
	// Pin is set), when there are enough CPUs for one loop each.
	cpus := allowedCPUs()
	pinned := len(cpus) >= cfg.Workers
	addr := cfg.Addr
	perLoop := (cfg.MaxConns + cfg.Workers - 1) / cfg.Workers
	if n := len(cfg.Inherit); n > cfg.Workers {
		for _, fd := range cfg.Inherit {
			closeFd(fd)
		}
		return nil, fmt.Errorf("reactor: %d listening sockets handed over for %d workers: the number of workers cannot shrink across a handover (restart to change it)", n, cfg.Workers)
	}
	g.own = cfg.Workers
	if len(cfg.Inherit) > 0 {
		g.own = len(cfg.Inherit)
	}
	for i := 0; i < cfg.Workers; i++ {
		inherit := -1
		if len(cfg.Inherit) > 0 {
			inherit = cfg.Inherit[i%len(cfg.Inherit)]
			if i >= len(cfg.Inherit) {
				inherit = -2 - inherit // shared: newLoop duplicates it
			}
		}
		l, bound, err := newLoop(g, i, addr, perLoop, inherit)
		if err != nil {
			g.closeLoops()
			for _, fd := range cfg.Inherit[min(i, len(cfg.Inherit)):] {
				closeFd(fd)
			}
			return nil, fmt.Errorf("reactor: listen on %s: %w", cfg.Addr, err)
		}
		l.cpu = -1
		if pinned && cfg.Pin {
			l.cpu = cpus[i]
		}
		if i == 0 {
			addr, g.addr = bound, bound // port 0 becomes the port the kernel chose
		}
		g.loops = append(g.loops, l)
	}
	g.steer = "kernel hash"
	switch {
	case g.own < cfg.Workers:
		g.steer = "shared listening socket"
		if cfg.Steering != nil {
			cfg.Steering.Close()
		}
	case cfg.Steering != nil:
		// The program is attached to the sockets already; this group
		// holds its maps from now on.
		g.bpf, g.steer = cfg.Steering, "eBPF by receiving CPU (handed over)"
	case cfg.NoSteering:
	case !pinned:
		g.log.Warn("connections spread by the kernel's hash: more workers than CPUs, so loops cannot serve a CPU each",
			"workers", cfg.Workers, "cpus", len(cpus))
	default:
		fds := make([]int, len(g.loops))
		for i, l := range g.loops {
			fds[i] = l.lfd
		}
		cpuLoop := map[int]int{}
		for k, cpu := range cpus {
			cpuLoop[cpu] = k % cfg.Workers
		}
		bpf, err := reuseport.Steer(fds, cpuLoop)
		if err != nil {
			g.log.Warn("connections spread by the kernel's hash, not by receiving CPU", "reason", err, "fix", reuseport.Remedy(err))
		} else {
			g.bpf, g.steer = bpf, "eBPF by receiving CPU"
		}
	}
	return g, nil
}

// Addr returns the bound address (with the real port when 0 was asked).
func (g *Group) Addr() string { return g.addr }

// Steering says how connections are spread over loops.
func (g *Group) Steering() string { return g.steer }

// Pool returns the worker pool for blocking work.
func (g *Group) Pool() *Pool { return g.pool }

// Loops returns the loops, for tests and stats.
func (g *Group) Loops() []*Loop { return g.loops }

// Run starts every loop and blocks until they have all stopped.
func (g *Group) Run() error {
	errs := make(chan error, len(g.loops))
	g.wg.Add(len(g.loops))
	close(g.running) // Shutdown may wait for the loops from now on
	for _, l := range g.loops {
		go func() {
			defer g.wg.Done()
			if err := l.run(); err != nil {
				errs <- err
			}
		}()
	}
	g.wg.Wait()
	g.pool.Close()
	if g.bpf != nil {
		g.bpf.Close()
	}
	close(errs)
	for err := range errs {
		return err
	}
	return nil
}

// Shutdown stops accepting, closes idle connections, lets responses in
// flight finish, and returns when every loop has stopped or ctx ends; then
// the remaining connections are closed.
func (g *Group) Shutdown(ctx context.Context) error {
	g.shutOnce.Do(func() {
		for _, l := range g.loops {
			l.Post(l.drain)
		}
	})
	select {
	case <-g.running:
	case <-ctx.Done(): // Run was never called
		return ctx.Err()
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, l := range g.loops {
			l.Post(l.closeAll)
		}
		<-done
		return ctx.Err()
	}
}

// Close releases a group that will never Run: its sockets, epoll
// instances and workers.
func (g *Group) Close() {
	g.closeLoops()
	g.pool.Close()
}

func (g *Group) closeLoops() {
	for _, l := range g.loops {
		l.closeFds()
	}
	if g.bpf != nil {
		g.bpf.Close()
	}
}

// StopAccepting makes every loop stop watching its listening socket and
// close its descriptor of it, and returns once they have (or after
// timeout): a successor holding the sockets (Handover) then accepts every
// new connection. Connections open here go on as before.
func (g *Group) StopAccepting(timeout time.Duration) {
	var wg sync.WaitGroup
	for _, l := range g.loops {
		wg.Add(1)
		var once sync.Once
		done := func() { once.Do(wg.Done) }
		l.Post(func() {
			defer done()
			if l.lfd >= 0 {
				closeFd(l.lfd)
				l.lfd = -1
			}
		})
		select {
		case <-g.running:
		default:
			done() // not running: nothing accepts
		}
	}
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(timeout):
	}
}

// Handover returns duplicates of the group's listening sockets (one per
// worker, or the shared ones), for a successor's Config.Inherit, and its
// steering program, nil without one, whose Files the successor adopts.
// Call it before Shutdown: the sockets stay open, and keep their queued
// connections, as long as the successor holds them.
func (g *Group) Handover() ([]int, *reuseport.Steering, error) {
	fds := make([]int, 0, g.own)
	for _, l := range g.loops[:g.own] {
		fd, err := dupFd(l.lfd)
		if err != nil {
			for _, fd := range fds {
				closeFd(fd)
			}
			return nil, nil, fmt.Errorf("reactor: hand over the listening sockets: %w", err)
		}
		fds = append(fds, fd)
	}
	return fds, g.bpf, nil
}

// Stats sums the loops' counters.
func (g *Group) Stats() Stats {
	var s Stats
	for _, l := range g.loops {
		c := &l.stats
		s.Accepted += c.accepted.Load()
		s.Rejected += c.rejected.Load()
		s.Reclaimed += c.reclaimed.Load()
		s.ReclaimedWaiting += c.reclaimedWaiting.Load()
		s.ReclaimedIdle += c.reclaimedIdle.Load()
		s.ReclaimedSlow += c.reclaimedSlow.Load()
		s.ReclaimedShare += c.reclaimedShare.Load()
		s.RefusedAddress += c.refusedAddress.Load()
		s.Open += c.open.Load()
		s.BytesMem += c.bytesMem.Load()
		s.BytesFile += c.bytesFile.Load()
		s.BytesSplice += c.bytesSplice.Load()
		s.Timeouts += c.timeouts.Load()
		s.Aborted += c.aborted.Load()
		s.WriteError += c.writeErr.Load()
		s.AcceptErr += c.acceptErrors.Load()
		s.Writes += c.writes.Load()
		s.SocketFull += c.full.Load()
		s.FullWait += time.Duration(c.fullWait.Load())
		s.PerLoop = append(s.PerLoop, c.accepted.Load())
		s.PerLoopOpen = append(s.PerLoopOpen, c.open.Load())
	}
	return s
}

// Pool runs blocking work (opening files, reading directories) off the
// loops on a fixed set of goroutines.
type Pool struct {
	jobs chan func()
	wg   sync.WaitGroup
}

// NewPool starts n workers.
func NewPool(n int) *Pool {
	p := &Pool{jobs: make(chan func(), 4096)}
	for i := 0; i < n; i++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for job := range p.jobs {
				job()
			}
		}()
	}
	return p
}

// Submit runs job on a worker. It never blocks the caller: when the queue
// is full the job gets a goroutine of its own.
func (p *Pool) Submit(job func()) {
	select {
	case p.jobs <- job:
	default:
		go job()
	}
}

// Close stops the workers after the queued jobs.
func (p *Pool) Close() {
	close(p.jobs)
	p.wg.Wait()
}
