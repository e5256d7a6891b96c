package engine

import (
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/engine/proxy"

	"github.com/quic-go/quic-go/http3"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reframe"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/h1"
	"github.com/mediaship/engine/h3"
)

// HTTP/3 requests arrive on quic-go's goroutines; their exchanges run on
// a reactor loop like every other, with the upstream pool of that loop.
// An h3Client bridges the two: the request goroutine feeds the request
// body to the loop one chunk at a time (the next is read only once the
// loop passed the last one up), and the loop hands response events to the
// goroutine through a channel whose room the loop checks before it reads
// more from the upstream, so neither side ever blocks the other.

// h3ProxyChunks bounds the response chunks (each up to an upstream read)
// in flight from the loop to the request goroutine.
const h3ProxyChunks = 4

type h3EventKind uint8

const (
	h3Head h3EventKind = iota
	h3Data
	h3End
	h3Fail
	h3Abort
)

type h3Event struct {
	kind     h3EventKind
	status   int
	header   http.Header
	data     []byte
	bodyLen  int64
	trailers http.Header        // h3End: the upstream's trailers, if any
	up       proxy.UpstreamHead // h3Head: for the access log
}

// h3Client is the HTTP/3 side of an exchange. Loop-owned fields are
// touched only on the loop; events and more cross to the goroutine.
type h3Client struct {
	pr     *policy.Resp // the route's policy (the request's decision's)
	lc     *loopCtx
	ex     *proxy.Exchange
	events chan h3Event  // loop -> goroutine
	more   chan struct{} // loop -> goroutine: the last request body chunk went up
	queued atomic.Int32  // data events not yet written by the goroutine

	// Loop-owned.
	in         []byte
	inEnd      bool
	inTrailers []byte // the request's trailer lines, once inEnd
	gone       bool
	pend       []byte // response bytes not yet sent as an event (h3.FrameHeaderRoom first)
}

// h3PendMax is how much response body an h3Client gathers into one DATA
// frame before it sends it on.
const h3PendMax = 64 << 10

// flush sends the gathered response bytes as one data event.
func (cl *h3Client) flush() {
	if len(cl.pend) <= h3.FrameHeaderRoom {
		return
	}
	cl.queued.Add(1)
	cl.send(h3Event{kind: h3Data, data: cl.pend})
	cl.pend = nil
}

// nextLoop returns the context (and so the upstream pool) of one of the
// loops, chosen in turn.
func (s *Server) nextLoop() *loopCtx {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	s.loopNext++
	return s.loops[s.loopNext%len(s.loops)]
}

// serveProxyH3 proxies one HTTP/3 request on route rt, on the request's
// goroutine, until the response is sent or abandoned.
func (hh *h3Handler) serveProxyH3(w http.ResponseWriter, r *http.Request, rt *routing.Route, pr *policy.Resp, path, query []byte, rec *accesslog.Record, prep func(*proxy.Exchange)) (int, int64) {
	srv := hh.srv
	lc := srv.nextLoop()
	cl := &h3Client{lc: lc, pr: pr, events: make(chan h3Event, h3ProxyChunks+4), more: make(chan struct{}, 1)}
	peer, _ := netip.ParseAddrPort(r.RemoteAddr)
	hasBody := r.ContentLength > 0
	var first []byte // the request body's first bytes, when its length is not given
	var firstErr error
	if r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody {
		// quic-go gives a request that ended with its HEADERS a body of
		// unknown length too: the first read tells whether there is one,
		// so that a GET goes upstream without body framing (and may be
		// retried on a fresh connection).
		rc := http.NewResponseController(w)
		rc.SetReadDeadline(time.Now().Add(srv.cfg.Limits.BodyTimeout.D()))
		buf := make([]byte, 64<<10)
		n, err := r.Body.Read(buf)
		for n == 0 && err == nil {
			n, err = r.Body.Read(buf)
		}
		rc.SetReadDeadline(time.Time{})
		switch {
		case n == 0 && err == io.EOF:
		case n == 0:
			if h3.ClientGone(err) {
				return 499, 0
			}
			return 408, writeH3Error(w, 408) // body_timeout before its first byte
		default:
			hasBody, first, firstErr = true, buf[:n], err
		}
	}
	fields := make([]h1.Header, 0, len(r.Header))
	for name, vs := range r.Header {
		for _, v := range vs {
			fields = append(fields, h1.Header{Name: []byte(name), Value: []byte(v)})
		}
	}
	reqLen := r.ContentLength
	if !hasBody {
		reqLen = -1
	}
	head := reframe.Head(&reframe.Request{Method: []byte(r.Method), Path: path, Query: query, Host: []byte(r.Host),
		Fields: fields, Via: "3", Peer: peer.Addr(), TLS: true, ContentLength: reqLen, Chunked: hasBody && r.ContentLength < 0, Upstream: rt.DefaultHost()}, srv.proxy.Trusted)
	ex, tooLarge := lc.proxy.NewExchange(cl, peer, rt, []byte(r.Method), path, hasBody, r.ContentLength)
	ex.SetRequest(head, hasBody && r.ContentLength < 0, false)
	if prep != nil {
		prep(ex)
	}
	if tooLarge {
		lc.loop.Post(func() { ex.Fail(413, "request body over max_body", nil) })
	} else {
		lc.loop.Post(func() { cl.ex = ex; ex.Start() })
	}
	ctx := r.Context()
	if hasBody {
		go cl.feed(first, firstErr, r, ctx.Done())
	}

	var body *h3.Body
	status := 0
	for {
		var ev h3Event
		select {
		case ev = <-cl.events:
		case <-ctx.Done():
			lc.loop.Post(cl.clientGone)
			if body != nil {
				return status, body.Sent()
			}
			return 499, 0
		}
		switch ev.kind {
		case h3Head:
			status = ev.status
			rec.SetUpstream(ev.up.Addr, ev.status, ev.up.Time)
			for k, vs := range ev.header {
				w.Header()[k] = vs
			}
			w.WriteHeader(ev.status)
			if ev.bodyLen == 0 {
				return status, 0
			}
			b, err := h3.TakeOver(w, nil, srv.cfg.Limits.SendTimeout.D())
			if err != nil {
				lc.loop.Post(cl.clientGone)
				return status, 0
			}
			body = b
		case h3Data:
			err := body.WriteFrame(ev.data)
			cl.queued.Add(-1)
			if err != nil {
				lc.loop.Post(cl.clientGone)
				if h3.ClientGone(err) {
					srv.stats.H3Resets.Add(1)
				} else {
					body.Abort(http3.ErrCodeRequestCanceled)
				}
				return status, body.Sent()
			}
			lc.loop.Post(cl.wakeUpstream)
		case h3End:
			if body != nil {
				if len(ev.trailers) > 0 {
					if err := body.WriteTrailers(ev.trailers); err != nil {
						lc.loop.Post(cl.clientGone)
						body.Abort(http3.ErrCodeRequestCanceled)
						return status, body.Sent()
					}
				}
				body.Close()
				return status, body.Sent()
			}
			return status, 0
		case h3Fail:
			if ev.up.Addr.IsValid() {
				rec.SetUpstream(ev.up.Addr, ev.status, ev.up.Time)
			}
			return ev.status, writeH3Error(w, ev.status)
		case h3Abort:
			if body != nil {
				body.Abort(http3.ErrCodeInternalError)
				return status, body.Sent()
			}
			// No head yet: quic-go resets the stream for a handler that
			// panics with ErrAbortHandler.
			panic(http.ErrAbortHandler)
		}
	}
}

// writeH3Error answers with the error page for status.
func writeH3Error(w http.ResponseWriter, status int) int64 {
	resp := &files.Response{}
	files.ErrorResponse(resp, status)
	writeFields(headerFields(w.Header()), resp, nil, nil, nil)
	w.WriteHeader(status)
	for _, p := range resp.Parts {
		w.Write(p.Mem)
	}
	return resp.ContentLength
}

// feed reads the request body on its own goroutine and passes it to the
// loop a chunk at a time.
func (cl *h3Client) feed(first []byte, firstErr error, r *http.Request, done <-chan struct{}) {
	body := r.Body
	buf := make([]byte, 64<<10)
	for {
		var n int
		var err error
		if first != nil {
			n, err = copy(buf, first), firstErr
			first = nil
		} else {
			n, err = body.Read(buf)
		}
		if n == 0 && err == nil {
			continue // nothing to pass on (a frame without data, such as trailers): read on
		}
		chunk := append([]byte(nil), buf[:n]...)
		end := err == io.EOF
		failed := err != nil && !end
		// quic-go's body reports a stream that ended short of its
		// Content-Length so: a malformed request (RFC 9114 §4.1.2).
		short := errors.Is(err, io.ErrUnexpectedEOF)
		var trailers []byte
		if end {
			// quic-go fills r.Trailer as the body ends.
			for k, vs := range r.Trailer {
				for _, v := range vs {
					if reframe.ValidFieldValue([]byte(v)) {
						trailers = append(append(append(append(trailers, k...), ": "...), v...), "\r\n"...)
					}
				}
			}
		}
		cl.lc.loop.Post(func() {
			switch ex := cl.ex; {
			case failed && short && ex != nil:
				ex.Fail(400, "the request body ended before its Content-Length", nil)
				return
			case failed && ex != nil:
				// The client reset its stream (or quic-go did, for a body
				// over its length): the exchange ends, and so does the
				// request's goroutine, which may wait on no context.
				cl.clientGone()
				cl.send(h3Event{kind: h3Abort})
				return
			case failed:
				return
			}
			cl.in = append(cl.in, chunk...)
			cl.inEnd = end
			cl.inTrailers = trailers
			cl.wakeUpstream()
		})
		if err != nil {
			return
		}
		select {
		case <-cl.more:
		case <-done:
			return
		case <-time.After(cl.lc.srv.cfg.Limits.BodyTimeout.D() + time.Minute):
			return // the loop side gave up on this exchange long ago
		}
	}
}

// wakeUpstream has the exchange's upstream connection run (on the loop).
func (cl *h3Client) wakeUpstream() {
	if ex := cl.ex; ex != nil {
		ex.WakeUpstream()
	}
}

// clientGone ends the exchange of a request whose client went away (on
// the loop).
func (cl *h3Client) clientGone() {
	cl.gone = true
	if ex := cl.ex; ex != nil {
		cl.ex = nil
		ex.ClientGone()
	}
}

func (cl *h3Client) send(ev h3Event) {
	select {
	case cl.events <- ev:
	default:
		// room() keeps data events within the channel's capacity; only a
		// bug gets here. Never block the loop.
		cl.lc.log.Error("HTTP/3 proxy: response event dropped; resetting the stream")
		cl.gone = true
	}
}

func (cl *h3Client) PullBody() ([]byte, bool, error) {
	if cl.gone {
		return nil, false, proxy.ErrClientGone
	}
	if len(cl.in) == 0 && !cl.inEnd {
		if ex := cl.ex; ex != nil {
			ex.AwaitClient(cl.lc.srv.cfg.Limits.BodyTimeout.D())
		}
		return nil, false, nil
	}
	if ex := cl.ex; ex != nil {
		ex.AwaitClient(0)
	}
	return cl.in, cl.inEnd, nil
}

func (cl *h3Client) BodyTaken() {
	cl.in = cl.in[:0]
	if ex := cl.ex; ex != nil {
		ex.AwaitClient(0)
	}
	select {
	case cl.more <- struct{}{}:
	default:
	}
}

func (cl *h3Client) Continue100() {}

func (cl *h3Client) WriteHead(r *h1.Response, conn []byte, bodyLen int64, hasBody bool, up proxy.UpstreamHead) {
	hdr := http.Header{}
	for _, f := range r.Headers {
		if !reframe.CopyRespField(f.Name, conn, r.Status, hasBody) || cl.pr.Drops(f.Name, r.Status) {
			continue
		}
		k := http.CanonicalHeaderKey(string(f.Name))
		hdr[k] = append(hdr[k], strings.Clone(string(f.Value)))
	}
	cl.pr.WriteProxied(headerFields(hdr), r.Status)
	if hasBody && bodyLen >= 0 {
		hdr["Content-Length"] = []string{strconv.FormatInt(bodyLen, 10)}
	}
	n := int64(-1)
	if !hasBody {
		n = 0
	}
	cl.lc.srv.stats.H3Streams.Add(1)
	cl.send(h3Event{kind: h3Head, status: r.Status, header: hdr, bodyLen: n, up: up})
}

func (cl *h3Client) Room() bool {
	return !cl.gone && cl.queued.Load() < h3ProxyChunks && len(cl.pend) < h3PendMax+h3.FrameHeaderRoom
}

func (cl *h3Client) Body(p []byte) {
	if cl.pend == nil {
		cl.pend = make([]byte, h3.FrameHeaderRoom, h3.FrameHeaderRoom+max(len(p), 16<<10))
	}
	cl.pend = append(cl.pend, p...)
	if len(cl.pend)-h3.FrameHeaderRoom >= h3PendMax {
		cl.flush()
	}
}

func (cl *h3Client) End(trailers []byte) {
	cl.flush()
	ev := h3Event{kind: h3End}
	reframe.EachTrailer(trailers, func(_, name, value []byte) {
		if ev.trailers == nil {
			ev.trailers = http.Header{}
		}
		k := http.CanonicalHeaderKey(string(name))
		ev.trailers[k] = append(ev.trailers[k], string(value))
	})
	cl.send(ev)
}

func (cl *h3Client) ReqTrailers() []byte { return cl.inTrailers }
func (cl *h3Client) Fail(status int, up proxy.UpstreamHead) {
	cl.ex = nil
	cl.send(h3Event{kind: h3Fail, status: status, up: up})
}
func (cl *h3Client) Abort()    { cl.ex = nil; cl.send(h3Event{kind: h3Abort}) }
func (cl *h3Client) Wake()     { cl.flush() }
func (cl *h3Client) Finished() { cl.ex = nil }
