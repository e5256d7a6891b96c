package engine

import (
	"crypto/tls"
	"errors"
	"net"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/ktls"
)

// TLS alert descriptions (RFC 8446 §6).
const (
	alertCloseNotify       = 0
	alertUnexpectedMessage = 10
	alertBadRecordMAC      = 20
	alertRecordOverflow    = 22
	alertDecodeError       = 50
	alertInternalError     = 80
)

// maxCiphertext bounds a record on the wire (RFC 8446 §5.2: 2^14 + 256).
const maxCiphertext = 5 + ktls.MaxPlaintext + 256

// tlsHandler drives TLS connections on one loop: the handshake runs on a
// goroutine fed whole records; afterwards our record layer sits under the
// loop's HTTP/1.1 driver.
type tlsHandler struct {
	// Immutable after construction.
	h1   *h1Handler
	srv  *Server
	loop *reactor.Loop

	// Owned by the loop goroutine.
	inBufs   [][]byte // free plaintext input buffers
	sealBufs [][]byte // free record batch buffers
	warned   bool     // a promotion failure was logged on this loop
}

type tlsPhase uint8

const (
	phaseHandshake tlsPhase = iota
	phaseOpen
)

// tlsConn is one TLS connection: its HTTP/1.1 state and its record layer,
// which is the stream the HTTP/1.1 driver reads and writes.
type tlsConn struct {
	h1Conn

	// Owned by the loop goroutine.
	th     *tlsHandler
	c      *reactor.Conn
	phase  tlsPhase
	hs     *ktls.Handshake
	wanted bool // the handshake asked for a record

	sess      *ktls.Session
	open      *ktls.Opener
	seal      *ktls.Sealer
	writeKeys ktls.Keys // the key the kernel gets on promotion

	in         []byte // decrypted input; nil when empty
	rpos, wpos int
	peerDone   bool // close_notify received, or the socket's EOF
	// closeNotified: close_notify received; later records are ignored.
	closeNotified bool

	out      []outPart // output not yet handed to the reactor
	arena    []byte    // copies made by write
	sealed   []byte    // sealed records the reactor is writing
	respBody int64     // body bytes of the current response sent in userspace

	promoted      bool // the kernel owns transmission
	promoting     bool // a promotion is queued in the reactor
	promoteFailed bool
	kernelRecords uint64 // records the kernel has sealed, estimated
	plainSent     int64
	closing       bool // close_notify queued: nothing more goes out
}

// outPart is a piece of output waiting for the pump: memory, a file range,
// or a marker (start of a response, close_notify, a KeyUpdate to send).
type outPart struct {
	mem        []byte
	fd         int
	off, n     int64
	file       bool
	start      bool
	closeAfter bool
	keyUpdate  bool
	src        reactor.Source // output made on demand (HTTP/2 frames), sealed by the source itself
	promote    bool           // hand transmission to the kernel here
}

func newTLSHandler(h1 *h1Handler) *tlsHandler {
	return &tlsHandler{h1: h1, srv: h1.srv, loop: h1.loop}
}

func (th *tlsHandler) Open(c *reactor.Conn) {
	t := &tlsConn{th: th, c: c}
	t.h1Conn.s = t
	c.State = t
	// The header timeout covers the handshake as well.
	c.SetReadDeadline(th.srv.cfg.Limits.HeaderTimeout.D())
}

func (th *tlsHandler) Closed(c *reactor.Conn) {
	t := c.State.(*tlsConn)
	if t.hs != nil {
		t.hs.Abort()
		t.hs = nil
	}
	th.h1.closed(c, &t.h1Conn)
	th.putIn(t.in)
	t.in = nil
	c.State = nil
}

func (th *tlsHandler) Tick() { th.h1.Tick() }

// Drain keeps HTTP/2 connections open at shutdown (reactor.Drainer).
func (th *tlsHandler) Drain(c *reactor.Conn) bool { return c.State.(*tlsConn).h1Conn.h2 != nil }

func (th *tlsHandler) Serve(c *reactor.Conn) {
	t := c.State.(*tlsConn)
	if t.phase == phaseHandshake {
		th.handshake(t)
		if t.phase == phaseHandshake {
			return
		}
	}
	if !t.readRecords() {
		return
	}
	if t.sess.ALPN == "h2" && t.h1Conn.h2 == nil {
		t.h1Conn.h2 = th.h1.h2.start(c, t, t)
	}
	th.h1.serve(c, &t.h1Conn)
}

// handshake hands the next whole record to the handshake goroutine when it
// has asked for one, starting the goroutine on the first record.
func (th *tlsHandler) handshake(t *tlsConn) {
	c := t.c
	raw := c.Input()
	n := ktls.RecordLen(raw)
	// Only a record the handshake is waiting for is judged here: one that
	// arrives after the client's Finished, before the handshake goroutine
	// has reported, belongs to the record layer.
	first := t.hs == nil && len(raw) > 0
	if (first || t.wanted) && (n > maxCiphertext || first && raw[0] != ktls.RecordHandshake) {
		// Not TLS (plain HTTP to the TLS port), or a record larger than
		// TLS allows: an alert in the clear, as TLS does before keys.
		th.srv.stats.tlsHandshakeErrors.Add(1)
		th.h1.limiter.log(th.h1.log, "not a TLS handshake; closing", "peer", c.Peer())
		c.Write([]byte{21, 3, 3, 0, 2, 2, alertUnexpectedMessage})
		c.CloseAfterFlush()
		return
	}
	if t.hs == nil && n > 0 {
		peer := net.TCPAddrFromAddrPort(c.Peer())
		t.hs = ktls.StartHandshake(th.srv.tlsConfig, hsIO{t}, &net.TCPAddr{}, peer)
	}
	if t.wanted && n > 0 && len(raw) >= n {
		rec := make([]byte, n)
		copy(rec, raw)
		c.Consume(n)
		t.wanted = false
		t.hs.Feed(rec)
	}
	if c.EOF() && t.phase == phaseHandshake {
		c.Close()
	}
}

// hsIO carries the handshake goroutine's calls to the loop.
type hsIO struct{ t *tlsConn }

func (h hsIO) Want()         { h.t.c.Post(func() { h.t.wanted = true }) }
func (h hsIO) Send(p []byte) { h.t.c.Post(func() { h.t.c.Write(p) }) }
func (h hsIO) Done(s *ktls.Session, err error) {
	h.t.c.Post(func() { h.t.handshakeDone(s, err) })
}

func (t *tlsConn) handshakeDone(s *ktls.Session, err error) {
	th := t.th
	t.hs = nil
	if err != nil {
		// crypto/tls has already queued its alert through Send.
		th.srv.stats.tlsHandshakeErrors.Add(1)
		th.h1.limiter.log(th.h1.log, "TLS handshake failed", "peer", t.c.Peer(), "err", err)
		t.c.CloseAfterFlush()
		return
	}
	th.srv.stats.tlsHandshakes.Add(1)
	t.sess = s
	t.h1Conn.tls = s
	t.writeKeys = s.Write
	if t.open, err = ktls.NewOpener(s.Read, s.ReadSeq); err == nil {
		t.seal, err = ktls.NewSealer(s.Write, s.WriteSeq)
	}
	if err != nil {
		th.h1.log.Error("TLS record layer", "err", err)
		t.c.Close()
		return
	}
	t.phase = phaseOpen
}

// readRecords decrypts whole records from the socket into the plaintext
// buffer while it has room. It returns false when the connection ended.
func (t *tlsConn) readRecords() bool {
	c := t.c
	for {
		raw := c.Input()
		if t.closeNotified {
			c.Consume(len(raw)) // ignored (RFC 8446 §6.1)
			return true
		}
		n := ktls.RecordLen(raw)
		if n > maxCiphertext {
			t.fatal(alertRecordOverflow, "record too large")
			return false
		}
		if n == 0 || len(raw) < n {
			if c.EOF() {
				// The socket ended; without close_notify the client may
				// have been cut off, but there is nothing more to read.
				t.peerDone = true
			}
			return true
		}
		if t.in == nil {
			t.in = t.th.getIn()
		}
		if t.rpos > 0 && len(t.in)-t.wpos < ktls.MaxPlaintext {
			copy(t.in, t.in[t.rpos:t.wpos])
			t.wpos -= t.rpos
			t.rpos = 0
		}
		if len(t.in)-t.wpos < ktls.MaxPlaintext {
			return true // the driver must consume first
		}
		rec, err := t.open.OpenInPlace(raw[:n])
		if err != nil {
			if errors.Is(err, ktls.ErrRecordLimit) {
				t.fatal(alertInternalError, "read key exhausted")
			} else {
				t.fatal(alertBadRecordMAC, err.Error())
			}
			return false
		}
		switch rec.Type {
		case ktls.RecordApplicationData:
			t.wpos += copy(t.in[t.wpos:], rec.Data)
			c.Consume(n)
		case ktls.RecordAlert:
			c.Consume(n)
			if len(rec.Data) == 2 && rec.Data[1] == alertCloseNotify {
				// RFC 8446 §6.1: "Any data received after a closure
				// alert has been received MUST be ignored." What came
				// before it is still answered.
				t.peerDone, t.closeNotified = true, true
				c.Consume(len(c.Input()))
				return true
			}
			t.th.srv.stats.tlsAlertsReceived.Add(1)
			c.Close()
			return false
		case ktls.RecordHandshake:
			msgs := rec.Data
			c.Consume(n)
			if !t.postHandshake(msgs) {
				return false
			}
		default:
			t.fatal(alertUnexpectedMessage, "unexpected record type")
			return false
		}
	}
}

// postHandshake handles handshake messages after the handshake: KeyUpdate
// is honoured; anything else (a ClientHello renegotiating, a ticket from
// the client) is unexpected.
func (t *tlsConn) postHandshake(b []byte) bool {
	for len(b) > 0 {
		if len(b) < 4 {
			t.fatal(alertDecodeError, "truncated handshake message")
			return false
		}
		typ, size := b[0], int(b[1])<<16|int(b[2])<<8|int(b[3])
		if len(b) < 4+size {
			t.fatal(alertDecodeError, "handshake message split across records")
			return false
		}
		body := b[4 : 4+size]
		b = b[4+size:]
		const keyUpdate = 24
		if typ != keyUpdate || size != 1 || body[0] > 1 || t.sess.Version != tls.VersionTLS13 {
			t.fatal(alertUnexpectedMessage, "handshake message after the handshake")
			return false
		}
		// RFC 8446 §4.6.3: the sender's key changes after this record.
		next, err := ktls.NextSecret(t.sess.Suite, t.sess.ReadSecret)
		if err == nil {
			var k ktls.Keys
			if k, err = ktls.TrafficKeys(t.sess.Suite, next); err == nil {
				t.open, err = ktls.NewOpener(k, 0)
				t.sess.ReadSecret = next
			}
		}
		if err != nil {
			t.fatal(alertInternalError, err.Error())
			return false
		}
		t.th.srv.stats.tlsKeyUpdates.Add(1)
		if body[0] == 1 { // update_requested: we must update ours too
			t.out = append(t.out, outPart{keyUpdate: true})
		}
	}
	return true
}

// fatal sends an alert, counts the error, logs it (rate-limited) and
// closes after the alert. While the reactor still holds output that seals
// records lazily, an alert sealed now would be out of sequence: the
// connection is reset instead.
func (t *tlsConn) fatal(desc byte, why string) {
	t.th.srv.stats.tlsRecordErrors.Add(1)
	t.th.h1.limiter.log(t.th.h1.log, "TLS error; closing", "peer", t.c.Peer(), "alert", desc, "reason", why)
	t.out = t.out[:0]
	t.closing = true
	if t.c.Pending() {
		t.c.Abort()
		return
	}
	t.sendAlert(desc)
	t.c.CloseAfterFlush()
}

// sendAlert queues a fatal (or close_notify) alert under the current key.
func (t *tlsConn) sendAlert(desc byte) {
	level := byte(2)
	if desc == alertCloseNotify {
		level = 1
	}
	msg := []byte{level, desc}
	if t.promoted {
		t.c.WriteOOB(msg, ktls.RecordTypeOOB(ktls.RecordAlert))
		return
	}
	rec, err := t.seal.Seal(nil, ktls.RecordAlert, msg)
	if err == nil {
		t.c.Write(rec)
	}
}

// The stream the HTTP/1.1 driver sees.

func (t *tlsConn) input() []byte {
	if t.in == nil {
		return nil
	}
	return t.in[t.rpos:t.wpos]
}

func (t *tlsConn) consume(n int) {
	t.rpos += n
	if t.rpos >= t.wpos {
		t.rpos, t.wpos = 0, 0
		// An idle connection keeps no plaintext buffer.
		t.th.putIn(t.in)
		t.in = nil
	}
}

func (t *tlsConn) eof() bool { return t.peerDone }

// startResponse marks where a response begins (promote_after counts body
// bytes per response). A connection whose keys have protected half of what
// they safely can closes after this response (RFC 8446 §5.5).
func (t *tlsConn) startResponse() {
	t.out = append(t.out, outPart{start: true})
	if t.seal != nil && t.seal.Seq()+t.kernelRecords > recordBudget {
		t.h1Conn.closeAfter = true
	}
}

// recordBudget is the records a write key may protect before the
// connection closes: half the 2^24 bound the record layer enforces.
const recordBudget = 1 << 23

func (t *tlsConn) write(p []byte) {
	start := len(t.arena)
	t.arena = append(t.arena, p...)
	t.out = append(t.out, outPart{mem: t.arena[start:len(t.arena):len(t.arena)]})
}

func (t *tlsConn) writeRef(p []byte) {
	if len(p) > 0 {
		t.out = append(t.out, outPart{mem: p})
	}
}

func (t *tlsConn) writeFile(fd int, off, n int64) {
	if n > 0 {
		t.out = append(t.out, outPart{fd: fd, off: off, n: n, file: true})
	}
}

func (t *tlsConn) busy() bool { return len(t.out) > 0 || t.c.Pending() }

// writeFill queues a source that makes and seals its own records (the
// HTTP/2 driver's frames, filled as the socket drains).
func (t *tlsConn) writeFill(src reactor.Source) { t.out = append(t.out, outPart{src: src}) }

// promoteNext hands transmission to the kernel once what is queued is
// written (HTTP/2: after a response passed promote_after).
func (t *tlsConn) promoteNext() { t.out = append(t.out, outPart{promote: true}) }

func (t *tlsConn) closeGracefully() {
	if t.closing {
		return
	}
	t.closing = true
	t.out = append(t.out, outPart{closeAfter: true})
	t.pump()
}

func (t *tlsConn) sent() int64 { return t.plainSent }

// pump moves queued output into the reactor: sealed in userspace, or as
// plaintext for the kernel once it owns transmission. Records are sealed
// in wire order, so nothing is sealed while the reactor still holds a
// source that seals lazily, nor while a promotion is pending.
func (t *tlsConn) pump() {
	if t.phase != phaseOpen {
		return
	}
	c := t.c
	if c.Pending() {
		return
	}
	t.promoting = false
	t.sealed = t.sealed[:0]
	for len(t.out) > 0 {
		p := &t.out[0]
		switch {
		case p.start:
			t.respBody = 0
		case p.keyUpdate:
			if !t.updateWriteKey() {
				return
			}
		case p.src != nil:
			t.flushSealed()
			c.WriteSource(p.src)
			t.out = t.out[1:]
			t.compactOut()
			return // the source seals as the socket drains
		case p.promote:
			t.flushSealed()
			if t.canPromote() {
				t.out = t.out[1:]
				t.promoting = true
				c.Control(t.promote)
				return
			}
		case p.closeAfter:
			t.flushSealed()
			t.sendAlert(alertCloseNotify)
			c.CloseAfterFlush()
			t.out = t.out[:0]
			return
		case p.mem != nil && t.promoted:
			c.WriteRef(p.mem)
			t.kernelSent(int64(len(p.mem)))
		case p.mem != nil:
			if !t.sealMem(p.mem) {
				return
			}
		case p.file && t.promoted:
			t.flushSealed()
			c.SendFile(p.fd, p.off, p.n)
			t.kernelSent(p.n)
		case p.file:
			t.flushSealed()
			if t.canPromote() && t.respBody+p.n > t.promoteAfter() {
				// Seal up to promote_after in userspace, then hand the
				// socket to the kernel; the rest waits for that.
				k := max(t.promoteAfter()-t.respBody, 0)
				if k > 0 {
					t.sealFile(p.fd, p.off, k)
					p.off += k
					p.n -= k
				}
				t.promoting = true
				c.Control(t.promote)
				return
			}
			t.sealFile(p.fd, p.off, p.n)
			t.out = t.out[1:]
			t.compactOut()
			return // the source seals as the socket drains; wait for it
		}
		t.out = t.out[1:]
	}
	t.flushSealed()
	t.compactOut()
}

func (t *tlsConn) compactOut() {
	if len(t.out) == 0 {
		t.out = t.out[:0:cap(t.out)]
		t.arena = t.arena[:0]
		if cap(t.arena) > 64<<10 {
			t.arena = nil
		}
	}
}

// sealMem seals p into records (at most 16 KiB each) appended to the
// pending sealed buffer.
func (t *tlsConn) sealMem(p []byte) bool {
	for len(p) > 0 {
		n := min(len(p), ktls.MaxPlaintext)
		var err error
		t.sealed, err = t.seal.Seal(t.sealed, ktls.RecordApplicationData, p[:n])
		if err != nil {
			t.fatal(alertInternalError, err.Error())
			return false
		}
		t.userSent(int64(n))
		p = p[n:]
	}
	return true
}

// flushSealed hands the sealed records to the reactor. The buffer is
// reused once the reactor is done with it (pump runs only then).
func (t *tlsConn) flushSealed() {
	if len(t.sealed) > 0 {
		t.c.WriteRef(t.sealed)
		t.sealed = t.sealed[len(t.sealed):]
	}
}

// sealFile queues a source that preads and seals n bytes of fd from off.
func (t *tlsConn) sealFile(fd int, off, n int64) {
	buf := t.th.getSealBuf(ktls.BatchSize(t.seal))
	first := t.respBody == 0
	t.c.WriteSource(ktls.NewFileSealer(t.seal, fd, off, n, buf, first, t.th.putSealBuf))
	t.respBody += n
	t.userSent(n)
}

func (t *tlsConn) userSent(n int64) {
	t.plainSent += n
	t.th.srv.stats.tlsUserBytes.Add(n)
}

func (t *tlsConn) kernelSent(n int64) {
	t.plainSent += n
	t.kernelRecords += uint64((n + ktls.MaxPlaintext - 1) / ktls.MaxPlaintext)
	t.th.srv.stats.tlsKernelBytes.Add(n)
}

func (t *tlsConn) promoteAfter() int64 { return int64(*t.th.srv.cfg.Kernel.PromoteAfter) }

// canPromote: kernel TLS works here, this connection has not failed to
// promote, and it speaks TLS 1.3 (1.2 connections stay in userspace).
func (t *tlsConn) canPromote() bool {
	return t.th.srv.ktlsOK && !t.promoteFailed && !t.promoted && t.sess.Version == tls.VersionTLS13
}

// promote hands transmission to the kernel, between two records: it runs
// once every record sealed so far is on the socket. A failure is not the
// connection's end: it goes on in userspace.
func (t *tlsConn) promote(fd int) error {
	err := ktls.EnableULP(fd)
	if err == nil {
		err = ktls.SetTX(fd, t.writeKeys, t.seal.Seq())
	}
	if err != nil {
		t.promoteFailed = true
		t.th.srv.stats.tlsPromoteFailures.Add(1)
		if !t.th.warned {
			t.th.warned = true
			t.th.h1.log.Warn("promotion to kernel TLS failed; this connection stays in userspace (logged once per loop)", "err", err)
		}
		return nil
	}
	t.promoted = true
	t.kernelRecords = 0
	t.th.srv.stats.tlsPromotions.Add(1)
	return nil
}

// updateWriteKey answers a KeyUpdate that requested ours: a KeyUpdate
// record under the old key, then the new key. In the kernel that takes a
// rekey (Linux 6.14); without it the connection closes cleanly instead.
func (t *tlsConn) updateWriteKey() bool {
	next, err := ktls.NextSecret(t.sess.Suite, t.sess.WriteSecret)
	var k ktls.Keys
	if err == nil {
		k, err = ktls.TrafficKeys(t.sess.Suite, next)
	}
	if err != nil {
		t.fatal(alertInternalError, err.Error())
		return false
	}
	msg := []byte{24, 0, 0, 1, 0} // KeyUpdate(update_not_requested)
	if t.promoted {
		if !t.th.srv.ktlsRekey {
			// Finish what is queued, then close_notify: the client sees a
			// clean end after complete responses.
			t.th.h1.limiter.log(t.th.h1.log, "client asked for a KeyUpdate this kernel cannot do; closing cleanly", "peer", t.c.Peer())
			t.h1Conn.closeAfter = true
			if !t.closing {
				t.closing = true
				t.out = append(t.out, outPart{closeAfter: true})
			}
			return true
		}
		t.c.WriteOOB(msg, ktls.RecordTypeOOB(ktls.RecordHandshake))
		t.c.Control(func(fd int) error { return ktls.SetTX(fd, k, 0) })
	} else {
		if t.sealed, err = t.seal.Seal(t.sealed, ktls.RecordHandshake, msg); err != nil {
			t.fatal(alertInternalError, err.Error())
			return false
		}
		t.flushSealed()
		if t.seal, err = ktls.NewSealer(k, 0); err != nil {
			t.fatal(alertInternalError, err.Error())
			return false
		}
	}
	t.sess.WriteSecret = next
	t.writeKeys = k
	return true
}

func (th *tlsHandler) getIn() []byte {
	if n := len(th.inBufs); n > 0 {
		b := th.inBufs[n-1]
		th.inBufs = th.inBufs[:n-1]
		return b
	}
	return make([]byte, int(th.srv.cfg.Limits.MaxHeaderBytes)+2*ktls.MaxPlaintext)
}

func (th *tlsHandler) putIn(b []byte) {
	if b != nil && len(th.inBufs) < maxFreeTLSBufs {
		th.inBufs = append(th.inBufs, b)
	}
}

func (th *tlsHandler) getSealBuf(size int) []byte {
	if n := len(th.sealBufs); n > 0 {
		b := th.sealBufs[n-1]
		th.sealBufs = th.sealBufs[:n-1]
		if cap(b) >= size {
			return b[:0]
		}
	}
	return make([]byte, 0, size)
}

func (th *tlsHandler) putSealBuf(b []byte) {
	if len(th.sealBufs) < maxFreeTLSBufs {
		th.sealBufs = append(th.sealBufs, b[:0])
	}
}

// maxFreeTLSBufs bounds the idle buffers a loop keeps.
const maxFreeTLSBufs = 64
