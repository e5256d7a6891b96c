package wt

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/quic-go/quic-go"
)

// Stream is a bidirectional stream a client opened in a session. Its
// bytes count against the session's limits and keep it from idling.
type Stream struct {
	ss *Session
	q  *quic.Stream

	mu           sync.Mutex // guards rDone, wDone
	rDone, wDone bool       // a direction finished (EOF, close, error or cancel)
}

// Read reads what the client sent. A stream the client reset is
// abandoned both ways (the server's side reset with CodeAborted), so it
// no longer counts against MaxStreamsPerSession.
func (st *Stream) Read(b []byte) (int, error) {
	n, err := st.q.Read(b)
	st.ss.moved(n, true)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			st.q.CancelWrite(StreamCode(CodeAborted))
			st.done(true, true)
		} else {
			st.done(true, false)
		}
	}
	return n, err
}

// Write sends b to the client, up to what MaxBytesPerSession leaves: past
// it the session ends. A write the client refused (STOP_SENDING) abandons
// the stream both ways.
func (st *Stream) Write(b []byte) (int, error) {
	n, err := st.ss.write(st.q, b)
	if err != nil {
		st.q.CancelRead(StreamCode(CodeAborted))
		st.done(true, true)
	}
	return n, err
}

// Close finishes the server's side (FIN).
func (st *Stream) Close() error {
	err := st.q.Close()
	st.done(false, true)
	return err
}

// Refuse resets both directions with a WebTransport application code.
func (st *Stream) Refuse(code uint32) {
	st.reset(StreamCode(code))
	st.done(true, true)
}

func (st *Stream) reset(c quic.StreamErrorCode) {
	st.q.CancelRead(c)
	st.q.CancelWrite(c)
}

func (st *Stream) done(r, w bool) {
	st.mu.Lock()
	st.rDone = st.rDone || r
	st.wDone = st.wDone || w
	both := st.rDone && st.wDone
	st.mu.Unlock()
	if both {
		st.ss.untrack(st)
	}
}

// ReceiveStream is a unidirectional stream a client opened in a session.
type ReceiveStream struct {
	ss   *Session
	q    *quic.ReceiveStream
	once sync.Once
}

// Read reads what the client sent.
func (st *ReceiveStream) Read(b []byte) (int, error) {
	n, err := st.q.Read(b)
	st.ss.moved(n, true)
	if err != nil {
		st.once.Do(func() { st.ss.untrack(st) })
	}
	return n, err
}

// Refuse stops the stream with a WebTransport application code.
func (st *ReceiveStream) Refuse(code uint32) {
	st.reset(StreamCode(code))
	st.once.Do(func() { st.ss.untrack(st) })
}

func (st *ReceiveStream) reset(c quic.StreamErrorCode) { st.q.CancelRead(c) }

// SendStream is a unidirectional stream the server opened in a session.
type SendStream struct {
	ss   *Session
	q    *quic.SendStream
	once sync.Once
}

// Write sends b to the client, up to what MaxBytesPerSession leaves.
func (st *SendStream) Write(b []byte) (int, error) {
	n, err := st.ss.write(st.q, b)
	if err != nil {
		st.once.Do(func() { st.ss.untrack(st) })
	}
	return n, err
}

// Close finishes the stream (FIN).
func (st *SendStream) Close() error {
	err := st.q.Close()
	st.once.Do(func() { st.ss.untrack(st) })
	return err
}

// Abort resets the stream with a WebTransport application code; the
// client keeps the stream header (RESET_STREAM_AT).
func (st *SendStream) Abort(code uint32) {
	st.reset(StreamCode(code))
	st.once.Do(func() { st.ss.untrack(st) })
}

// Context is canceled when the stream's send side is done.
func (st *SendStream) Context() context.Context { return st.q.Context() }

func (st *SendStream) reset(c quic.StreamErrorCode) { st.q.CancelWrite(c) }

// side names who ended a session, for the log.
func (e *SessionError) side() string {
	switch {
	case e.Abrupt:
		return "gone"
	case e.Remote != e.client:
		return "client"
	}
	return "server"
}

// slogLevel logs the ends a limit caused as warnings, others as info.
func slogLevel(code uint32, remote bool) slog.Level {
	if !remote && code != CodeDone && code != CodeShutdown {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// closedBy counts a server close by its code.
func (s *Stats) closedBy(code uint32) {
	i := 0
	if code >= 0x100 && code < 0x100+uint32(len(s.ClosedByCode)-1) {
		i = int(code-0x100) + 1
	}
	s.ClosedByCode[i].Add(1)
}
