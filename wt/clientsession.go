package wt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// ClientSession is one WebTransport session a client opened. Its methods
// are safe for concurrent use.
type ClientSession struct {
	// Immutable after Dial.
	conn    *ClientConn
	str     *http3.RequestStream
	id      uint64
	ownConn bool // Dial made the connection for this session: closed with it

	// The doors from the connection's accept loops to Accept*.
	uni  chan *quic.ReceiveStream
	bidi chan *quic.Stream

	drainOnce  sync.Once
	drain      chan struct{} // closed on DRAIN_WEBTRANSPORT_SESSION
	done       chan struct{} // closed once end is set
	readerDone chan struct{} // closed when readCapsules returns

	sendMu     sync.Mutex // serialises writes on str
	sendClosed bool       // guarded by sendMu: the CONNECT stream's send side is finished

	mu      sync.Mutex
	end     error    // guarded by mu; set once, then immutable (done is closed)
	streams []func() // guarded by mu: resets of the session's streams, run when it ends
}

func newClientSession(c *ClientConn, str *http3.RequestStream, ownConn bool) *ClientSession {
	return &ClientSession{conn: c, str: str, id: uint64(str.StreamID()), ownConn: ownConn,
		uni: make(chan *quic.ReceiveStream, acceptQueue), bidi: make(chan *quic.Stream, acceptQueue),
		drain: make(chan struct{}), done: make(chan struct{}), readerDone: make(chan struct{})}
}

// ID is the session ID: the CONNECT stream's ID.
func (s *ClientSession) ID() uint64 { return s.id }

// Done is closed when the session has ended; Err then says how.
func (s *ClientSession) Done() <-chan struct{} { return s.done }

// Draining is closed when the server asked for the session to end
// (DRAIN_WEBTRANSPORT_SESSION): it is shutting down.
func (s *ClientSession) Draining() <-chan struct{} { return s.drain }

// Err is nil while the session is open. After, it is a *SessionError
// (Remote: the server closed it) when either side closed it with a
// capsule or a FIN, else the error that cut the CONNECT stream or the
// connection (a reset, an idle timeout), wrapped as it came.
func (s *ClientSession) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end
}

// OpenStream opens a bidirectional stream of the session.
func (s *ClientSession) OpenStream(ctx context.Context) (*quic.Stream, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	str, err := s.conn.qconn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	// The header is delivered even if the stream is reset later
	// (RESET_STREAM_AT), so the server always learns its session.
	str.SetWriteDeadline(time.Now().Add(headerTimeout))
	_, err = str.Write(quicvarint.Append(quicvarint.Append(nil, BidiSignal), s.id))
	str.SetWriteDeadline(time.Time{})
	if err != nil {
		str.CancelRead(errSessionGone)
		str.CancelWrite(errSessionGone)
		return nil, err
	}
	str.SetReliableBoundary()
	if !s.track(func() { str.CancelRead(errSessionGone); str.CancelWrite(errSessionGone) }) {
		return nil, s.Err()
	}
	return str, nil
}

// OpenUniStream opens a unidirectional stream of the session.
func (s *ClientSession) OpenUniStream(ctx context.Context) (*quic.SendStream, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	str, err := s.conn.qconn.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	str.SetWriteDeadline(time.Now().Add(headerTimeout))
	_, err = str.Write(quicvarint.Append(quicvarint.Append(nil, UniType), s.id))
	str.SetWriteDeadline(time.Time{})
	if err != nil {
		str.CancelWrite(errSessionGone)
		return nil, err
	}
	str.SetReliableBoundary()
	if !s.track(func() { str.CancelWrite(errSessionGone) }) {
		return nil, s.Err()
	}
	return str, nil
}

// AcceptUniStream returns the next unidirectional stream the server
// opened in the session, its header already read.
func (s *ClientSession) AcceptUniStream(ctx context.Context) (*quic.ReceiveStream, error) {
	select {
	case str := <-s.uni:
		return str, nil
	case <-s.done:
		return nil, s.Err()
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// AcceptStream returns the next bidirectional stream the server opened
// in the session, its header already read.
func (s *ClientSession) AcceptStream(ctx context.Context) (*quic.Stream, error) {
	select {
	case str := <-s.bidi:
		return str, nil
	case <-s.done:
		return nil, s.Err()
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// SendDatagram sends b as one datagram of the session. Datagrams are
// unreliable: a nil error does not mean it arrived.
func (s *ClientSession) SendDatagram(b []byte) error { return s.str.SendDatagram(b) }

// ReceiveDatagram returns the next datagram of the session. HTTP/3 keeps
// at most 32 unread datagrams a session and drops the ones after.
func (s *ClientSession) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	return s.str.ReceiveDatagram(ctx)
}

// Close ends the session with code and msg (cut to 1024 bytes): a close
// capsule, the CONNECT stream finished, the session's streams reset.
// It waits up to 2 s for the server to finish its side, so that a
// connection closed next does not cut the capsule off. It returns nil
// when the session had already ended.
func (s *ClientSession) Close(code uint32, msg string) error {
	// Ended here first, so that the server's FIN answering the capsule
	// cannot pass for a close of its own.
	msg = msg[:min(len(msg), maxCloseMessage)]
	var err error
	if s.finish(&SessionError{Code: code, Message: msg, client: true}) {
		err = s.finishSend(appendClose(nil, code, msg))
	}
	t := time.NewTimer(closeTimeout)
	select {
	case <-s.readerDone:
	case <-t.C:
		s.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeNoError))
		<-s.readerDone // the read it was in returns at once
	}
	t.Stop()
	if s.ownConn {
		s.conn.Close()
	}
	return err
}

// finishSend writes b (if any) and finishes the CONNECT stream's send
// side, once; within closeTimeout, else the send side is reset.
func (s *ClientSession) finishSend(b []byte) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.sendClosed {
		return nil
	}
	s.sendClosed = true
	s.str.SetWriteDeadline(time.Now().Add(closeTimeout))
	var err error
	if len(b) > 0 {
		_, err = s.str.Write(b)
	}
	if err != nil {
		s.str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeNoError))
		return fmt.Errorf("wt: send close capsule: %w", err)
	}
	// The FIN can find the send side already stopped by the server
	// (STOP_SENDING once it has read the capsule): nothing is lost then.
	s.str.Close()
	return nil
}

// readCapsules reads the CONNECT stream until the session ends: close
// and drain capsules are acted on, others skipped (draft §5: unknown
// capsule types are ignored).
func (s *ClientSession) readCapsules() {
	defer close(s.readerDone)
	p := http3.NewCapsuleParser(s.str)
	for {
		typ, r, err := p.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				s.finish(&SessionError{Remote: true, client: true})
			} else {
				s.finish(fmt.Errorf("wt: session %d: CONNECT stream: %w", s.id, err))
			}
			break
		}
		if typ == capsuleClose {
			code, msg, err := parseCloseCapsule(r)
			if err != nil {
				s.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeMessageError))
				s.finish(fmt.Errorf("wt: session %d: %w", s.id, err))
				break
			}
			s.finish(&SessionError{Remote: true, Code: code, Message: msg, client: true})
			// "The endpoint that sends WT_CLOSE_SESSION MUST immediately
			// send a FIN"; whatever else arrives is not read.
			s.str.SetReadDeadline(time.Now().Add(closeTimeout))
			io.Copy(io.Discard, io.LimitReader(s.str, 64<<10))
			s.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeNoError))
			break
		}
		if typ == capsuleDrain {
			s.drainOnce.Do(func() { close(s.drain) })
		}
		if err := r.Discard(); err != nil {
			continue // Next reports the stream's error
		}
	}
	// The session is over: finish this side too, if Close has not.
	s.finishSend(nil)
	if s.ownConn {
		var se *SessionError
		if errors.As(s.Err(), &se) && se.Remote {
			s.conn.Close()
		}
	}
}

// track adds a stream's reset to the ones run when the session ends; if
// it has ended already, it runs reset and returns false.
func (s *ClientSession) track(reset func()) bool {
	s.mu.Lock()
	if s.end == nil {
		s.streams = append(s.streams, reset)
		s.mu.Unlock()
		return true
	}
	s.mu.Unlock()
	reset()
	return false
}

func (s *ClientSession) deliverUni(str *quic.ReceiveStream) {
	if !s.track(func() { str.CancelRead(errSessionGone) }) {
		return
	}
	select {
	case s.uni <- str:
	default:
		str.CancelRead(errBufferedStreamRejected)
	}
}

func (s *ClientSession) deliverBidi(str *quic.Stream) {
	if !s.track(func() { str.CancelRead(errSessionGone); str.CancelWrite(errSessionGone) }) {
		return
	}
	select {
	case s.bidi <- str:
	default:
		str.CancelRead(errBufferedStreamRejected)
		str.CancelWrite(errBufferedStreamRejected)
	}
}

// finish records how the session ended, resets its streams and forgets
// it on the connection. The first call wins and returns true.
func (s *ClientSession) finish(err error) bool {
	s.mu.Lock()
	if s.end != nil {
		s.mu.Unlock()
		return false
	}
	s.end = err
	streams := s.streams
	s.streams = nil
	s.mu.Unlock()
	close(s.done)
	for _, reset := range streams {
		reset()
	}
	s.conn.remove(s.id)
	return true
}
