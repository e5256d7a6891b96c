package reactor

import (
	"errors"
	"net/netip"
	"syscall"
	"time"

	"github.com/mediaship/engine/internal/fileio"
)

// Addr is a peer address.
type Addr = netip.AddrPort

// Conn is one client connection. All methods must be called on the loop
// that owns it (from a Handler method or a function given to Post).
//
// Memory: an idle connection holds this struct only; while it has unread
// input it also holds one input buffer (Config.ReadBuffer bytes); queued
// output is a few segment descriptors plus the response heads, never file
// content (files go by sendfile, small cached files by reference).
type Conn struct {
	// State is the handler's per-connection state.
	State any

	// Owned by the loop goroutine.
	loop            *Loop
	fd              int
	slot            int32
	peer            Addr
	buf             []byte // input buffer; nil when none is held
	rpos, wpos      int    // unread input is buf[rpos:wpos]
	out             []seg  // queued output, in order
	outStore        []seg  // out's backing array, reused
	arena           []byte // bytes copied by Write
	progress        uint64 // bumps whenever input or output moves
	deadline        int64  // read deadline (loop monotonic ns); 0 = none
	lastProgress    int64  // last time output moved, for SendTimeout
	fullSince       int64  // when the socket last refused output; 0 = it has not since
	lingerLeft      int
	sent            int64 // bytes written to the socket
	congestion      string
	pacing          uint64
	heard           bool // the client has sent something
	readable        bool // the socket may have input (edge-triggered epoll)
	hangup          bool // epoll reported the peer's close (or an error): read until EOF
	writable        bool // the socket may take output
	eof             bool
	closed          bool
	closeAfterFlush bool
	lingering       bool
	busy            bool // work started with Go has not finished
	closedLater     bool // closed while busy: Handler.Closed runs when the work is done
	inReady         bool
	timedOut        bool  // closed by its read deadline or the send timeout
	splicing        bool  // another connection splices from this socket: its input is not read
	spliceTo        *Conn // that connection, woken when this socket has input
	idleSince       int64 // MarkIdle: loop time since when; 0 = not idle
	sendTimeout     int64 // overrides Config.SendTimeout when set
	pipe            [2]int
	pipeLen         int        // bytes in pipe, read from the source and not yet written
	bulk            bool       // SetBulkInput: read into bulkReadBuffer
	streamed        int64      // bytes taken from the socket in bulk since it was last unbatched
	batched         bool       // SO_RCVLOWAT raised (batch.go)
	batchWake       int64      // when a batched socket last woke the loop
	addrKey         netip.Addr // what Config.PerAddress counts it under; zero: not counted
	accepted        int64      // loop time it was accepted
	// The rate window (Config.MinRate): sent at the start of the current
	// window and of the one before it, and when they began (0: not yet).
	winSent, prevSent   int64
	winStart, prevStart int64

	// Outbound connections (Loop.Dial) only.
	h          Handler // serves this connection instead of the loop's handler
	outbound   bool
	connecting bool  // connect(2) under way
	via        bool  // DialVia: another goroutine establishes it (Established)
	dialErr    error // why the connection failed, if it did before it was established
}

// handler is the Handler that serves c.
func (c *Conn) handler() Handler {
	if c.h != nil {
		return c.h
	}
	return c.loop.handler
}

// seg is a piece of queued output: memory (with a control message when
// oob is set), n bytes of file fd from off, bytes a Source produces, or a
// control function run once everything before it is written.
type seg struct {
	mem  []byte
	oob  []byte
	fd   int
	off  int64
	n    int64
	file bool
	// version, for a file segment, is the version the file must keep
	// (SendFile); zero: not checked.
	version fileio.Version
	src     Source
	ctrl    func(fd int) error
	from    *Conn // splice n bytes from this connection's socket
}

// Source produces output that must be computed rather than copied (TLS
// records sealed from a file, for instance), a batch at a time as the
// socket takes it.
type Source interface {
	// Next returns the next bytes to write, about max at most, or nil
	// when the source is done. The slice stays valid until the next call.
	// An error resets the connection.
	Next(max int) ([]byte, error)
	// Release is called once, when the source is done or the connection
	// closed.
	Release()
}

// Loop returns the loop that owns c.
func (c *Conn) Loop() *Loop { return c.loop }

// Peer returns the client's address.
func (c *Conn) Peer() Addr { return c.peer }

// LocalAddr returns the address of this end of the connection.
func (c *Conn) LocalAddr() (Addr, error) { return localAddr(c.fd) }

// Input returns the unread input. It aliases the connection's buffer and
// is valid until the next Consume or until the handler returns.
func (c *Conn) Input() []byte {
	if c.buf == nil {
		return nil
	}
	return c.buf[c.rpos:c.wpos]
}

// Consume marks n bytes of input as used.
func (c *Conn) Consume(n int) {
	if n <= 0 {
		return
	}
	c.rpos += n
	if c.rpos >= c.wpos {
		c.rpos, c.wpos = 0, 0
	}
	c.progress++
}

// InputFull reports whether the input buffer is full: a handler that
// still cannot make sense of it must give up (the input is too large).
func (c *Conn) InputFull() bool {
	return c.buf != nil && c.rpos == 0 && c.wpos == len(c.buf)
}

func (c *Conn) compact() {
	n := copy(c.buf, c.buf[c.rpos:c.wpos])
	c.rpos, c.wpos = 0, n
}

// EOF reports whether the client has finished sending.
func (c *Conn) EOF() bool { return c.eof }

// Write queues a copy of p.
func (c *Conn) Write(p []byte) {
	start := len(c.arena)
	c.arena = append(c.arena, p...)
	c.queue(seg{mem: c.arena[start:len(c.arena):len(c.arena)]})
}

// WriteRef queues p without copying it. The caller keeps p unchanged until
// Pending reports false or the connection closes.
func (c *Conn) WriteRef(p []byte) {
	if len(p) > 0 {
		c.queue(seg{mem: p})
	}
}

// SendFile queues n bytes of the open file fd from offset off, sent with
// sendfile(2). The caller keeps fd open until Pending reports false or the
// connection closes. If the file turns out shorter than off+n, the
// connection is reset: a client must never get fewer bytes than the
// Content-Length it was promised without noticing. A version other than
// zero is the file's when the response was promised: before the first
// sendfile of each turn (up to the write budget, 2 MiB) the file is checked
// against it (fileio.Changed, one fstat), and once
// its bytes were rewritten in place the connection is reset too, so the
// response never ends cleanly with bytes its digest does not describe.
func (c *Conn) SendFile(fd int, off, n int64, version fileio.Version) {
	if n > 0 {
		c.queue(seg{fd: fd, off: off, n: n, file: true, version: version})
	}
}

func (c *Conn) queue(s seg) {
	if len(c.out) == 0 {
		c.out = c.outStore[:0]
		c.lastProgress = c.loop.now
	}
	c.out = append(c.out, s)
	if cap(c.out) > cap(c.outStore) {
		c.outStore = c.out[:0]
	}
	c.progress++
}

// Splice queues n bytes read straight from src's socket with splice(2)
// through a pipe, with no copy through userspace: a proxied body from an
// upstream connection on the same loop. Until they have moved, src's
// input is not read into its buffer (the caller has taken what src had
// buffered already), and src's Serve runs on its socket's events so its
// handler can Wake c. If src ends before n bytes, c is reset: a short
// body is never passed off as whole.
func (c *Conn) Splice(src *Conn, n int64) {
	if n <= 0 {
		return
	}
	src.splicing, src.spliceTo = true, c
	c.queue(seg{from: src, n: n})
}

// Relay queues everything src's socket delivers until its end, moved
// with splice(2) as Splice moves a body: a passthrough connection's one
// direction. At src's EOF the relay ends by shutting c's write side
// (shutdown(SHUT_WR)), so the peer on c sees the half-close src's peer
// made; src's EOF then reports true and its handler is woken. If src's
// socket fails (a reset), c is reset. Nothing may be queued on c after a
// Relay.
func (c *Conn) Relay(src *Conn) {
	src.splicing, src.spliceTo = true, c
	if src.buf != nil && src.rpos == src.wpos {
		src.loop.putBuf(src.buf) // its input goes by the pipe from now on
		src.buf = nil
	}
	c.queue(seg{from: src, n: -1})
}

// Spliced reports whether src has no splice from it in progress.
func (c *Conn) Spliced() bool { return !c.splicing }

// SetBulkInput has the connection read into a 256 KiB buffer instead of
// the usual one, from its next read on: for a long body that goes
// through userspace (a proxied response to a TLS client), where each
// read is a turn of the loop.
func (c *Conn) SetBulkInput(on bool) {
	c.bulk = on
	if !on {
		c.loop.unbatch(c)
	}
}

// WriteSource queues output produced by src.
func (c *Conn) WriteSource(src Source) { c.queue(seg{src: src}) }

// Control queues fn, to run with the socket's descriptor once everything
// queued before it has been written to the socket, and before anything
// queued after it. An error from fn resets the connection. This is how a
// connection changes socket state in step with its output (handing TLS
// transmission to the kernel between two records).
func (c *Conn) Control(fn func(fd int) error) { c.queue(seg{ctrl: fn}) }

// WriteOOB queues a copy of p sent with the control message oob (one
// sendmsg).
func (c *Conn) WriteOOB(p, oob []byte) {
	c.queue(seg{mem: append([]byte(nil), p...), oob: append([]byte(nil), oob...)})
}

// Sent returns the number of bytes written to the socket so far.
func (c *Conn) Sent() int64 { return c.sent }

// Progress is a count that changes whenever the connection's input or
// output moves (bytes read or consumed, written, spliced from it).
func (c *Conn) Progress() uint64 { return c.progress }

// Pending reports whether queued output is still unwritten.
func (c *Conn) Pending() bool { return len(c.out) > 0 }

// Closed reports whether the connection has closed.
func (c *Conn) Closed() bool { return c.closed }

// Wake has the loop process c soon (call Serve), as if input had come:
// for state changed outside Serve, from the loop goroutine.
func (c *Conn) Wake() {
	if !c.closed {
		c.progress++
		c.loop.markReady(c)
	}
}

// Established ends the connecting of a connection from DialVia, on the
// loop goroutine (the goroutine that establishes it Posts the call): nil
// makes it connected, and it is served; an error fails it as a refused
// connect would (DialErr, then Closed). A call after the connection
// closed (its connect timeout) does nothing.
func (c *Conn) Established(err error) {
	if c.closed || !c.connecting {
		return
	}
	if err != nil {
		c.dialErr = err
		c.loop.closeConn(c, false)
		return
	}
	c.connecting, c.via = false, false
	c.deadline = 0
	c.progress++
	c.loop.markReady(c)
}

// Connected reports whether an outbound connection is established (always
// true for an accepted one).
func (c *Conn) Connected() bool { return !c.connecting && !c.closed }

// DialErr is why an outbound connection failed before it was established:
// refused, unreachable, or its connect timeout. Nil otherwise.
func (c *Conn) DialErr() error { return c.dialErr }

// TimedOut reports whether the connection was closed by its read
// deadline or by the send timeout.
func (c *Conn) TimedOut() bool { return c.timedOut }

// Busy reports whether work started with Go is still running.
func (c *Conn) Busy() bool { return c.busy }

// Close closes the connection at once, dropping queued output.
func (c *Conn) Close() { c.loop.closeConn(c, false) }

// Abort resets the connection (RST), so the client sees an error rather
// than a clean end.
func (c *Conn) Abort() { c.loop.closeConn(c, true) }

// Fail closes an outbound connection as one that failed before it was of
// use (DialErr reports err): for a DialVia connection whose goroutine
// learned only after Established that the other side refused it (a TLS
// 1.3 server's alert after the handshake). Call it on the loop.
func (c *Conn) Fail(err error) {
	if c.closed {
		return
	}
	if c.dialErr == nil {
		c.dialErr = err
	}
	c.loop.closeConn(c, true)
}

// CloseAfterFlush closes the connection once queued output is written:
// the write side is shut, and input is read and discarded for a short
// while so the client can read the answer before the socket goes away.
func (c *Conn) CloseAfterFlush() {
	c.closeAfterFlush = true
	c.progress++
}

// SetReadDeadline closes the connection if no output is queued d from
// now. Zero clears it.
func (c *Conn) SetReadDeadline(d time.Duration) {
	if d <= 0 {
		c.deadline = 0
		return
	}
	c.deadline = c.loop.now + int64(d)
}

// SetSendTimeout closes the connection when its peer takes no queued
// output for d, instead of Config.SendTimeout. Zero restores that.
func (c *Conn) SetSendTimeout(d time.Duration) { c.sendTimeout = int64(d) }

// Stale reports whether an idle connection has something waiting that
// nobody asked for: bytes (data is then true), or the peer's close or an
// error. A pooled connection is checked so just before it is reused: its
// handler hears of such input only on the connection's own events, which
// may come after the reuse (bytes that came right behind a body spliced
// from it wait in the socket unread until some later event).
func (c *Conn) Stale() (stale, data bool) {
	switch {
	case c.closed:
		return true, false
	case c.rpos != c.wpos:
		return true, true
	case c.eof:
		return true, false
	}
	switch peekWaiting(c.fd) {
	case waitingBytes:
		return true, true
	case waitingGone:
		return true, false
	}
	return false, false
}

// waiting is what a socket holds that has not been read.
type waiting int

const (
	waitingNothing waiting = iota
	waitingBytes           // at least one byte
	waitingGone            // the peer's close, or an error (a reset)
)

// MarkIdle tells the loop whether the connection is idle though it has
// output queued (a relay on which nothing moves), from now if it was not
// already: at max_connections, a connection idle past
// Config.ReclaimAfter may be closed to admit a new one when no
// connection waits for its client.
func (c *Conn) MarkIdle(idle bool) {
	switch {
	case !idle:
		c.idleSince = 0
	case c.idleSince == 0:
		c.idleSince = c.loop.now
	}
}

// HasReadDeadline reports whether a read deadline is set.
func (c *Conn) HasReadDeadline() bool { return c.deadline != 0 }

// Go runs work on the worker pool and calls the handler's Serve again when
// it is done. While it runs the connection is busy: input is still read
// and buffered, but Serve is not called. work must not touch the Conn.
func (c *Conn) Go(work func()) {
	c.busy = true
	l := c.loop
	l.HandedOff()
	l.group.pool.Submit(func() {
		work()
		l.Post(func() {
			c.busy = false
			if c.closed {
				if c.closedLater {
					c.closedLater = false
					c.handler().Closed(c)
				}
				return
			}
			c.progress++
			l.process(c)
		})
	})
}

// Post runs fn on c's loop, from any goroutine, and then lets the
// connection make progress (flush what fn queued, call Serve). Nothing
// runs if the connection has closed by then.
func (c *Conn) Post(fn func()) {
	l := c.loop
	l.Post(func() {
		if c.closed {
			return
		}
		fn()
		if !c.closed {
			c.progress++
			l.process(c)
		}
	})
}

// SetCongestion sets the socket's TCP congestion control ("bbr") if it
// differs from what this connection last set.
func (c *Conn) SetCongestion(name string) error {
	if c.congestion == name {
		return nil
	}
	if err := setCongestion(c.fd, name); err != nil {
		return err
	}
	c.congestion = name
	return nil
}

// SetPacingRate caps the socket's rate at bytesPerSec with
// SO_MAX_PACING_RATE, paced by the kernel. Zero removes the cap.
func (c *Conn) SetPacingRate(bytesPerSec uint64) error {
	if c.pacing == bytesPerSec {
		return nil
	}
	if err := setPacing(c.fd, bytesPerSec); err != nil {
		return err
	}
	c.pacing = bytesPerSec
	return nil
}

// flush writes queued output until it is all written (true), the socket
// is full, or the connection used its write budget (false).
func (l *Loop) flush(c *Conn) bool {
	budget := l.cfg.WriteBudget
	checked := -1 // the file whose version this turn checked: once per file per turn
	for len(c.out) > 0 {
		if !c.writable {
			return false
		}
		if budget <= 0 {
			l.markReady(c)
			return false
		}
		s := &c.out[0]
		switch {
		case s.ctrl != nil:
			fn := s.ctrl
			s.ctrl = nil
			c.out = c.out[1:]
			if err := fn(c.fd); err != nil {
				l.log.Warn("connection control failed; connection reset", "peer", c.peer, "err", err)
				l.closeConn(c, true)
				return false
			}
			continue
		case s.src != nil:
			if len(s.mem) == 0 {
				chunk, err := s.src.Next(budget)
				if err != nil {
					l.log.Error("output source failed; connection reset", "peer", c.peer, "err", err)
					l.closeConn(c, true)
					return false
				}
				if chunk == nil {
					s.src.Release()
					s.src = nil
					c.out = c.out[1:]
					continue
				}
				s.mem = chunk
			}
			n, err := writev(l, c.fd, [][]byte{s.mem}, false)
			if n > 0 {
				budget -= n
				c.lastProgress = l.now
				c.sent += int64(n)
				l.stats.writes.Add(1)
				l.stats.bytesMem.Add(int64(n))
				s.mem = s.mem[n:]
				continue
			}
			if err != nil && !l.writeFailed(c, err, "write") {
				return false
			}
			continue
		case s.from != nil:
			if !l.spliceSeg(c, s, &budget) {
				return false
			}
			continue
		case s.oob != nil:
			n, err := sendOOB(c.fd, s.mem, s.oob)
			if n > 0 {
				c.lastProgress = l.now
				c.sent += int64(n)
				l.stats.writes.Add(1)
				l.stats.bytesMem.Add(int64(n))
				s.mem = s.mem[n:]
				if len(s.mem) == 0 {
					c.out = c.out[1:]
				}
				continue
			}
			if err != nil && !l.writeFailed(c, err, "sendmsg") {
				return false
			}
			continue
		}
		if s.file {
			if s.version.CtimeNs != 0 && checked != s.fd && fileio.Changed(s.fd, s.version) {
				l.log.Warn("file changed while being sent; connection reset", "peer", c.peer)
				l.closeConn(c, true)
				return false
			}
			checked = s.fd
			chunk := int(min(s.n, int64(budget), sendfileStep))
			n, err := sendfile(c.fd, s.fd, s.off, chunk)
			if n > 0 {
				s.off += int64(n)
				s.n -= int64(n)
				budget -= n
				c.lastProgress = l.now
				c.sent += int64(n)
				l.stats.writes.Add(1)
				l.stats.bytesFile.Add(int64(n))
				if s.n == 0 {
					// The last bytes are in the socket: a file rewritten
					// while they went is still caught here, and the reset
					// drops what the client has not been sent yet.
					if s.version.CtimeNs != 0 && fileio.Changed(s.fd, s.version) {
						l.log.Warn("file changed while being sent; connection reset", "peer", c.peer)
						l.closeConn(c, true)
						return false
					}
					c.out = c.out[1:]
				}
				continue
			}
			if err == nil {
				l.log.Error("file shrank while being sent; connection reset", "peer", c.peer)
				l.closeConn(c, true)
				return false
			}
			if !l.writeFailed(c, err, "sendfile") {
				return false
			}
			continue
		}
		// Gather the memory segments up to the next file segment.
		bufs := l.sys.bufs[:0]
		i := 0
		for i < len(c.out) && c.out[i].plain() && len(bufs) < maxIov {
			bufs = append(bufs, c.out[i].mem)
			i++
		}
		l.sys.bufs = bufs
		// A file (or more memory) follows: let the kernel coalesce. Not
		// before a splice from another socket, whose bytes may be a
		// round trip away (a relayed ClientHello waits for the origin's
		// answer): MSG_MORE would hold these back for up to 200 ms.
		more := i < len(c.out) && c.out[i].from == nil
		n, err := writev(l, c.fd, bufs, more)
		if n > 0 {
			budget -= n
			c.lastProgress = l.now
			c.sent += int64(n)
			l.stats.writes.Add(1)
			l.stats.bytesMem.Add(int64(n))
			for n > 0 {
				m := &c.out[0]
				if n >= len(m.mem) {
					n -= len(m.mem)
					c.out = c.out[1:]
				} else {
					m.mem = m.mem[n:]
					n = 0
				}
			}
			continue
		}
		if err != nil && !l.writeFailed(c, err, "writev") {
			return false
		}
	}
	c.out = c.outStore[:0]
	c.arena = c.arena[:0]
	if cap(c.arena) > 64<<10 {
		c.arena = nil // a rare large head: do not keep it
	}
	c.progress++
	return true
}

// sendfileStep is the most one sendfile(2) moves; a turn makes several
// calls, up to the write budget. Sending a file in 2 MiB calls filled
// the socket until the next call met EAGAIN, so the loop slept once per
// buffer and the client drained it in bursts; in 256 KiB steps (as
// lighttpd sends) the client reads while the loop sends and the socket
// rarely fills. One connection, plain HTTP/1.1, 100 MB from the page
// cache, 9 interleaved downloads each on 2 vCPUs: 2,002 to 2,458 MiB/s
// (medians) and 0.43 to 0.32 s of server CPU per GiB; 128 KiB and
// 512 KiB steps measured no better.
const sendfileStep = 256 << 10

// spliceSegSize is the most one splice(2) moves.
const spliceSegSize = 1 << 20

// spliceSeg moves a splice segment on: what the pipe holds to c's
// socket, then more from the source into the pipe. It returns false when
// c must wait (its socket is full, the source has nothing yet, or c was
// closed).
func (l *Loop) spliceSeg(c *Conn, s *seg, budget *int) bool {
	if c.pipe[0] < 0 {
		p, err := l.getPipe()
		if err != nil {
			l.log.Warn("cannot make a pipe for splice; connection reset", "peer", c.peer, "err", err)
			l.closeConn(c, true)
			return false
		}
		c.pipe = p
	}
	if c.pipeLen > 0 {
		n, err := spliceFd(c.pipe[0], c.fd, c.pipeLen)
		if n > 0 {
			c.pipeLen -= n
			*budget -= n
			c.lastProgress = l.now
			c.sent += int64(n)
			l.stats.writes.Add(1)
			l.stats.bytesSplice.Add(int64(n))
			return true
		}
		if err != nil {
			return l.writeFailed(c, err, "splice")
		}
		return true
	}
	if s.n == 0 {
		s.from.splicing, s.from.spliceTo = false, nil
		l.unbatch(s.from)
		s.from = nil
		c.out = c.out[1:]
		return true
	}
	src := s.from
	if src.closed {
		l.closeConn(c, true)
		return false
	}
	want := spliceSegSize
	if s.n > 0 {
		want = int(min(s.n, spliceSegSize))
	}
	n, err := spliceFd(src.fd, c.pipe[1], want)
	switch {
	case n > 0:
		if c.pipeLen == 0 {
			c.lastProgress = l.now // the send timeout runs from here, not from when the source went quiet
		}
		c.pipeLen += n
		if s.n > 0 {
			s.n -= int64(n)
		}
		src.progress++
		l.took(src, n)
		return true
	case err == nil && s.n < 0:
		// A relay's source ended: pass its half-close on.
		shutdownWrite(c.fd)
		src.splicing, src.spliceTo = false, nil
		src.eof = true
		src.readable = false
		s.from = nil
		c.out = c.out[1:]
		src.Wake()
		return true
	case err == nil:
		l.log.Debug("splice source ended early; connection reset", "peer", c.peer, "source", src.peer)
		l.closeConn(c, true)
		return false
	case isAgain(err):
		src.readable = false // its next EPOLLIN runs its handler, which wakes c
		return false
	case isIntr(err):
		return true
	}
	l.log.Debug("splice from source failed; connection reset", "peer", c.peer, "err", err)
	l.closeConn(c, true)
	return false
}

// writeFailed handles a write error. It returns true to retry (EINTR).
func (l *Loop) writeFailed(c *Conn, err error, op string) bool {
	switch {
	case isIntr(err):
		return true
	case isAgain(err):
		c.writable = false
		c.fullSince = l.now
		l.stats.full.Add(1)
		return false
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		l.stats.writeErr.Add(1)
		l.closeConn(c, false)
		return false
	}
	l.log.Warn("write failed; connection reset", "op", op, "peer", c.peer, "err", err)
	l.stats.writeErr.Add(1)
	l.closeConn(c, true)
	return false
}

const maxIov = 64

// plain reports whether s is bare memory, which may be gathered with its
// neighbours into one writev.
func (s *seg) plain() bool {
	return !s.file && s.src == nil && s.ctrl == nil && s.oob == nil && s.from == nil
}

// releaseOutput drops queued output, releasing sources.
func (c *Conn) releaseOutput() {
	for i := range c.out {
		if c.out[i].src != nil {
			c.out[i].src.Release()
		}
		if f := c.out[i].from; f != nil {
			f.splicing, f.spliceTo = false, nil
		}
	}
	if c.pipe[0] >= 0 {
		c.loop.putPipe(c.pipe, c.pipeLen == 0)
		c.pipe = [2]int{-1, -1}
		c.pipeLen = 0
	}
	clear(c.out)
	c.out = c.out[:0]
}
