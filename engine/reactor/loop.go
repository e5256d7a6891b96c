package reactor

import (
	"errors"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/internal/loglimit"
)

// Special epoll data values; connection slots are >= 0.
const (
	tagListener = -1
	tagWake     = -2
)

// Loop is one reactor: an epoll instance, a listener, and the connections
// accepted on it.
type Loop struct {
	// Immutable after construction.
	id       int
	cpu      int // pinned CPU, or -1
	group    *Group
	cfg      *Config
	log      *slog.Logger
	handler  Handler
	maxConns int                // this loop's share of Config.MaxConns
	lim      *loglimit.Limiter  // lines clients cause: refusals, closings at max_connections
	heldMemo map[netip.Addr]int // admit's: connections per address key, looked up once a scan
	epfd     int
	efd      int // eventfd: the door into the loop
	sys      loopSys

	// Owned by the loop goroutine.
	lfd           int // listener; -1 once draining
	slots         []*Conn
	free          []int32
	bufs          [][]byte // free input buffers
	bigBufs       [][]byte // free bulk input buffers (Conn.SetBulkInput)
	bigInUse      int      // bulk input buffers held by connections
	pipes         [][2]int // free empty pipes for splice, reused: a relay needs two
	ready         []*Conn  // connections that yielded with work left
	readyNext     []*Conn  // the other list: ready's store while ready is processed
	now           int64    // monotonic nanoseconds, refreshed each turn
	draining      bool
	stopped       bool
	paused        bool      // accepting paused: out of descriptors
	lastWarn      int64     // when the last accept failure was logged
	lastFull      int64     // when max_connections was last logged
	clock         time.Time // wall clock at now, for Date headers
	handedOff     bool      // this turn made another goroutine runnable: yield before sleeping
	asleep        bool      // the last sweep found nothing to watch: wait for events without a deadline
	outbound      int       // open connections made by Dial
	batched       []*Conn   // sockets whose input is batched (batch.go)
	nextBatchTick int64     // when they are next checked
	lastYield     int64     // when an unpinned loop last yielded (now's clock)

	// The queue; the only state other goroutines touch.
	qmu   sync.Mutex // guards queue and dead
	queue []func()   // guarded by qmu
	spare []func()   // the loop's own: the last batch's slice, reused as the next queue
	dead  bool       // guarded by qmu; set when the eventfd is closed
	// signaled is set by the Post that writes the eventfd and cleared by
	// runQueue before it takes the queue, so a batch of Posts wakes the
	// loop once and no Post after the clear goes unwoken.
	signaled atomic.Bool

	stats counters
}

var monoStart = time.Now()

func monotime() int64 { return int64(time.Since(monoStart)) }

// ID returns the loop's index in its group.
func (l *Loop) ID() int { return l.id }

// Now returns the loop's clock (refreshed once per turn) as wall time.
func (l *Loop) Now() time.Time { return l.clock }

// Draining reports whether the server is shutting down: responses in
// flight finish, and connections then close.
func (l *Loop) Draining() bool { return l.draining }

// HandedOff tells the loop, from its own goroutine, that this turn made
// another goroutine runnable (a handshake step, a pool job). Before the
// loop next sleeps it yields its P, so that goroutine starts at once. A
// loop spends its idle time in epoll_wait, a system call during which it
// keeps its P; with one loop per CPU every P can be held that way, and the
// Go scheduler would start the goroutine only when sysmon takes a P back,
// 20 µs to 10 ms later, leaving CPUs idle meanwhile.
func (l *Loop) HandedOff() { l.handedOff = true }

// Pool returns the worker pool for blocking work.
func (l *Loop) Pool() *Pool { return l.group.pool }

// Logger returns the loop's logger.
func (l *Loop) Logger() *slog.Logger { return l.log }

// Post runs fn on the loop's goroutine. Safe from any goroutine.
// Work posted after the loop has stopped is dropped.
func (l *Loop) Post(fn func()) {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	if l.dead {
		return
	}
	l.queue = append(l.queue, fn)
	if l.signaled.CompareAndSwap(false, true) {
		wakeLoop(l.efd)
	}
}

func (l *Loop) runQueue() {
	drainWake(l.efd)
	l.signaled.Store(false)
	l.qmu.Lock()
	q := l.queue
	l.queue = l.spare[:0]
	l.qmu.Unlock()
	for i, fn := range q {
		fn()
		q[i] = nil
	}
	l.spare = q
}

// yieldEvery is how often a busy unpinned loop yields (see run): well
// under sysmon's 10 ms.
const yieldEvery = 4 * time.Millisecond

// sweepEvery is how often deadlines are checked.
const sweepEvery = 250 * time.Millisecond

func (l *Loop) run() error {
	// Only a pinned loop needs its thread. An unpinned one stays an
	// ordinary goroutine, so that when it yields to a goroutine it made
	// runnable (HandedOff) the scheduler runs that one on this thread at
	// once; a locked thread must hand its P to another thread and sleep,
	// and wake again after (measured: 3-8% of the CPUs idle under
	// new-connection load locked, 1% unlocked, and 16 bulk TLS
	// connections at 0.73 against 0.87 s of server CPU per GiB).
	if l.cpu >= 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	restore := pinToCPU(l.cpu, l.log)
	defer restore() // the thread goes back to the runtime: give it back every CPU
	defer l.closeFds()
	// What is still open when the loop stops (its outbound connections:
	// a stop waits for client connections, not for pooled upstream
	// ones) closes with it, so that nothing outlives the loop.
	defer l.closeRemaining()
	if t, ok := l.handler.(Ticker); ok {
		defer t.Tick()
	}

	evs := make([]event, 256)
	nextSweep := monotime()
	l.tick()
	for !l.stopped {
		if l.cpu < 0 && l.now-l.lastYield >= int64(yieldEvery) {
			// A busy loop never gives up its P on its own (its system
			// calls return to it), and Go's sysmon takes a goroutine
			// that has run 10 ms for a hog: it preempts it, takes its P
			// in the middle of a sendfile, and drops back to checking
			// every 20 µs. A yield every few milliseconds (a few µs: it
			// may wake an idle thread) keeps it off: on plain downloads
			// sysmon's thread went from 1,400 to 535 switches, and from
			// 11 to 6 ms of CPU, per 6 x 100 MB.
			l.lastYield = l.now
			runtime.Gosched()
		}
		until := nextSweep
		if l.asleep {
			// Nothing to sweep: wait for the next event however long it
			// takes. An idle loop that woke every sweep would make the
			// runtime wake its monitor thread, take its P and start a
			// spare thread each time (measured on an idle server: 530
			// sysmon wake-ups a second; while the other loop sends a
			// file, these wake-ups land in its sendfile calls too).
			until = -1
		}
		if len(l.batched) > 0 && (until < 0 || until > l.nextBatchTick) {
			until = l.nextBatchTick
		}
		if len(l.ready) > 0 {
			until = 0
		} else if l.handedOff {
			// The yield lets the goroutines made runnable go first (on
			// this thread, unless the loop is pinned); the loop resumes
			// when one of them blocks, most often after it has posted
			// its result here.
			l.handedOff = false
			runtime.Gosched()
			until = 0
		}
		n, err := epollWait(l, evs, until)
		if err != nil {
			return err
		}
		l.tick()
		if n > 0 {
			l.asleep = false
		}
		for i := 0; i < n; i++ {
			ev := evs[i]
			switch ev.tag {
			case tagListener:
				l.acceptAll()
			case tagWake:
				l.runQueue()
			default:
				c := l.slots[ev.tag]
				if c == nil {
					continue
				}
				if ev.readable {
					c.readable = true
					c.batchWake = l.now
				}
				if ev.hangup {
					c.hangup = true
				}
				if ev.writable {
					c.writable = true
					if c.fullSince != 0 {
						l.stats.fullWait.Add(l.now - c.fullSince)
						c.fullSince = 0
					}
				}
				if d := c.spliceTo; d != nil && (ev.readable || ev.hangup) && !d.closed {
					l.process(d) // it moves this socket's input
				}
				l.process(c)
			}
		}
		if len(l.ready) > 0 {
			// Connections marked while these are processed go to the
			// other list; the two swap, so marking never allocates once
			// both have grown.
			ready := l.ready
			l.ready = l.readyNext[:0]
			for _, c := range ready {
				c.inReady = false
				if !c.closed {
					l.process(c)
				}
			}
			clear(ready)
			l.readyNext = ready[:0]
		}
		if len(l.batched) > 0 && l.now >= l.nextBatchTick {
			l.tickBatched()
		}
		if l.now >= nextSweep {
			l.sweep()
			nextSweep = l.now + int64(sweepEvery)
		}
		if l.draining && l.stats.open.Load() == 0 {
			l.stopped = true
		}
	}
	return nil
}

func (l *Loop) tick() {
	l.now = monotime()
	l.clock = monoStart.Add(time.Duration(l.now))
}

func (l *Loop) acceptAll() {
	for l.lfd >= 0 {
		fd, peer, err := accept(l.lfd)
		if err != nil {
			if isAgain(err) || l.draining {
				return
			}
			// Out of descriptors or memory: the listener stays readable,
			// so retrying now would spin. Pause until the next sweep,
			// when connections or cached files may have been released.
			if l.now-l.lastWarn > int64(time.Second) {
				l.lastWarn = l.now
				l.log.Warn("accept failed; pausing new connections briefly (raise the open-files limit or lower max_connections)", "err", err)
			}
			l.stats.acceptErrors.Add(1)
			if pauseListener(l.epfd, l.lfd) == nil {
				l.paused = true
			}
			return
		}
		var key netip.Addr
		if t := l.cfg.PerAddress; t != nil {
			var ok bool
			if key, ok = t.Acquire(peer.Addr()); !ok {
				l.stats.refusedAddress.Add(1)
				l.lim.Note("connection refused: its client address holds max_connections_per_address", "addr", peer.Addr(), "limit", t.Limit())
				closeFd(fd)
				continue
			}
		}
		if !l.admit(key) {
			l.cfg.PerAddress.Release(key)
			l.stats.rejected.Add(1)
			l.warnFull("max_connections reached and no connection is idle or slow: new connection refused")
			l.lim.Note("connection refused at max_connections", "addr", peer.Addr())
			closeFd(fd)
			continue
		}
		c := l.newConn(fd, peer)
		c.addrKey = key
		c.winStart, c.accepted = l.now, l.now
		if err := epollAdd(l.epfd, fd, c.slot); err != nil {
			l.log.Warn("epoll add", "err", err)
			l.freeConn(c)
			closeFd(fd)
			continue
		}
		l.stats.accepted.Add(1)
		l.stats.open.Add(1)
		l.handler.Open(c)
		c.readable = true // ET may have fired before registration; a read finds out
		l.process(c)
	}
}

// admit takes one of this loop's connection slots (its share of
// MaxConns) for a new connection from the address counted under key
// (Config.PerAddress; the zero Addr when not counted). When every slot
// is taken it frees one by closing, in this order:
//
//  0. a connection that has sent nothing at all (a flood of silent
//     connections then evicts itself before it reaches a client that
//     has begun its handshake or request);
//  1. one waiting for its client nearest its deadline (a request head
//     or TLS handshake under way, keep-alive between requests, a
//     lingering close), as nginx reuses keep-alive connections when it
//     runs out;
//  2. a relay idle longest past ReclaimAfter by its handler's word
//     (MarkIdle);
//  3. the response in flight that moved the fewest bytes over the rate
//     window, below MinRate;
//  4. a response in flight of an address that holds more connections
//     than the newcomer's would: the fair share, so that a crowd of
//     addresses holding every slot gives way to a client that holds
//     next to none.
//
// Whatever the order, a connection is closed only for a newcomer whose
// address holds no more connections than the victim's (strictly fewer
// for 4): a crowd cannot take slots from a client that holds less than
// each of its addresses. The orders rank within classes that put the
// connections of addresses holding more than the newcomer's first
// (victimClass); within an order, the address holding the most goes
// first. It reports false when no slot could be had.
func (l *Loop) admit(key netip.Addr) bool {
	if int(l.stats.open.Load()) < l.maxConns {
		return true
	}
	t := l.cfg.PerAddress
	held := func(netip.Addr) int { return 0 }
	n := 0 // the newcomer's address's connections, itself included
	if t != nil {
		clear(l.heldMemo)
		held = func(a netip.Addr) int {
			if !a.IsValid() {
				return 0
			}
			h, ok := l.heldMemo[a]
			if !ok {
				h = t.HeldKey(a)
				l.heldMemo[a] = h
			}
			return h
		}
		n = max(1, held(key))
	}
	var (
		victim                *Conn
		vClass, vOrder, vHeld int
		vRank                 float64 // lower goes first within an order
	)
	window := l.cfg.MinRate > 0
	for _, c := range l.slots {
		if c == nil || c.outbound || c.closed || c.busy {
			continue
		}
		var order int
		var rank float64
		h := held(c.addrKey)
		switch {
		case len(c.out) == 0 && c.deadline != 0 && !c.heard:
			order, rank = 0, float64(c.deadline)
		case len(c.out) == 0 && c.deadline != 0:
			order, rank = 1, float64(c.deadline)
		case c.idleSince != 0 && l.now-c.idleSince >= int64(l.cfg.ReclaimAfter):
			order, rank = 2, float64(c.idleSince)
		case len(c.out) > 0 && window && c.prevStart != 0 && c.rate(l.now) < float64(l.cfg.MinRate):
			order, rank = 3, c.rate(l.now)
		case len(c.out) > 0 && t != nil && h > n:
			order, rank = 4, float64(c.sent-c.prevSent)
		default:
			continue
		}
		if h < n {
			continue // never from an address holding fewer than the newcomer's
		}
		class := victimClass(order, h, n, l.now-c.accepted)
		if victim == nil || class < vClass || class == vClass && (order < vOrder || order == vOrder && (h > vHeld || h == vHeld && rank < vRank)) {
			victim, vClass, vOrder, vHeld, vRank = c, class, order, h, rank
		}
	}
	if victim == nil {
		return false
	}
	switch vOrder {
	case 0, 1:
		l.stats.reclaimedWaiting.Add(1)
		l.lim.Note("closing a connection that waits for its client to admit a new one at max_connections", "addr", victim.peer.Addr(), "sent_nothing", vOrder == 0)
	case 2:
		l.stats.reclaimedIdle.Add(1)
		l.lim.Note("closing an idle relay to admit a new connection at max_connections", "addr", victim.peer.Addr())
	case 3:
		l.stats.reclaimedSlow.Add(1)
		l.lim.Note("closing a slow response to admit a new connection at max_connections", "addr", victim.peer.Addr(), "bytes_per_second", int64(vRank), "min_send_rate", l.cfg.MinRate)
	case 4:
		l.stats.reclaimedShare.Add(1)
		l.lim.Note("closing a response of the address holding the most connections to admit a client holding fewer at max_connections",
			"addr", victim.peer.Addr(), "its_connections", vHeld, "newcomer_connections", n)
	}
	l.stats.reclaimed.Add(1)
	l.warnFull("max_connections reached: closing connections that wait for their clients, the slowest, or those of the addresses holding most, to admit new ones")
	l.closeConn(victim, false)
	return true
}

// victimClass ranks a candidate for closing at max_connections before
// its order (age: since it was accepted):
//
//  0. anything but a response in flight, of an address holding more
//     connections than the newcomer's: silent, waiting, idle, slow;
//  1. a connection silent for a second or more of an address holding as
//     many (it costs nobody anything);
//  2. a response in flight of an address holding more (the fair share);
//  3. the rest of an address holding as many.
//
// So a client's second connection does not close its own first one, just
// accepted and still silent, while a crowd holds more; a fast download
// of an address holding a few more (a NAT) goes only after the silent
// connections of others; and with one address (or equal ones) the
// orders alone decide.
func victimClass(order, held, newcomer int, age int64) int {
	switch {
	case held > newcomer && order < 4:
		return 0
	case held == newcomer && order == 0 && age >= int64(time.Second):
		return 1
	case held > newcomer:
		return 2
	}
	return 3
}

// rate is the bytes a second c sent over its rate window (one to two of
// Config.RateWindow); only for a connection with one (prevStart set).
func (c *Conn) rate(now int64) float64 {
	return float64(c.sent-c.prevSent) / time.Duration(now-c.prevStart).Seconds()
}

// warnFull logs msg at most once a minute per loop.
func (l *Loop) warnFull(msg string) {
	if l.lastFull == 0 || l.now-l.lastFull > int64(time.Minute) {
		l.lastFull = l.now
		l.log.Warn(msg, "max_connections", l.cfg.MaxConns, "this_worker", l.maxConns, "refused", l.stats.rejected.Load(), "closed_idle", l.stats.reclaimed.Load())
	}
}

func (l *Loop) newConn(fd int, peer Addr) *Conn {
	var slot int32
	if n := len(l.free); n > 0 {
		slot = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		slot = int32(len(l.slots))
		l.slots = append(l.slots, nil)
	}
	c := &Conn{loop: l, fd: fd, slot: slot, peer: peer, lastProgress: l.now, pipe: [2]int{-1, -1}}
	l.slots[slot] = c
	return c
}

func (l *Loop) freeConn(c *Conn) {
	l.slots[c.slot] = nil
	l.free = append(l.free, c.slot)
	if c.buf != nil {
		l.putBuf(c.buf)
		c.buf = nil
	}
}

// bufFor is an input buffer for c: of Config.ReadBuffer bytes, or of
// bulkReadBuffer in bulk mode (SetBulkInput) while fewer than
// maxBigInUse of those are out.
func (l *Loop) bufFor(c *Conn) []byte {
	if l.bigOK(c) {
		l.bigInUse++
		if n := len(l.bigBufs); n > 0 {
			b := l.bigBufs[n-1]
			l.bigBufs = l.bigBufs[:n-1]
			return b
		}
		return make([]byte, bulkReadBuffer)
	}
	return l.getBuf()
}

func (l *Loop) getBuf() []byte {
	if n := len(l.bufs); n > 0 {
		b := l.bufs[n-1]
		l.bufs = l.bufs[:n-1]
		return b
	}
	return make([]byte, l.cfg.ReadBuffer)
}

// maxFreeBufs bounds the idle input buffers a loop keeps, and
// maxFreeBigBufs the idle bulk ones.
const (
	maxFreeBufs    = 256
	maxFreeBigBufs = 8
)

// bulkReadBuffer is the input buffer of a connection in bulk mode: a
// proxied 100 MB body to a TLS client, read in pieces this large, took
// 11% less time and CPU than in 36 KiB ones. maxBigInUse bounds the
// memory they take (16 MiB a loop): past it bulk connections read into
// ordinary buffers.
const (
	bulkReadBuffer = 256 << 10
	maxBigInUse    = 64
)

// bigOK reports whether c should get a bulk buffer now.
func (l *Loop) bigOK(c *Conn) bool {
	return c.bulk && bulkReadBuffer > l.cfg.ReadBuffer && l.bigInUse < maxBigInUse
}

func (l *Loop) putBuf(b []byte) {
	b = b[:cap(b)]
	switch {
	case len(b) != l.cfg.ReadBuffer:
		l.bigInUse--
		if len(l.bigBufs) < maxFreeBigBufs {
			l.bigBufs = append(l.bigBufs, b)
		}
	case len(l.bufs) < maxFreeBufs:
		l.bufs = append(l.bufs, b)
	}
}

func (l *Loop) markReady(c *Conn) {
	if !c.inReady {
		c.inReady = true
		l.ready = append(l.ready, c)
	}
}

// maxRounds bounds the serve/flush rounds one connection gets per turn, so
// a client pipelining many small requests cannot starve the others.
const maxRounds = 32

// process advances a connection as far as it can go without blocking.
func (l *Loop) process(c *Conn) {
	for round := 0; round < maxRounds; round++ {
		if c.closed {
			return
		}
		if c.connecting {
			if c.via || !c.writable {
				return // EPOLLOUT (or EPOLLERR), or Established, tells when connect finished
			}
			if err := connectErr(c.fd); err != nil {
				c.dialErr = err
				l.closeConn(c, false)
				return
			}
			c.connecting = false
			c.deadline = 0
			c.progress++
		}
		if len(c.out) > 0 {
			if !l.flush(c) {
				return // blocked (EPOLLOUT resumes) or out of budget (ready list resumes)
			}
			if c.closed {
				return
			}
		}
		if c.lingering {
			l.linger(c)
			return
		}
		if c.closeAfterFlush {
			l.startLinger(c)
			return
		}
		if c.readable && !c.eof && !c.splicing {
			l.readIn(c)
			if c.closed {
				return
			}
		}
		if c.busy {
			return
		}
		before := c.progress
		c.handler().Serve(c)
		if c.progress == before && len(c.out) == 0 {
			l.maybeReleaseBuf(c)
			return
		}
	}
	l.markReady(c)
}

// shortRead is the size under which a read that left room in the buffer
// is taken to have drained the socket (see readIn).
const shortRead = 16 << 10

// readIn reads until the socket is drained or the buffer is full.
func (l *Loop) readIn(c *Conn) {
	if c.buf != nil && c.rpos == c.wpos {
		if big := len(c.buf) != l.cfg.ReadBuffer; big && !c.bulk || !big && l.bigOK(c) {
			// Into or out of bulk mode, between two reads.
			l.putBuf(c.buf)
			c.buf = nil
		}
	}
	if c.buf == nil {
		c.buf = l.bufFor(c)
		c.rpos, c.wpos = 0, 0
	}
	for {
		if c.wpos == len(c.buf) {
			if c.rpos == 0 {
				return // full: readable stays set until the handler consumes
			}
			c.compact()
		}
		want := len(c.buf) - c.wpos
		n, err := readFd(c.fd, c.buf[c.wpos:])
		switch {
		case n > 0:
			c.wpos += n
			c.heard = true
			c.progress++
			if c.bulk {
				l.took(c, n)
			}
			if n < want && n < shortRead && !c.hangup {
				// A small read that left room drained the socket: with
				// edge-triggered epoll the next bytes bring a new event,
				// so the read that would only say EAGAIN is skipped (one
				// system call less per request). Not after a hangup event
				// (its EOF must still be read), and not for bulk input,
				// where reading on finds what arrived meanwhile (measured:
				// a proxied 100 MB body over TLS took 2.7 s/GiB of CPU
				// with the skip, 2.0 without).
				c.readable = false
				return
			}
			continue
		case err == nil:
			c.eof = true
			c.readable = false
			c.progress++
			return
		case isAgain(err):
			c.readable = false
			return
		case isIntr(err):
			continue
		default:
			// Connection reset and the like: nothing more to do for it.
			c.eof = true
			l.closeConn(c, false)
			return
		}
	}
}

func (l *Loop) maybeReleaseBuf(c *Conn) {
	if c.buf != nil && c.rpos == c.wpos && !c.readable {
		l.putBuf(c.buf)
		c.buf = nil
		c.rpos, c.wpos = 0, 0
	}
}

// startLinger half-closes after the last response and keeps discarding
// input for a while, so a client still sending sees our answer before the
// kernel would answer its data with a reset.
func (l *Loop) startLinger(c *Conn) {
	c.closeAfterFlush = false
	if c.eof {
		l.closeConn(c, false)
		return
	}
	shutdownWrite(c.fd)
	c.lingering = true
	c.deadline = l.now + int64(l.cfg.LingerTimeout)
	c.lingerLeft = 256 << 10
	l.linger(c)
}

func (l *Loop) linger(c *Conn) {
	if c.buf == nil {
		c.buf = l.getBuf()
	}
	for {
		n, err := readFd(c.fd, c.buf)
		if n > 0 {
			c.lingerLeft -= n
			if c.lingerLeft <= 0 {
				l.closeConn(c, false)
				return
			}
			continue
		}
		if err != nil && isAgain(err) {
			return
		}
		if err != nil && isIntr(err) {
			continue
		}
		l.closeConn(c, false)
		return
	}
}

// closeConn closes the socket, with a reset when abort is set.
func (l *Loop) closeConn(c *Conn, abort bool) {
	if c.closed {
		return
	}
	c.closed = true
	if abort {
		setLingerZero(c.fd)
		l.stats.aborted.Add(1)
	}
	closeFd(c.fd)
	c.releaseOutput()
	if c.outbound {
		l.outbound--
	} else {
		l.stats.open.Add(-1)
		l.cfg.PerAddress.Release(c.addrKey)
		c.addrKey = netip.Addr{}
	}
	if c.busy {
		c.closedLater = true // a worker still uses the handler's state
	} else {
		c.handler().Closed(c)
	}
	l.freeConn(c)
}

// errConnectTimeout is the DialErr of a connection its timeout ended.
var errConnectTimeout = errors.New("connect timeout")

// Dial starts a connection from this loop to addr, served by h instead of
// the loop's handler: the reverse proxy's connections to its upstreams.
// h.Open runs before Dial returns; Serve runs once the connection is
// established (Connected) and then as for any connection. A connection
// that fails before that, or is not established within timeout, closes
// with DialErr set. Outbound connections do not count against MaxConns
// and do not keep a draining loop alive. Call it on the loop goroutine.
func (l *Loop) Dial(addr Addr, timeout time.Duration, h Handler) (*Conn, error) {
	if l.draining {
		return nil, errors.New("reactor: loop is shutting down")
	}
	fd, err := connect(addr)
	if err != nil {
		return nil, err
	}
	// No Serve until EPOLLOUT says the connect finished; epoll reports it
	// even if it finished before the registration.
	return l.outboundConn(fd, addr, timeout, h, false)
}

// DialVia is Dial for a connection another goroutine establishes: fd is
// this loop's end of a local stream socket (a socketpair) whose other end
// that goroutine relays once it has connected on its side (TLS to an
// upstream: the handshake and the records are its). The connection is
// not Connected until the goroutine Posts Established; one not
// established within timeout closes with DialErr set. The loop owns fd
// from the call on, even when it fails. Call it on the loop goroutine.
func (l *Loop) DialVia(fd int, addr Addr, timeout time.Duration, h Handler) (*Conn, error) {
	if l.draining {
		closeFd(fd)
		return nil, errors.New("reactor: loop is shutting down")
	}
	return l.outboundConn(fd, addr, timeout, h, true)
}

// outboundConn registers fd, a connection being established, served by h.
func (l *Loop) outboundConn(fd int, addr Addr, timeout time.Duration, h Handler, via bool) (*Conn, error) {
	c := l.newConn(fd, addr)
	c.h, c.outbound, c.connecting, c.via = h, true, true, via
	if err := epollAdd(l.epfd, fd, c.slot); err != nil {
		l.freeConn(c)
		closeFd(fd)
		return nil, err
	}
	l.outbound++
	l.asleep = false
	c.deadline = l.now + int64(timeout)
	h.Open(c)
	return c, nil
}

// Ticker is implemented by handlers that want a call on every deadline
// sweep (a few times a second) and once when the loop stops, to flush
// buffered logs and the like. Tick reports whether it left something
// that a later call must finish, so that a loop with no connections
// sweeps again instead of sleeping until the next event.
type Ticker interface{ Tick() (more bool) }

// sweep closes connections whose deadline passed.
func (l *Loop) sweep() {
	defer func() {
		more := false
		if t, ok := l.handler.(Ticker); ok {
			more = t.Tick()
		}
		l.asleep = l.stats.open.Load() == 0 && l.outbound == 0 && !l.paused && !more
	}()
	if l.paused && l.lfd >= 0 {
		if resumeListener(l.epfd, l.lfd) == nil {
			l.paused = false
			l.acceptAll()
		}
	}
	send := int64(l.cfg.SendTimeout)
	window := int64(l.cfg.RateWindow)
	for _, c := range l.slots {
		if c == nil || c.closed {
			continue
		}
		if l.cfg.MinRate > 0 && l.now-c.winStart >= window {
			// The rate is measured from the start of the window before
			// this one: over one to two windows, never less.
			c.prevSent, c.prevStart = c.winSent, c.winStart
			c.winSent, c.winStart = c.sent, l.now
		}
		limit := send
		if c.sendTimeout > 0 {
			limit = c.sendTimeout
		}
		switch {
		case len(c.out) > 0 && l.now-c.lastProgress > limit && !c.awaitsSource():
			l.stats.timeouts.Add(1)
			l.log.Debug("send timeout", "peer", c.peer)
			c.timedOut = true
			l.closeConn(c, true)
		case len(c.out) == 0 && c.deadline != 0 && l.now > c.deadline:
			if !c.lingering {
				l.stats.timeouts.Add(1)
				l.log.Debug("read timeout", "peer", c.peer)
			}
			c.timedOut = true
			if c.connecting {
				c.dialErr = errConnectTimeout
			}
			l.closeConn(c, false)
		}
	}
}

// maxFreePipes bounds the empty pipes a loop keeps for reuse.
const maxFreePipes = 64

// getPipe returns an empty pipe: a kept one, or a new one.
func (l *Loop) getPipe() ([2]int, error) {
	if n := len(l.pipes); n > 0 {
		p := l.pipes[n-1]
		l.pipes = l.pipes[:n-1]
		return p, nil
	}
	return newPipe()
}

// putPipe keeps an empty pipe for the next splice (a pipe costs four
// system calls to make and close, and the kernel's buffers with it), or
// closes it.
func (l *Loop) putPipe(p [2]int, empty bool) {
	// pipeEmpty asks the kernel too: bytes left in a reused pipe would go
	// to another connection.
	if empty && len(l.pipes) < maxFreePipes && !l.stopped && pipeEmpty(p[0]) {
		l.pipes = append(l.pipes, p)
		return
	}
	closeFd(p[0])
	closeFd(p[1])
}

// awaitsSource reports whether c's output is a relay (Relay) waiting on
// the socket it splices from rather than on its own peer: not a send
// stall (the relay's owner bounds its quiet time). A counted Splice
// waiting on its source stays under the send timeout: a body whose
// source stalls must not hold the connection forever.
func (c *Conn) awaitsSource() bool { return c.out[0].from != nil && c.out[0].n < 0 && c.pipeLen == 0 }

// drain stops accepting and closes idle connections; the rest close after
// their response (handlers check Draining).
func (l *Loop) drain() {
	if l.draining {
		return
	}
	l.draining = true
	if l.lfd >= 0 {
		closeFd(l.lfd)
		l.lfd = -1
	}
	dr, _ := l.handler.(Drainer)
	for _, c := range l.slots {
		if c != nil && !c.outbound && !c.closed && len(c.out) == 0 && !c.busy && c.rpos == c.wpos {
			if dr != nil && dr.Drain(c) {
				c.Wake()
				continue
			}
			l.closeConn(c, false)
		}
	}
}

// Drainer is implemented by handlers whose idle connections need a word
// before they close at shutdown (HTTP/2's GOAWAY). Drain returns true to
// keep c open: Serve runs next, sees Draining, and closes it when done.
type Drainer interface{ Drain(c *Conn) bool }

// closeAll ends every connection at once: the grace period is over.
func (l *Loop) closeAll() {
	l.drain()
	for _, c := range l.slots {
		if c != nil && !c.closed {
			l.closeConn(c, true)
		}
	}
	l.stopped = true
}

// closeRemaining closes every connection still open; run calls it as the
// loop stops.
func (l *Loop) closeRemaining() {
	for _, c := range l.slots {
		if c != nil && !c.closed {
			l.closeConn(c, false)
		}
	}
}

func (l *Loop) closeFds() {
	for _, p := range l.pipes {
		closeFd(p[0])
		closeFd(p[1])
	}
	l.pipes = nil
	if l.lfd >= 0 {
		closeFd(l.lfd)
		l.lfd = -1
	}
	if l.epfd >= 0 {
		closeFd(l.epfd)
		l.epfd = -1
	}
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.dead = true
	if l.efd >= 0 {
		closeFd(l.efd)
		l.efd = -1
	}
}
