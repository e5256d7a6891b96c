package h3

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// WebTransport is what a WebTransport server gives the listener: its
// SETTINGS, the streams bound to its sessions, and its part in a stop.
// The listener tells those streams from HTTP/3's by their first varint
// (draft-ietf-webtrans-http3 §4.2, §4.3).
type WebTransport interface {
	Settings() map[uint64]uint64
	// HandleStream takes a client bidirectional stream that starts with
	// the signal 0x41; HandleUniStream a unidirectional one of type 0x54.
	HandleStream(*quic.Conn, *quic.Stream)
	HandleUniStream(*quic.Conn, *quic.ReceiveStream)
	// Drain tells sessions a stop has begun; CloseAll ends them and
	// returns how many there were.
	Drain()
	CloseAll() int
}

// Stream signals of WebTransport over HTTP/3.
const (
	wtBidiSignal = 0x41
	wtUniType    = 0x54
)

type connKey struct{}

// ConnOf returns the QUIC connection a request arrived on, from its
// context.
func ConnOf(ctx context.Context) *quic.Conn {
	c, _ := ctx.Value(connKey{}).(*quic.Conn)
	return c
}

// rawConns is the raw serving state: the connections open and the
// request handlers in flight, for a stop.
type rawConns struct {
	mu       sync.Mutex              // guards conns, draining
	conns    map[*quic.Conn]struct{} // open connections
	draining bool                    // a stop began: new request streams are refused
	serving  bool                    // Serve started the accept loop
	handlers sync.WaitGroup          // request streams being handled
	done     chan struct{}           // closed when Serve's accept loop returns
}

// serveRaw accepts connections and serves each with its own stream
// loops around http3's RawServerConn, so that WebTransport streams can
// be told from requests. quic-go's own loop hands unknown stream types
// nowhere (a unidirectional one is refused, a bidirectional one is read
// as a request).
func (s *Server) serveRaw() error {
	defer close(s.raw.done)
	ln := countingListener{s}
	for {
		c, err := ln.Accept(context.Background())
		if err != nil {
			if errors.Is(err, quic.ErrServerClosed) {
				return nil
			}
			return err
		}
		s.raw.mu.Lock()
		if s.raw.draining {
			s.raw.mu.Unlock()
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "server is shutting down")
			continue
		}
		s.raw.conns[c] = struct{}{}
		s.raw.mu.Unlock()
		go s.serveConn(c)
	}
}

// serveConn serves one connection until it closes.
func (s *Server) serveConn(c *quic.Conn) {
	defer func() {
		s.raw.mu.Lock()
		delete(s.raw.conns, c)
		s.raw.mu.Unlock()
	}()
	hc, err := s.hs.NewRawServerConn(c)
	if err != nil {
		c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeInternalError), "")
		return
	}
	go func() {
		for {
			str, err := c.AcceptUniStream(context.Background())
			if err != nil {
				return
			}
			go s.serveUni(c, hc, str)
		}
	}()
	for {
		str, err := c.AcceptStream(context.Background())
		if err != nil {
			return
		}
		s.raw.mu.Lock()
		draining := s.raw.draining
		if !draining {
			s.raw.handlers.Add(1)
		}
		s.raw.mu.Unlock()
		if draining {
			// RFC 9114 §8.1: H3_REQUEST_REJECTED says the request was
			// not processed and may be retried elsewhere. Without
			// GOAWAY (see Shutdown) this is how a stop refuses work.
			str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
			str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
			continue
		}
		go func() {
			defer s.raw.handlers.Done()
			s.serveBidi(c, hc, str)
		}()
	}
}

// serveBidi reads a bidirectional stream's first varint, within the
// header timeout, and hands the stream to WebTransport or HTTP/3. The
// read deadline stays on through the request's HEADERS frame: activity
// clears it when the handler starts, so a stream whose head never
// arrives is reset after the header timeout.
func (s *Server) serveBidi(c *quic.Conn, hc *http3.RawServerConn, str *quic.Stream) {
	str.SetReadDeadline(time.Now().Add(s.cfg.HeaderTimeout))
	typ, err := quicvarint.Peek(str)
	if err != nil {
		str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestIncomplete))
		str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestIncomplete))
		return
	}
	if typ == wtBidiSignal {
		str.SetReadDeadline(time.Time{})
		s.cfg.WebTransport.HandleStream(c, str)
		return
	}
	hc.HandleRequestStream(str)
}

// serveUni hands a unidirectional stream to WebTransport or HTTP/3 by its
// type.
func (s *Server) serveUni(c *quic.Conn, hc *http3.RawServerConn, str *quic.ReceiveStream) {
	str.SetReadDeadline(time.Now().Add(s.cfg.HeaderTimeout))
	typ, err := quicvarint.Peek(str)
	str.SetReadDeadline(time.Time{})
	if err != nil {
		str.CancelRead(quic.StreamErrorCode(http3.ErrCodeGeneralProtocolError))
		return
	}
	if typ == wtUniType {
		s.cfg.WebTransport.HandleUniStream(c, str)
		return
	}
	hc.HandleUnidirectionalStream(str)
}

// shutdownRaw refuses new request streams and sessions, lets those in
// flight finish until ctx ends, then closes every connection with
// H3_NO_ERROR. quic-go keeps a raw connection's control stream to itself
// and does not export its GOAWAY frame, so no GOAWAY is sent: clients
// learn of the stop from H3_REQUEST_REJECTED on new requests,
// DRAIN_WEBTRANSPORT_SESSION on sessions, and the close.
func (s *Server) shutdownRaw(ctx context.Context) error {
	s.raw.mu.Lock()
	s.raw.draining = true
	serving := s.raw.serving
	s.raw.mu.Unlock()
	s.ln.Close()
	if serving {
		<-s.raw.done
	}
	s.cfg.WebTransport.Drain()
	idle := make(chan struct{})
	go func() { s.raw.handlers.Wait(); close(idle) }()
	var err error
	select {
	case <-idle:
		s.lingerAll(ctx)
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.closeRaw("server is shutting down")
	return err
}

// lingerAll waits, within ctx, until every connection has sent nothing
// for a while. A handler that returned has handed its last bytes to
// quic-go, not to the client, and closing the connection drops what is
// unsent or unacknowledged; quic-go exposes no acknowledgement of a
// stream's end, so the sign used is a connection that has sent no packet
// (first transmission, retransmission or probe) for four smoothed RTTs
// plus the ACK delay, at least 100 ms: by then what was in flight is
// acknowledged, or its loss would have made the connection send again.
func (s *Server) lingerAll(ctx context.Context) {
	s.raw.mu.Lock()
	conns := make([]*quic.Conn, 0, len(s.raw.conns))
	for c := range s.raw.conns {
		conns = append(conns, c)
	}
	s.raw.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { linger(ctx, c) })
	}
	wg.Wait()
}

func linger(ctx context.Context, c *quic.Conn) {
	const tick = 20 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	last, quiet := c.ConnectionStats().BytesSent, time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Context().Done():
			return
		case <-t.C:
		}
		st := c.ConnectionStats()
		if st.BytesSent != last {
			last, quiet = st.BytesSent, 0
			continue
		}
		quiet += tick
		if quiet >= max(100*time.Millisecond, 4*st.SmoothedRTT+25*time.Millisecond) {
			return
		}
	}
}

// closeRaw ends every session and closes every connection, giving the
// sessions' CLOSE capsules up to half a second to leave first.
func (s *Server) closeRaw(msg string) {
	if s.cfg.WebTransport.CloseAll() > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		s.lingerAll(ctx)
		cancel()
	}
	s.raw.mu.Lock()
	s.raw.draining = true
	conns := make([]*quic.Conn, 0, len(s.raw.conns))
	for c := range s.raw.conns {
		conns = append(conns, c)
	}
	s.raw.mu.Unlock()
	for _, c := range conns {
		c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), msg)
	}
}

// clearHeaderDeadline lifts the read deadline serveBidi set for the
// request's head, once the handler has the request.
func clearHeaderDeadline(w http.ResponseWriter) {
	if d, ok := w.(interface{ SetReadDeadline(time.Time) error }); ok {
		d.SetReadDeadline(time.Time{})
	}
}
