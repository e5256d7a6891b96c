package wt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// The client: WebTransport over HTTP/3 on quic-go's raw client
// connection. A ClientConn owns one QUIC connection and its accept
// loops; they read the header of every stream the server opens and hand
// WebTransport streams to their session, the others to HTTP/3 (its
// control and QPACK streams). A ClientSession is one extended CONNECT:
// its request stream carries the capsules that drain and close it, and
// its quarter stream ID tags its datagrams.

// Client timeouts. Every wait of the client is bounded by one of these,
// by the caller's context, or by the QUIC connection's idle timeout.
const (
	// DialTimeout bounds a Dial whose context has no deadline: handshake,
	// SETTINGS and the CONNECT's response.
	DialTimeout = 10 * time.Second
	// headerTimeout bounds the arrival of a server stream's header (its
	// type, or signal, and session ID).
	headerTimeout = 5 * time.Second
	// closeTimeout bounds writing the close capsule and waiting for the
	// server to finish its side of the CONNECT stream.
	closeTimeout = 2 * time.Second
	// acceptQueue is how many streams of each kind the server may have
	// opened in a session that the application has not accepted yet;
	// more are reset with WT_BUFFERED_STREAM_REJECTED.
	acceptQueue = 16
)

// ErrNotOffered is a server whose QUIC transport parameters or HTTP/3
// SETTINGS do not offer what WebTransport needs.
var ErrNotOffered = errors.New("wt: the server does not offer WebTransport")

// ClientConn is a client's HTTP/3 connection to one server, carrying any
// number of WebTransport sessions.
type ClientConn struct {
	// Immutable after NewClientConn.
	qconn *quic.Conn
	h3    *http3.RawClientConn

	mu       sync.Mutex
	sessions map[uint64]*ClientSession // guarded by mu: open sessions by ID
}

// DialConn opens a QUIC connection to addr (host:port) for WebTransport:
// ALPN h3, datagrams and RESET_STREAM_AT on, whatever tlsConf and qconf
// (either may be nil) say.
func DialConn(ctx context.Context, addr string, tlsConf *tls.Config, qconf *quic.Config) (*ClientConn, error) {
	tc := &tls.Config{}
	if tlsConf != nil {
		tc = tlsConf.Clone()
	}
	tc.NextProtos = []string{http3.NextProtoH3}
	qc := &quic.Config{KeepAlivePeriod: 10 * time.Second, MaxIncomingUniStreams: 1000}
	if qconf != nil {
		qc = qconf.Clone()
	}
	qc.EnableDatagrams, qc.EnableStreamResetPartialDelivery = true, true
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DialTimeout)
		defer cancel()
	}
	qconn, err := quic.DialAddr(ctx, addr, tc, qc)
	if err != nil {
		return nil, err
	}
	c, err := NewClientConn(qconn)
	if err != nil {
		qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeInternalError), "")
		return nil, err
	}
	return c, nil
}

// NewClientConn serves WebTransport sessions on qconn, a client QUIC
// connection with ALPN h3 and datagrams and RESET_STREAM_AT enabled. It
// takes qconn's stream accept loops; Close closes qconn.
func NewClientConn(qconn *quic.Conn) (*ClientConn, error) {
	st := qconn.ConnectionState()
	if !st.SupportsDatagrams.Local || !st.SupportsStreamResetPartialDelivery.Local {
		return nil, errors.New("wt: the QUIC connection needs EnableDatagrams and EnableStreamResetPartialDelivery")
	}
	tr := &http3.Transport{EnableDatagrams: true, AdditionalSettings: map[uint64]uint64{settingWTEnabled: 1}}
	c := &ClientConn{qconn: qconn, h3: tr.NewRawClientConn(qconn), sessions: map[uint64]*ClientSession{}}
	go c.acceptUni()
	go c.acceptBidi()
	context.AfterFunc(qconn.Context(), func() {
		c.endAll(fmt.Errorf("wt: connection closed: %w", context.Cause(qconn.Context())))
	})
	return c, nil
}

// Context is done when the QUIC connection is closed.
func (c *ClientConn) Context() context.Context { return c.qconn.Context() }

// Close closes the connection (H3_NO_ERROR) and with it every session on
// it, without their close capsules.
func (c *ClientConn) Close() error {
	return c.qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
}

// Dial opens a session on its own connection: the URL's host, tlsConf
// and default QUIC settings. Closing the session closes the connection.
// See ClientConn.Dial for what it returns.
func Dial(ctx context.Context, rawURL string, tlsConf *tls.Config, hdr http.Header) (*ClientSession, *http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, nil, fmt.Errorf("wt: %q is not an https URL", rawURL)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DialTimeout)
		defer cancel()
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	c, err := DialConn(ctx, addr, tlsConf, nil)
	if err != nil {
		return nil, nil, err
	}
	s, rsp, err := c.dial(ctx, rawURL, hdr, true)
	if err != nil {
		c.Close()
	}
	return s, rsp, err
}

// Dial opens a session: an extended CONNECT (:protocol webtransport-h3)
// to rawURL with hdr. It waits for the handshake and the server's
// SETTINGS and refuses a server that does not offer WebTransport
// (ErrNotOffered). The response is returned whenever one arrived; a
// status other than 2xx is an error and opens no session. Without a
// deadline on ctx, DialTimeout bounds it.
func (c *ClientConn) Dial(ctx context.Context, rawURL string, hdr http.Header) (*ClientSession, *http.Response, error) {
	return c.dial(ctx, rawURL, hdr, false)
}

// dial is Dial; ownConn says the session owns the connection.
func (c *ClientConn) dial(ctx context.Context, rawURL string, hdr http.Header, ownConn bool) (*ClientSession, *http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, nil, fmt.Errorf("wt: %q is not an https URL", rawURL)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DialTimeout)
		defer cancel()
	}
	if err := c.await(ctx, c.qconn.HandshakeComplete()); err != nil {
		return nil, nil, fmt.Errorf("wt: QUIC handshake: %w", err)
	}
	st := c.qconn.ConnectionState()
	if !st.SupportsDatagrams.Remote || !st.SupportsStreamResetPartialDelivery.Remote {
		return nil, nil, fmt.Errorf("%w: QUIC datagrams or RESET_STREAM_AT missing", ErrNotOffered)
	}
	if err := c.await(ctx, c.h3.ReceivedSettings()); err != nil {
		return nil, nil, fmt.Errorf("wt: HTTP/3 SETTINGS: %w", err)
	}
	if set := c.h3.Settings(); !set.EnableExtendedConnect || !set.EnableDatagrams || set.Other[settingWTEnabled] == 0 {
		return nil, nil, fmt.Errorf("%w: SETTINGS extended CONNECT %t, datagrams %t, WT_ENABLED %d",
			ErrNotOffered, set.EnableExtendedConnect, set.EnableDatagrams, set.Other[settingWTEnabled])
	}
	str, err := c.h3.OpenRequestStream(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Registered before the CONNECT leaves: the server cannot open a
	// stream of this session before it is found here.
	s := newClientSession(c, str, ownConn)
	c.mu.Lock()
	c.sessions[s.id] = s
	c.mu.Unlock()
	fail := func(err error) (*ClientSession, *http.Response, error) {
		str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
		str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
		s.finish(err)
		return nil, nil, err
	}
	if hdr == nil {
		hdr = http.Header{}
	}
	req := &http.Request{Method: http.MethodConnect, Proto: "webtransport-h3", URL: u, Host: u.Host, Header: hdr}
	if err := str.SendRequestHeader(req); err != nil {
		return fail(fmt.Errorf("wt: send CONNECT: %w", err))
	}
	dl, _ := ctx.Deadline()
	str.SetReadDeadline(dl)
	stop := context.AfterFunc(ctx, func() { str.SetReadDeadline(time.Now()) })
	rsp, err := str.ReadResponse()
	stop()
	str.SetReadDeadline(time.Time{})
	if err != nil {
		return fail(fmt.Errorf("wt: CONNECT response: %w", err))
	}
	if rsp.StatusCode < 200 || rsp.StatusCode > 299 {
		_, _, err := fail(fmt.Errorf("wt: CONNECT answered %d", rsp.StatusCode))
		return nil, rsp, err
	}
	go s.readCapsules()
	return s, rsp, nil
}

// await waits for ch, the caller's ctx or the end of the connection.
func (c *ClientConn) await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-c.qconn.Context().Done():
		return context.Cause(c.qconn.Context())
	}
}

// session is the open session with this ID, or nil.
func (c *ClientConn) session(id uint64) *ClientSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[id]
}

func (c *ClientConn) remove(id uint64) {
	c.mu.Lock()
	delete(c.sessions, id)
	c.mu.Unlock()
}

// endAll ends every session when the connection is gone.
func (c *ClientConn) endAll(err error) {
	c.mu.Lock()
	all := make([]*ClientSession, 0, len(c.sessions))
	for _, s := range c.sessions {
		all = append(all, s)
	}
	c.mu.Unlock()
	for _, s := range all {
		s.finish(err)
	}
}

// acceptUni takes the server's unidirectional streams: WebTransport ones
// go to their session, the others (control, QPACK) to HTTP/3.
func (c *ClientConn) acceptUni() {
	for {
		str, err := c.qconn.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		go func() {
			id, ok, err := readHeader(str, UniType)
			switch {
			case err != nil:
				str.CancelRead(quic.StreamErrorCode(http3.ErrCodeStreamCreationError))
			case !ok:
				c.h3.HandleUnidirectionalStream(str)
			default:
				if s := c.route(id); s != nil {
					s.deliverUni(str)
				} else {
					str.CancelRead(errBufferedStreamRejected)
				}
			}
		}()
	}
}

// acceptBidi takes the server's bidirectional streams: WebTransport ones
// go to their session; HTTP/3 allows no other.
func (c *ClientConn) acceptBidi() {
	for {
		str, err := c.qconn.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go func() {
			id, ok, err := readHeader(str, BidiSignal)
			switch {
			case err != nil:
				str.CancelRead(quic.StreamErrorCode(http3.ErrCodeStreamCreationError))
				str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeStreamCreationError))
			case !ok:
				c.h3.HandleBidirectionalStream(str)
			default:
				if s := c.route(id); s != nil {
					s.deliverBidi(str)
				} else {
					str.CancelRead(errBufferedStreamRejected)
					str.CancelWrite(errBufferedStreamRejected)
				}
			}
		}()
	}
}

// route finds the session a stream names. "Session IDs are client-
// initiated bidirectional stream IDs"; any other is H3_ID_ERROR for the
// connection.
func (c *ClientConn) route(id uint64) *ClientSession {
	if id%4 != 0 {
		c.qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeIDError), "invalid WebTransport session ID")
		return nil
	}
	return c.session(id)
}

// peekReader is a stream whose first bytes can be looked at.
type peekReader interface {
	Peek([]byte) (int, error)
	Read([]byte) (int, error)
	SetReadDeadline(time.Time) error
}

// readHeader looks at a stream's first varint, within headerTimeout.
// When it is want, it consumes it and the session ID after it and
// returns the ID; otherwise it consumes nothing and returns ok false.
func readHeader(str peekReader, want uint64) (id uint64, ok bool, err error) {
	str.SetReadDeadline(time.Now().Add(headerTimeout))
	defer str.SetReadDeadline(time.Time{})
	typ, err := quicvarint.Peek(str)
	if err != nil || typ != want {
		return 0, false, err
	}
	r := quicvarint.NewReader(str)
	if _, err := quicvarint.Read(r); err != nil {
		return 0, false, err
	}
	id, err = quicvarint.Read(r)
	if err != nil {
		return 0, false, err
	}
	return id, true, nil
}
