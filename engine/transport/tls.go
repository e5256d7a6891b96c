package transport

import (
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/ktls"
)

// maxEmptyRecords bounds a run of records without application data.
const maxEmptyRecords = 32

// maxCiphertext bounds a record on the wire (RFC 8446 §5.2: 2^14 + 256).
const maxCiphertext = 5 + ktls.MaxPlaintext + 256

type tlsPhase uint8

const (
	phaseHandshake tlsPhase = iota
	phaseOpen
)

// tlsState is a TLS stream's record layer. Owned by the loop goroutine.
type tlsState struct {
	// The handshake.
	phase  tlsPhase
	hs     *ktls.Handshake
	wanted bool // the handshake asked for a record
	sess   *ktls.Session

	// Input.
	open          *ktls.Opener
	in            []byte // decrypted input; nil when empty
	rpos, wpos    int
	peerDone      bool // close_notify received, or the socket's EOF
	closeNotified bool // close_notify received: later records are ignored
	empty         int  // records in a row that carried no application data

	// Output.
	seal      *ktls.Sealer
	writeKeys ktls.Keys // the key the kernel gets on promotion
	queue     []part    // output not yet handed to the reactor
	arena     []byte    // copies made by Write
	out       sealSource
	sealing   bool // out is queued in the reactor

	wantPromote   bool // a response passed promote_after: promote at the next record boundary
	promoted      bool // the kernel owns transmission
	promoteFailed bool
	retire        bool   // end the connection after the responses in progress
	kernelRecords uint64 // records the kernel has sealed, estimated
}

// part is a piece of queued output: memory (copied or a Mem body), a
// body range, or a mark.
type part struct {
	mem    []byte
	resp   *Response // the response a body belongs to
	body   Body
	off, n int64
	mark   mark
}

type mark uint8

const (
	markNone      mark = iota
	markClose          // close_notify, then close after the queued output
	markKeyUpdate      // answer the client's KeyUpdate with ours
)

func (s *Stream) advanceTLS() bool {
	t := s.tls
	if t.phase == phaseHandshake {
		s.handshake()
		if t.phase == phaseHandshake {
			return !s.c.Closed() // Ready says when it is done
		}
	}
	return s.readRecords()
}

// handshake hands the next whole record to the handshake goroutine when it
// has asked for one, starting the goroutine on the first record.
func (s *Stream) handshake() {
	t, c, env := s.tls, s.c, s.env
	raw := c.Input()
	n := ktls.RecordLen(raw)
	// Only a record the handshake is waiting for is judged here: one that
	// arrives after the client's Finished, before the handshake goroutine
	// has reported, belongs to the record layer.
	first := t.hs == nil && len(raw) > 0
	if (first || t.wanted) && (n > maxCiphertext || first && raw[0] != ktls.RecordHandshake) {
		// Not TLS (plain HTTP to the TLS port), or a record larger than
		// TLS allows: an alert in the clear, as TLS does before keys.
		env.Stats.HandshakeErrors.Add(1)
		env.Note("not a TLS handshake; closing", "peer", c.Peer())
		c.Write(ktls.ClearAlert(ktls.AlertUnexpectedMessage))
		c.CloseAfterFlush()
		return
	}
	switch {
	case n == 0 || len(raw) < n:
		// Wait for the whole record.
	case t.hs == nil:
		// The first record starts the handshake: it needs no Want.
		peer := net.TCPAddrFromAddrPort(c.Peer())
		t.hs = ktls.StartAwaited(env.TLS, hsIO{s}, &net.TCPAddr{}, peer, takeRecord(c, n))
		s.awaitStep()
	case t.wanted:
		t.wanted = false
		t.hs.Feed(takeRecord(c, n))
		s.awaitStep()
	}
	if c.EOF() && t.phase == phaseHandshake {
		c.Close()
	}
}

// awaitStep lets the handshake step just begun run to its end while the
// loop waits, on the loop's thread, when the loop can spare the time: a
// handshake's steps are CPU work of a few hundred microseconds, and handing
// each to another thread and back cost 13 context switches per new
// connection against nginx's 2 (which does the whole handshake inline).
// The loop waits at most stepAwait for a step (one that waits on
// something else, a certificate being obtained, carries on without it)
// and spends at most awaitShare of any awaitWindow waiting, so a flood of
// handshakes cannot hold up the connections the loop already serves;
// past that, steps end through a Post, as a handshake that is not awaited
// does.
func (s *Stream) awaitStep() {
	t, env := s.tls, s.env
	now := time.Now()
	if now.Sub(env.awaitFrom) >= awaitWindow {
		env.awaitFrom, env.awaited = now, 0
	}
	var timer *time.Timer
	if env.awaited < awaitShare {
		if env.stepTimer == nil {
			env.stepTimer = time.NewTimer(stepAwait)
		} else {
			env.stepTimer.Reset(stepAwait)
		}
		timer = env.stepTimer
	}
	step, ok := t.hs.Await(timer)
	if timer != nil {
		timer.Stop()
		env.awaited += time.Since(now)
	}
	if !ok {
		s.c.Loop().HandedOff()
		return
	}
	s.stepEnded(step)
}

// stepEnded sends a handshake step's output and takes what comes next:
// the client's next record, or the record layer. A step ends here
// whether it was awaited or came through hsIO's Post.
func (s *Stream) stepEnded(step ktls.Step) {
	s.c.WriteRef(step.Out)
	if step.Done {
		s.handshakeDone(step.Session, step.Err)
		return
	}
	s.tls.wanted = true
}

const (
	stepAwait   = time.Millisecond
	awaitWindow = 10 * time.Millisecond
	awaitShare  = 4 * time.Millisecond
)

// takeRecord copies the first n bytes of input, a whole record, and
// consumes them.
func takeRecord(c *reactor.Conn, n int) []byte {
	rec := make([]byte, n)
	copy(rec, c.Input())
	c.Consume(n)
	return rec
}

// hsIO carries the handshake goroutine's calls to the loop: one Post per
// flight (its output and what comes next together).
type hsIO struct{ s *Stream }

func (h hsIO) Want(out []byte) {
	h.s.c.Post(func() { h.s.stepEnded(ktls.Step{Out: out}) })
}

func (h hsIO) Done(out []byte, sess *ktls.Session, err error) {
	h.s.c.Post(func() { h.s.stepEnded(ktls.Step{Out: out, Done: true, Session: sess, Err: err}) })
}

// errUnservedName is logged for a handshake refused because no
// certificate answers the name the client asked for (or for no name).
var errUnservedName = errors.New("no site or route serves the server name the client asked for (SNI), and none takes unknown names; alert unrecognized_name sent")

func (s *Stream) handshakeDone(sess *ktls.Session, err error) {
	t, env := s.tls, s.env
	t.hs = nil
	if err != nil {
		// crypto/tls has already queued its alert through Send.
		env.Stats.HandshakeErrors.Add(1)
		if err.Error() == "tls: no certificates configured" {
			// crypto/tls's words when GetCertificate has none for the
			// name: the alert it sent was unrecognized_name.
			err = errUnservedName
		}
		env.Note("TLS handshake failed", "peer", s.c.Peer(), "err", err)
		s.c.CloseAfterFlush()
		return
	}
	env.Stats.Handshakes.Add(1)
	if sess.Resumed {
		env.Stats.Resumed.Add(1)
	}
	t.sess = sess
	t.writeKeys = sess.Write
	if t.open, err = ktls.NewOpener(sess.Read, sess.ReadSeq); err == nil {
		t.seal, err = ktls.NewSealer(sess.Write, sess.WriteSeq)
	}
	if err != nil {
		env.Log.Error("TLS record layer", "err", err)
		s.c.Close()
		return
	}
	t.phase = phaseOpen
}

// readRecords decrypts whole records from the socket into the plaintext
// buffer while it has room. It returns false when the connection ended.
func (s *Stream) readRecords() bool {
	t, c := s.tls, s.c
	for {
		raw := c.Input()
		if t.closeNotified {
			c.Consume(len(raw)) // ignored (RFC 8446 §6.1)
			return true
		}
		n := ktls.RecordLen(raw)
		if n > maxCiphertext {
			s.fatal(ktls.AlertRecordOverflow, "record too large")
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
			t.in = s.env.getIn()
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
			switch {
			case errors.Is(err, ktls.ErrRecordLimit):
				s.fatal(ktls.AlertInternalError, "read key exhausted")
			case errors.Is(err, ktls.ErrRecordOverflow):
				s.fatal(ktls.AlertRecordOverflow, err.Error())
			case errors.Is(err, ktls.ErrUnexpectedRecord):
				s.fatal(ktls.AlertUnexpectedMessage, err.Error())
			default:
				s.fatal(ktls.AlertBadRecordMAC, err.Error())
			}
			return false
		}
		// Records that carry nothing (empty application data, KeyUpdates)
		// cost the peer little and us a decryption each: a run of them
		// longer than any client sends ends the connection, as OpenSSL
		// (32) and crypto/tls (16) do.
		if rec.Type == ktls.RecordApplicationData && len(rec.Data) > 0 {
			t.empty = 0
		} else if t.empty++; t.empty > maxEmptyRecords {
			s.fatal(ktls.AlertUnexpectedMessage, "too many records without application data")
			return false
		}
		switch rec.Type {
		case ktls.RecordApplicationData:
			t.wpos += copy(t.in[t.wpos:], rec.Data)
			c.Consume(n)
		case ktls.RecordAlert:
			c.Consume(n)
			if len(rec.Data) != 2 {
				// RFC 8446 §5.1: a record of type alert holds exactly
				// one alert message.
				s.fatal(ktls.AlertDecodeError, "alert record of the wrong length")
				return false
			}
			if rec.Data[1] == ktls.AlertCloseNotify {
				// RFC 8446 §6.1: "Any data received after a closure
				// alert has been received MUST be ignored." What came
				// before it is still answered.
				t.peerDone, t.closeNotified = true, true
				c.Consume(len(c.Input()))
				return true
			}
			s.env.Stats.AlertsReceived.Add(1)
			c.Close()
			return false
		case ktls.RecordHandshake:
			msgs := rec.Data
			c.Consume(n)
			if len(msgs) == 0 {
				// RFC 8446 §5.1: "Implementations MUST NOT send
				// zero-length fragments of Handshake types."
				s.fatal(ktls.AlertUnexpectedMessage, "empty handshake record")
				return false
			}
			if !s.postHandshake(msgs) {
				return false
			}
		default:
			s.fatal(ktls.AlertUnexpectedMessage, "unexpected record type")
			return false
		}
	}
}

// postHandshake handles handshake messages after the handshake: KeyUpdate
// is honoured; anything else (a ClientHello renegotiating, a ticket from
// the client) is unexpected.
func (s *Stream) postHandshake(b []byte) bool {
	t := s.tls
	for len(b) > 0 {
		if len(b) < 4 {
			s.fatal(ktls.AlertDecodeError, "truncated handshake message")
			return false
		}
		typ, size := b[0], int(b[1])<<16|int(b[2])<<8|int(b[3])
		if len(b) < 4+size {
			s.fatal(ktls.AlertDecodeError, "handshake message split across records")
			return false
		}
		body := b[4 : 4+size]
		b = b[4+size:]
		const keyUpdate = 24
		if typ != keyUpdate || size != 1 || body[0] > 1 || t.sess.Version != tls.VersionTLS13 {
			s.fatal(ktls.AlertUnexpectedMessage, "handshake message after the handshake")
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
			s.fatal(ktls.AlertInternalError, err.Error())
			return false
		}
		s.env.Stats.KeyUpdates.Add(1)
		if body[0] == 1 { // update_requested: we must update ours too
			t.queue = append(t.queue, part{mark: markKeyUpdate})
		}
		if len(b) > 0 {
			// RFC 8446 §5.1: a KeyUpdate must end its record, since the
			// bytes after it are under the new key.
			s.fatal(ktls.AlertUnexpectedMessage, "KeyUpdate not at the end of its record")
			return false
		}
	}
	return true
}

// fatal sends an alert, counts the error, logs it (rate-limited) and
// closes after the alert. While the reactor still holds output that seals
// records lazily, an alert sealed now would be out of sequence: the
// connection is reset instead.
func (s *Stream) fatal(desc byte, why string) {
	t := s.tls
	s.env.Stats.RecordErrors.Add(1)
	s.env.Note("TLS error; closing", "peer", s.c.Peer(), "alert", desc, "reason", why)
	t.queue = t.queue[:0]
	s.closing = true
	s.prod = nil
	if s.c.Pending() {
		s.c.Abort()
		return
	}
	s.sendAlert(desc)
	s.c.CloseAfterFlush()
}

// sendAlert queues a fatal (or close_notify) alert under the current key.
func (s *Stream) sendAlert(desc byte) {
	t := s.tls
	level := byte(2)
	if desc == ktls.AlertCloseNotify {
		level = 1
	}
	msg := []byte{level, desc}
	if t.promoted {
		s.c.WriteOOB(msg, ktls.RecordTypeOOB(ktls.RecordAlert))
		return
	}
	rec, err := t.seal.Seal(nil, ktls.RecordAlert, msg)
	if err == nil {
		s.c.Write(rec)
	}
}

func (t *tlsState) input() []byte {
	if t.in == nil {
		return nil
	}
	return t.in[t.rpos:t.wpos]
}

func (t *tlsState) consume(env *Env, n int) {
	t.rpos += n
	if t.rpos >= t.wpos {
		t.rpos, t.wpos = 0, 0
		// An idle connection keeps no plaintext buffer.
		env.putIn(t.in)
		t.in = nil
	}
}

// write queues a copy of p for sealing.
func (t *tlsState) write(p []byte) {
	start := len(t.arena)
	t.arena = append(t.arena, p...)
	t.queue = append(t.queue, part{mem: t.arena[start:len(t.arena):len(t.arena)]})
}
