package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
)

// SessionResult is the JSON report of one session.
type SessionResult struct {
	OK     bool   `json:"ok"`
	Error  string `json:"error"`
	Status int    `json:"status"` // of the CONNECT; 0 if none arrived
	// Headers holds the response fields the tests look at, as received,
	// and only those present.
	Headers          map[string]string `json:"headers"`
	Bytes            int64             `json:"bytes"`      // payload bytes received
	SentBytes        int64             `json:"sent_bytes"` // payload bytes sent
	Blake3           string            `json:"blake3"`     // hex, where computed
	Verified         bool              `json:"verified"`
	StreamsOK        int               `json:"streams_ok"`
	Datagrams        DatagramStats     `json:"datagrams"`
	Closed           Closed            `json:"closed"`
	StreamResetCodes []uint32          `json:"stream_reset_codes"` // WebTransport codes of the peer's stream resets
	StreamErrors     []string          `json:"stream_errors"`      // other stream errors, distinct
	ElapsedS         float64           `json:"elapsed_s"`
}

// Closed says how a session ended.
type Closed struct {
	By      string `json:"by"` // "remote", "local", or "none" (still open, or never opened)
	Code    uint32 `json:"code"`
	Message string `json:"message"`
	// Capsule is true when the session ended with a
	// CLOSE_WEBTRANSPORT_SESSION capsule (received when by is remote,
	// sent when local); false when the CONNECT stream or the connection
	// just ended, and then Code is 0 and Detail says what happened.
	Capsule bool   `json:"capsule"`
	Detail  string `json:"detail"`
}

// MultiResult is the JSON report of a run with -sessions > 1.
type MultiResult struct {
	OK       bool             `json:"ok"` // every session's ok
	Error    string           `json:"error"`
	ElapsedS float64          `json:"elapsed_s"`
	Sessions []*SessionResult `json:"sessions"`
}

// reportedHeaders are the response fields copied into the report.
var reportedHeaders = []string{"Repr-Digest", "Engine-Source-Bytes", "Engine-Datagram-Bytes", "Retry-After"}

func newSessionResult() *SessionResult {
	return &SessionResult{
		Headers:          map[string]string{},
		StreamResetCodes: []uint32{},
		StreamErrors:     []string{},
		Closed:           Closed{By: "none"},
	}
}

// run dials, runs c.op on c.sessions sessions, and returns the report:
// a *SessionResult for one session, a *MultiResult for more.
func run(ctx context.Context, c *config) any {
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, fmt.Errorf("timeout: the -timeout of %v elapsed", c.timeout))
	defer cancel()

	results := make([]*SessionResult, c.sessions)
	qconn, cc, err := dialConn(ctx, c)
	if err != nil {
		for i := range results {
			results[i] = newSessionResult()
			results[i].Error = "dial: " + describe(ctx, err)
		}
	} else {
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() { results[i] = runSession(ctx, c, qconn, cc) })
		}
		wg.Wait()
		// Let the last capsules and FINs leave before the connection
		// closes, so that the server sees the sessions end as they did
		// and not as a closed connection.
		time.Sleep(50 * time.Millisecond)
		qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}

	elapsed := time.Since(start).Seconds()
	if c.sessions == 1 {
		results[0].ElapsedS = elapsed
		return results[0]
	}
	m := &MultiResult{OK: true, ElapsedS: elapsed, Sessions: results}
	for i, r := range results {
		if !r.OK {
			m.OK = false
			if m.Error == "" {
				m.Error = fmt.Sprintf("session %d: %s", i, r.Error)
			}
		}
	}
	return m
}

// dialConn makes the one QUIC connection and the WebTransport client
// connection on it.
func dialConn(ctx context.Context, c *config) (*quic.Conn, *webtransport.ClientConn, error) {
	tlsConf := &tls.Config{
		NextProtos:         []string{http3.NextProtoH3},
		ServerName:         c.sni,
		InsecureSkipVerify: c.insecure,
	}
	if tlsConf.ServerName == "" {
		tlsConf.ServerName = c.url.Hostname()
	}
	if c.ca != "" {
		pem, err := os.ReadFile(c.ca)
		if err != nil {
			return nil, nil, fmt.Errorf("-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("-ca %s: no PEM certificate in it", c.ca)
		}
		tlsConf.RootCAs = pool
	}
	addr := c.url.Host
	if c.url.Port() == "" {
		addr = net.JoinHostPort(c.url.Hostname(), "443")
	}
	qconn, err := quic.DialAddr(ctx, addr, tlsConf, &quic.Config{
		// webtransport-go's client refuses to work without these two.
		EnableDatagrams:                  true,
		EnableStreamResetPartialDelivery: true,
		// So that only the server's WebTransport limits (its idle
		// timeout, not QUIC's) end a session the client holds open.
		KeepAlivePeriod: 5 * time.Second,
	})
	if err != nil {
		return nil, nil, err
	}
	// No webtransport.Config: it would offer WebTransport flow control
	// (SETTINGS_WT_INITIAL_MAX_*), which the engine does not do.
	tr := &webtransport.Transport{}
	cc, err := tr.NewClientConn(qconn)
	if err != nil {
		qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
		return nil, nil, err
	}
	return qconn, cc, nil
}

// sessionRun is one session's operation in progress.
type sessionRun struct {
	c      *config
	qconn  *quic.Conn
	sess   *webtransport.Session
	opened time.Time // when the 200 arrived

	recv, sent atomic.Int64

	// bg holds the goroutines an operation leaves running until the
	// session ends (readers of held streams, say).
	bg sync.WaitGroup

	mu     sync.Mutex
	res    *SessionResult
	frozen bool // the report is taken; noteErr records nothing more
}

func runSession(ctx context.Context, c *config, qconn *quic.Conn, cc *webtransport.ClientConn) *SessionResult {
	res := newSessionResult()
	start := time.Now()
	defer func() { res.ElapsedS = time.Since(start).Seconds() }()

	hdr := http.Header{}
	if c.origin != "" {
		hdr.Set("Origin", c.origin)
	}
	rsp, sess, err := cc.Dial(ctx, c.rawURL, hdr)
	if rsp != nil {
		res.Status = rsp.StatusCode
		for _, k := range reportedHeaders {
			if v, ok := rsp.Header[k]; ok {
				res.Headers[k] = strings.Join(v, ", ")
			}
		}
	}
	if err != nil {
		res.Error = "dial: " + describe(ctx, err)
		return res
	}
	r := &sessionRun{c: c, qconn: qconn, sess: sess, opened: time.Now(), res: res}

	var opErr error
	switch c.op {
	case "echo":
		opErr = r.echo(ctx)
	case "source":
		opErr = r.source(ctx)
	case "sink":
		opErr = r.sink(ctx)
	case "datagrams":
		opErr = r.datagramsOp(ctx)
	case "hold":
		opErr = r.hold(ctx)
	case "close":
		opErr = r.closeOp()
	case "flood":
		opErr = r.flood(ctx)
	case "bigdatagram":
		opErr = r.bigDatagram(ctx)
	}
	// Every operation ends with the session closed: by the server, or
	// else here, with code 0.
	select {
	case <-sess.Context().Done():
	default:
		sess.CloseWithError(0, "")
	}
	// The session is over, so its streams are: their goroutines end.
	bgDone := make(chan struct{})
	go func() { r.bg.Wait(); close(bgDone) }()
	select {
	case <-bgDone:
	case <-time.After(2 * time.Second):
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	r.frozen = true
	res.Closed = r.closedInfo()
	res.Bytes += r.recv.Load()
	res.SentBytes += r.sent.Load()
	if opErr != nil {
		res.Error = describe(ctx, opErr)
	} else {
		res.OK = true
	}
	return res
}

// closedInfo says how the session ended. webtransport-go cancels the
// session's context without a cause; the error the session ended with is
// what OpenStream returns once it has.
func (r *sessionRun) closedInfo() Closed {
	select {
	case <-r.sess.Context().Done():
	default:
		return Closed{By: "none"}
	}
	_, err := r.sess.OpenStream()
	if sessErr, ok := errors.AsType[*webtransport.SessionError](err); ok {
		by := "local"
		if sessErr.Remote {
			by = "remote"
		}
		return Closed{By: by, Code: uint32(sessErr.ErrorCode), Message: sessErr.Message, Capsule: true}
	}
	// Anything else ended the CONNECT stream (or the connection) without
	// the capsule; the client itself only ever closes with the capsule.
	cl := Closed{By: "remote"}
	if h3Err, ok := errors.AsType[*http3.Error](err); ok && h3Err.ErrorMessage == io.EOF.Error() {
		cl.Detail = "the CONNECT stream ended without a CLOSE_WEBTRANSPORT_SESSION capsule"
	} else if err != nil {
		cl.Detail = err.Error()
	}
	if cause := context.Cause(r.qconn.Context()); cause != nil {
		cl.Detail += "; connection: " + cause.Error()
	}
	return cl
}

// noteErr records what a stream operation's error says about the peer:
// the WebTransport code of a stream reset, or else the error itself.
// The end of the session is not recorded here; closedInfo reports it.
func (r *sessionRun) noteErr(err error) {
	// The end of a stream, and the deadlines and contexts the run's
	// timeout sets off, say nothing about the peer.
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen {
		return
	}
	if strErr, ok := errors.AsType[*webtransport.StreamError](err); ok {
		if strErr.Remote {
			r.res.StreamResetCodes = append(r.res.StreamResetCodes, uint32(strErr.ErrorCode))
			return
		}
	}
	// A session's end reaches its streams as the error it ended with: a
	// SessionError, or an http3.Error when the CONNECT stream ended
	// without the capsule.
	if _, ok := errors.AsType[*webtransport.SessionError](err); ok {
		return
	}
	if _, ok := errors.AsType[*http3.Error](err); ok {
		return
	}
	s := err.Error()
	for _, e := range r.res.StreamErrors {
		if e == s {
			return
		}
	}
	r.res.StreamErrors = append(r.res.StreamErrors, s)
}

// describe is an error as the report says it: a timeout as the timeout,
// not as the deadline error the library returned because of it.
func describe(ctx context.Context, err error) string {
	s := err.Error()
	// A SessionError's text is only its message, which may be empty.
	if sessErr, ok := errors.AsType[*webtransport.SessionError](err); ok {
		by := "the client"
		if sessErr.Remote {
			by = "the server"
		}
		if sessErr.Message == "" {
			s = strings.TrimSuffix(s, ": ")
		}
		s += fmt.Sprintf(" [session closed by %s with code %#x]", by, uint32(sessErr.ErrorCode))
	}
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			return fmt.Sprintf("%v (%s)", cause, s)
		}
	}
	return s
}

// deadlineOnDone makes a stream's blocked Read and Write return when ctx
// ends (webtransport-go's streams take no context). The returned func
// stops that.
func deadlineOnDone(ctx context.Context, setDeadline func(time.Time) error) func() bool {
	return context.AfterFunc(ctx, func() { setDeadline(time.Now()) })
}
