package wt

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// Session is one WebTransport session: the CONNECT stream that opened it
// and the streams and datagrams bound to it.
type Session struct {
	// Immutable after newSession.
	srv     *Server
	conn    *quic.Conn
	connect *http3.Stream // the CONNECT stream, taken over from quic-go
	id      quic.StreamID
	req     *http.Request
	start   time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	bidi    chan *Stream        // client bidirectional streams not yet accepted
	uni     chan *ReceiveStream // client unidirectional streams not yet accepted
	addr    netip.Prefix        // the client address's share it counts against (set by Accept)

	in, out  atomic.Int64 // payload bytes from and to the client
	capsules atomic.Int64 // bytes read from the CONNECT stream
	lastMove atomic.Int64 // when a byte last moved, ns since start
	// Set by newSession before it closes ready. The two callbacks, on
	// goroutines of their own, wait for ready before they read them.
	idle    *time.Timer   // checks lastMove every IdleTimeout
	unwatch func() bool   // stops the connection-close callback
	ready   chan struct{} // closed once idle and unwatch are set

	wmu sync.Mutex // serializes capsule writes on connect

	mu      sync.Mutex              // guards the fields below
	streams map[streamResetter]bool // every open stream, to reset at the end
	opened  int                     // client streams open now
	ended   *SessionError           // how it ended; nil while open
	drained bool                    // DRAIN sent
}

// streamResetter is a stream the session resets when it ends.
type streamResetter interface{ reset(quic.StreamErrorCode) }

func newSession(s *Server, conn *quic.Conn, str *http3.Stream, r *http.Request) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	ss := &Session{
		srv: s, conn: conn, connect: str, id: str.StreamID(), req: r,
		start: time.Now(), ctx: ctx, cancel: cancel,
		bidi:    make(chan *Stream, s.cfg.MaxStreamsPerSession),
		uni:     make(chan *ReceiveStream, s.cfg.MaxStreamsPerSession),
		streams: map[streamResetter]bool{}, ready: make(chan struct{}),
	}
	ss.idle = time.AfterFunc(s.cfg.IdleTimeout, ss.checkIdle)
	ss.unwatch = context.AfterFunc(conn.Context(), func() {
		<-ss.ready
		ss.end(0, "connection closed", true, true)
	})
	close(ss.ready)
	return ss
}

// ID returns the session ID (the CONNECT stream's ID).
func (ss *Session) ID() quic.StreamID { return ss.id }

// Request returns the CONNECT request that opened the session.
func (ss *Session) Request() *http.Request { return ss.req }

// Context is canceled when the session ends.
func (ss *Session) Context() context.Context { return ss.ctx }

// Bytes returns the payload bytes received from and sent to the client.
func (ss *Session) Bytes() (in, out int64) { return ss.in.Load(), ss.out.Load() }

// Err returns how the session ended, or nil while it is open.
func (ss *Session) Err() *SessionError {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ended
}

// Close ends the session with code and msg (a CLOSE_WEBTRANSPORT_SESSION
// capsule) and resets its streams.
func (ss *Session) Close(code uint32, msg string) { ss.end(code, msg, false, false) }

// Wait blocks until the session has ended.
func (ss *Session) Wait() { <-ss.ctx.Done() }

// allow cuts b to what MaxBytesPerSession leaves the session to send, and
// reports whether it cut.
func (ss *Session) allow(b []byte) ([]byte, bool) {
	left := ss.srv.cfg.MaxBytesPerSession - ss.in.Load() - ss.out.Load()
	if int64(len(b)) <= left {
		return b, false
	}
	return b[:max(left, 0)], true
}

// write sends b on a stream of the session, cut to what
// MaxBytesPerSession leaves; the write that reaches the limit ends the
// session, and returns how it ended.
func (ss *Session) write(w io.Writer, b []byte) (int, error) {
	b, limited := ss.allow(b)
	n, err := w.Write(b)
	ss.moved(n, false)
	if err == nil && limited {
		ss.end(CodeByteLimit, "max_bytes_per_session reached", false, false)
		err = ss.Err()
	}
	return n, err
}

// maxCapsuleBytes bounds what a client may send on a session's CONNECT
// stream: capsules are control, not payload, and do not count against
// MaxBytesPerSession.
const maxCapsuleBytes = 64 << 10

// capsuleBytes accounts n bytes read from the CONNECT stream.
func (ss *Session) capsuleBytes(n int) {
	if n <= 0 {
		return
	}
	ss.lastMove.Store(int64(time.Since(ss.start)))
	if ss.capsules.Add(int64(n)) > maxCapsuleBytes {
		ss.end(CodeBadCapsule, "more than 64 KiB of capsules", false, false)
	}
}

// moved accounts n payload bytes and enforces MaxBytesPerSession.
func (ss *Session) moved(n int, in bool) {
	if n <= 0 {
		return
	}
	ss.lastMove.Store(int64(time.Since(ss.start)))
	var total int64
	if in {
		ss.srv.stat.BytesIn.Add(int64(n))
		total = ss.in.Add(int64(n)) + ss.out.Load()
	} else {
		ss.srv.stat.BytesOut.Add(int64(n))
		total = ss.out.Add(int64(n)) + ss.in.Load()
	}
	if total > ss.srv.cfg.MaxBytesPerSession {
		ss.end(CodeByteLimit, "max_bytes_per_session reached", false, false)
	}
}

// checkIdle runs every IdleTimeout: a session whose last byte moved that
// long ago ends.
func (ss *Session) checkIdle() {
	<-ss.ready
	idle := ss.srv.cfg.IdleTimeout
	since := time.Since(ss.start) - time.Duration(ss.lastMove.Load())
	if since >= idle {
		ss.end(CodeIdle, "idle_timeout: nothing moved for "+idle.String(), false, false)
		return
	}
	ss.idle.Reset(idle - since)
}

// track adds a stream to those reset at the end; false if the session
// has ended (the caller resets it).
func (ss *Session) track(st streamResetter, client bool) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended != nil {
		return false
	}
	ss.streams[st] = client
	if client {
		ss.opened++
	}
	return true
}

// untrack forgets a stream that is done both ways.
func (ss *Session) untrack(st streamResetter) {
	ss.mu.Lock()
	if client, ok := ss.streams[st]; ok {
		delete(ss.streams, st)
		if client {
			ss.opened--
		}
	}
	ss.mu.Unlock()
}

// admit checks MaxStreamsPerSession for one more client stream and
// tracks it; over the limit the session ends.
func (ss *Session) admit(st streamResetter) bool {
	ss.mu.Lock()
	over := ss.opened >= ss.srv.cfg.MaxStreamsPerSession
	ss.mu.Unlock()
	if over {
		st.reset(errSessionGone)
		ss.end(CodeTooManyStreams, "max_streams_per_session exceeded", false, false)
		return false
	}
	if !ss.track(st, true) {
		st.reset(errSessionGone)
		return false
	}
	ss.srv.stat.Streams.Add(1)
	return true
}

func (ss *Session) addStream(q *quic.Stream) {
	st := &Stream{ss: ss, q: q}
	if ss.admit(st) {
		ss.bidi <- st // room: at most MaxStreamsPerSession are open
	}
}

func (ss *Session) addUniStream(q *quic.ReceiveStream) {
	st := &ReceiveStream{ss: ss, q: q}
	if ss.admit(st) {
		ss.uni <- st
	}
}

// AcceptStream returns the next bidirectional stream the client opened.
func (ss *Session) AcceptStream(ctx context.Context) (*Stream, error) {
	select {
	case st := <-ss.bidi:
		return st, nil
	case <-ss.ctx.Done():
		return nil, ss.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// AcceptUniStream returns the next unidirectional stream the client
// opened.
func (ss *Session) AcceptUniStream(ctx context.Context) (*ReceiveStream, error) {
	select {
	case st := <-ss.uni:
		return st, nil
	case <-ss.ctx.Done():
		return nil, ss.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// OpenUniStream opens a server unidirectional stream bound to the
// session, waiting for QUIC stream credit until ctx or the session ends.
func (ss *Session) OpenUniStream(ctx context.Context) (*SendStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ss.ctx, cancel)
	defer stop()
	q, err := ss.conn.OpenUniStreamSync(ctx)
	if err != nil {
		if e := ss.Err(); e != nil {
			return nil, e
		}
		return nil, err
	}
	st := &SendStream{ss: ss, q: q}
	if !ss.track(st, false) {
		st.reset(errSessionGone)
		return nil, ss.Err()
	}
	var hdr [16]byte
	b := quicvarint.Append(hdr[:0], UniType)
	b = quicvarint.Append(b, uint64(ss.id))
	if _, err := q.Write(b); err != nil {
		st.reset(errSessionGone)
		ss.untrack(st)
		return nil, err
	}
	// A reset from here on still delivers the header (RESET_STREAM_AT),
	// so the client knows which session the stream belonged to.
	q.SetReliableBoundary()
	return st, nil
}

// SendDatagram sends b as one HTTP datagram of the session. It returns
// *quic.DatagramTooLargeError when the path cannot carry it; one that
// MaxBytesPerSession has no room for ends the session instead.
func (ss *Session) SendDatagram(b []byte) error {
	if _, limited := ss.allow(b); limited {
		ss.end(CodeByteLimit, "max_bytes_per_session reached", false, false)
		return ss.Err()
	}
	if err := ss.connect.SendDatagram(b); err != nil {
		return err
	}
	ss.srv.stat.DatagramsOut.Add(1)
	ss.moved(len(b), false)
	return nil
}

// ReceiveDatagram returns the next datagram of the session. One larger
// than MaxDatagramBytes ends the session.
func (ss *Session) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ss.ctx, cancel)
	defer stop()
	b, err := ss.connect.ReceiveDatagram(ctx)
	if err != nil {
		if e := ss.Err(); e != nil {
			return nil, e
		}
		return nil, err
	}
	ss.srv.stat.DatagramsIn.Add(1)
	if len(b) > ss.srv.cfg.MaxDatagramBytes {
		ss.end(CodeDatagramTooLarge, "datagram larger than max_datagram_bytes", false, false)
		return nil, ss.Err()
	}
	ss.moved(len(b), true)
	return b, nil
}

// readCapsules reads the CONNECT stream until the session ends: a CLOSE
// capsule or the client's FIN ends it cleanly, a reset abruptly.
func (ss *Session) readCapsules() {
	p := http3.NewCapsuleParser(countingReader{ss})
	for {
		typ, cr, err := p.Next()
		if err != nil {
			switch {
			case ss.Err() != nil:
			case errors.Is(err, io.EOF):
				// §6: a FIN without a capsule is a close with code 0.
				ss.end(CodeDone, "", true, false)
			default:
				ss.end(0, "CONNECT stream reset: "+err.Error(), true, true)
			}
			return
		}
		switch typ {
		case capsuleClose:
			var code [4]byte
			if _, err := io.ReadFull(cr, code[:]); err != nil {
				ss.end(CodeBadCapsule, "malformed CLOSE_WEBTRANSPORT_SESSION capsule", false, false)
				return
			}
			msg, err := io.ReadAll(io.LimitReader(cr, maxCloseMessage+1))
			if err != nil || len(msg) > maxCloseMessage {
				ss.end(CodeBadCapsule, "CLOSE_WEBTRANSPORT_SESSION message over 1024 bytes", false, false)
				return
			}
			ss.end(binary.BigEndian.Uint32(code[:]), string(msg), true, false)
			return
		default:
			// DRAIN from a client asks nothing of a server; unknown
			// capsules are skipped (RFC 9297 §3.2). Their bytes count
			// against the session's limit as they are read.
			if _, err := io.Copy(io.Discard, cr); err != nil {
				continue // Next reports the stream's error
			}
		}
	}
}

// countingReader reads the CONNECT stream, accounting its bytes.
type countingReader struct{ ss *Session }

func (r countingReader) Read(b []byte) (int, error) {
	n, err := r.ss.connect.Read(b)
	r.ss.capsuleBytes(n)
	return n, err
}

// sendDrain sends DRAIN_WEBTRANSPORT_SESSION once.
func (ss *Session) sendDrain() {
	ss.mu.Lock()
	done := ss.ended != nil || ss.drained
	ss.drained = true
	ss.mu.Unlock()
	if done {
		return
	}
	ss.writeCapsule(appendDrain(nil), false)
}

// writeCapsule writes b on the CONNECT stream, bounded by a deadline so a
// client that reads nothing cannot hold the writer; fin closes the send
// side after it.
func (ss *Session) writeCapsule(b []byte, fin bool) {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	ss.connect.SetWriteDeadline(time.Now().Add(time.Second))
	ss.connect.Write(b)
	if fin {
		ss.connect.Close()
	}
}

// end ends the session once: remote says the client closed it (its
// capsule, its FIN, or abruptly its reset or the connection), otherwise
// the server sends CLOSE_WEBTRANSPORT_SESSION with code and msg. Every
// stream of the session is reset with WT_SESSION_GONE.
func (ss *Session) end(code uint32, msg string, remote, abrupt bool) {
	ss.mu.Lock()
	if ss.ended != nil {
		ss.mu.Unlock()
		return
	}
	ss.ended = &SessionError{Code: code, Message: msg, Remote: remote, Abrupt: abrupt}
	streams := ss.streams
	ss.streams = nil
	ss.mu.Unlock()

	ss.idle.Stop()
	ss.unwatch() // a connection outliving many sessions holds none of them
	ss.cancel()
	for st := range streams {
		st.reset(errSessionGone)
	}
	switch {
	case abrupt:
		ss.connect.CancelRead(errSessionGone)
		ss.connect.CancelWrite(errSessionGone)
	case remote:
		ss.writeCapsule(nil, true) // our FIN answers theirs
		ss.connect.CancelRead(quic.StreamErrorCode(http3.ErrCodeNoError))
	default:
		ss.writeCapsule(appendClose(nil, code, msg), true)
		// Give the client a moment to answer with its FIN before the
		// read side is closed under it.
		time.AfterFunc(time.Second, func() { ss.connect.CancelRead(quic.StreamErrorCode(http3.ErrCodeNoError)) })
	}
	ss.srv.unregister(ss)
	ss.srv.open.Add(-1)
	ss.srv.leaveAddr(ss.addr)
	st := &ss.srv.stat
	switch {
	case abrupt:
		st.ClosedAbruptly.Add(1)
	case remote:
		st.ClosedByClient.Add(1)
	default:
		st.closedBy(code)
	}
	in, out := ss.Bytes()
	level := slogLevel(code, remote)
	ss.srv.log.Log(context.Background(), level, "webtransport session ended",
		"session", uint64(ss.id), "client", ss.conn.RemoteAddr().String(), "by", ss.ended.side(),
		"code", code, "reason", msg, "bytes_in", in, "bytes_out", out,
		"duration", time.Since(ss.start).Round(time.Millisecond).String())
}
