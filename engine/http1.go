package engine

import (
	"errors"
	"time"

	"github.com/mediaship/engine/engine/proxy"

	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/transport"
	"github.com/mediaship/engine/h1"
)

// h1Handler drives HTTP/1.1 on one loop. Its scratch state is shared by
// the loop's connections, which it serves one at a time; what every
// driver on the loop shares is its loop context.
type h1Handler struct {
	// Immutable after construction.
	srv *Server
	lc  *loopCtx

	// Owned by the loop goroutine.
	parser *h1.Parser
	req    h1.Request
	head   []byte
	fields h1Fields
	locBuf []byte // a redirect's Location

	// Immutable: the [redirect_http] listener's handler answers every
	// request with handleRedirect.
	redirect     bool
	redirectPort string // for Location; "" for 443
}

// h1Conn is one connection's HTTP/1.1 state.
type h1Conn struct {
	s           *transport.Stream
	resp        transport.Response // the stream's tally of the response being sent
	files       files.Scratch
	skip        h1.BodySkipper
	skipping    bool // discarding a request body
	bodyWait    bool // the body deadline is set
	sending     bool // a response is queued; its references are held until it is written
	closeAfter  bool // close once the queued response is written
	headStarted bool // the first byte of a request head has arrived
	requests    int
	proxy       *proxy.Exchange  // a proxied request in progress
	challenge   *challengeAnswer // an HTTP-01 lookup on a worker, or its answer

	// For the metrics and the access log of the response being sent.
	rec      accesslog.Record
	reqAt    time.Time // the request's head was parsed (before a worker's fetch)
	logStart int64     // Stream.Sent() when the body started
}

// maxSkipBody bounds a request body discarded to keep a connection alive;
// a larger one closes the connection after the answer instead.
const maxSkipBody = 1 << 20

func newH1Handler(lc *loopCtx, redirect bool) *h1Handler {
	s := lc.srv
	h := &h1Handler{
		srv:      s,
		lc:       lc,
		parser:   h1.NewParser(s.limits),
		head:     make([]byte, 0, 512),
		redirect: redirect,
	}
	if redirect {
		h.redirectPort = redirectPort(s)
	}
	return h
}

// closed releases what a connection's HTTP/1.1 state holds.
func (h *h1Handler) closed(c *reactor.Conn, st *h1Conn) {
	if st.proxy != nil {
		st.proxy.ClientGone()
		st.proxy = nil
	}
	if st.rec.Active() {
		// A response cut short, or a proxied one that never came: log
		// what was sent (499 when no head was).
		h.finishResponse(st)
	}
	st.files.Reset()
}

// serve runs HTTP/1.1 over st's stream as far as it can go.
func (h *h1Handler) serve(c *reactor.Conn, st *h1Conn) {
	lim := &h.srv.cfg.Limits
	s := st.s
	for {
		s.Pump()
		if st.proxy != nil {
			if s.EOF() && st.proxy.BodySent() {
				// The client closed while its response was on the way
				// (nginx's 499): the exchange drains or drops the
				// upstream side, and nobody is left to answer.
				st.proxy.ClientGone()
				st.proxy = nil
				c.Close()
				return
			}
			st.proxy.Pump()
			if st.proxy != nil || c.Closed() {
				return // the exchange moves on the reactor's events
			}
			continue
		}
		if st.sending {
			if s.Busy() {
				return
			}
			h.finishResponse(st)
			st.sending = false
			st.files.Reset()
			if st.closeAfter || s.Retiring() {
				s.CloseGracefully()
				return
			}
		}
		if st.skipping {
			n, err := st.skip.Skip(s.Input())
			s.Consume(n)
			if err != nil {
				h.lc.note("bad request body framing; closing", "peer", c.Peer(), "err", err)
				c.Close()
				return
			}
			if !st.skip.Done() {
				if s.EOF() || st.skip.Consumed() > maxSkipBody {
					c.Close()
					return
				}
				if !st.bodyWait {
					// The whole body must arrive within body_timeout of
					// the response being written (stateBody).
					st.bodyWait = true
					c.SetReadDeadline(lim.BodyTimeout.D())
				}
				return
			}
			st.skipping, st.bodyWait = false, false
		}
		in := s.Input()
		if len(in) == 0 {
			if s.EOF() {
				s.End() // close_notify answered on TLS
				return
			}
			if h.lc.loop.Draining() && st.requests > 0 {
				c.Close() // idle between requests: a client retries on a new connection
				return
			}
			st.headStarted = false
			if st.requests > 0 {
				c.SetReadDeadline(lim.IdleTimeout.D()) // stateIdle
			} // else stateFirst: the header_timeout set at accept still runs
			return
		}
		if !st.headStarted {
			st.headStarted = true
			if st.requests > 0 {
				c.SetReadDeadline(lim.HeaderTimeout.D()) // stateHead
			}
		}
		n, err := h.parser.Parse(in, &h.req)
		if st.reqAt.IsZero() && err != h1.ErrIncomplete {
			st.reqAt = time.Now()
		}
		if err == h1.ErrIncomplete {
			if s.EOF() {
				c.Close() // the client gave up mid-head
			}
			return
		}
		if err != nil {
			var pe *h1.Error
			errors.As(err, &pe)
			h.srv.stats.BadRequests.Add(1)
			h.lc.note("bad request", "peer", c.Peer(), "status", pe.Status, "reason", pe.Reason)
			st.closeAfter = true
			files.ErrorResponse(&st.files.Resp, pe.Status)
			h.send(c, st, nil, nil)
			continue
		}
		if !h.handle(c, st, n) {
			return // a worker is opening files; Serve runs again when it is done
		}
	}
}

// handle answers the parsed request h.req whose head is n bytes. It
// returns false when the answer waits for a worker.
func (h *h1Handler) handle(c *reactor.Conn, st *h1Conn, n int) bool {
	if h.redirect {
		return h.handleRedirect(c, st, n)
	}
	r := &h.req
	f := reqFacts{proto: protoH1, host: r.Host, method: r.Method, path: r.Path, query: r.Query, peer: c.Peer().Addr(), hdr: r, now: h.lc.loop.Now()}
	if sess := st.s.Session(); sess != nil {
		f.tls, f.sni, f.version = true, sess.ServerName, sess.Version
	}
	var d decision
	d, h.lc.hostBuf = h.srv.decide(&f, h.lc.hostBuf)
	resp := &st.files.Resp
	switch {
	case d.slow != nil:
		// A password to check against its hash: on a worker; the request
		// is decided again when it is done (serve runs again).
		c.Go(d.slow)
		return false
	case d.route != nil && d.status == 0:
		h.startProxy(c, st, &d, n)
		return true
	case d.route != nil:
		// Refused: its body, meant for the upstream, is not read.
		st.closeAfter = true
		refusal(resp, &d)
		st.s.Consume(n)
		h.send(c, st, r, &d)
		return true
	case d.page && d.status == 0:
		h.srv.diagPage(resp, &d)
	case d.status != 0:
		refusal(resp, &d)
		if d.status == 400 {
			st.closeAfter = true // a target that is no path: the rest of the stream is suspect
		}
	default:
		s := d.site
		fr := files.Request{Head: string(r.Method) == "HEAD", Path: d.servedPath(r.Path), Query: r.Query, Header: r, AlsoETag: d.alsoETag()}
		if !h.srv.cache.Serve(&s.files, &fr, &st.files) {
			if !st.files.Pending() {
				// Nothing to fetch yet no answer: a bug, not a loop.
				h.lc.log.Error("file layer gave no answer and asked for nothing", "path", string(r.Path))
				files.ErrorResponse(resp, 500)
				break
			}
			cache, site := h.srv.cache, &s.files
			c.Go(func() { st.files.Fetch(cache, site) })
			return false
		}
	}
	// Methods are case-sensitive (RFC 9110 §9.1): "head" is not HEAD.
	if string(r.Method) == "HEAD" {
		resp.NoBody = true
	}
	h.answer(c, st, n, &d)
	return true
}

// answer consumes the request head h.req (n bytes), arranges for its body
// to be discarded, and sends st.files.Resp, as decided by d.
func (h *h1Handler) answer(c *reactor.Conn, st *h1Conn, n int, d *decision) {
	r := &h.req
	st.s.Consume(n)
	st.headStarted = false
	c.SetReadDeadline(0)
	if r.HasBody() {
		if !r.Chunked && r.ContentLength > maxSkipBody {
			st.closeAfter = true // too much to discard: answer, then close
		} else {
			st.skip.Reset(r)
			st.skipping = true
		}
	}
	if r.Close {
		st.closeAfter = true
	}
	h.send(c, st, r, d)
}

// send writes the head of st.files.Resp and queues its body. r is nil
// for a request that could not be parsed, d for one the decision did not
// answer (a proxy exchange's own failure).
func (h *h1Handler) send(c *reactor.Conn, st *h1Conn, r *h1.Request, d *decision) {
	resp := &st.files.Resp
	st.s.StartResponse(&st.resp)
	if h.lc.loop.Draining() || st.s.Retiring() {
		st.closeAfter = true
	}
	var s *site
	if d != nil {
		s = d.site
	}
	var path []byte
	if r != nil {
		path = r.Path
	}
	h.srv.outcome(h.lc.log, h.lc.limiter, d, resp.Status, resp.Err, path, c.Peer())

	h.fields.b = h1.AppendStatusLine(h.head[:0], resp.Status)
	writeFields(&h.fields, resp, s, d.policyResp(), h.lc.httpDate())
	b := h.fields.b
	switch {
	case st.closeAfter:
		b = append(b, "Connection: close\r\n"...)
	case r != nil && r.Minor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	b = append(b, "\r\n"...)
	h.head = b
	st.s.Write(b)
	st.logStart = st.s.Sent() + int64(len(b))

	if !resp.NoBody {
		for _, p := range resp.Parts {
			st.s.WriteBody(&st.resp, partBody(resp, p))
		}
	}
	if s != nil && !resp.NoBody {
		h.lc.bulkPolicy(c, resp, s)
	}
	if s != nil {
		h.srv.fileAnswer(s, resp)
	}
	if !st.rec.Active() { // a proxied request's record began with it
		h.beginRecord(c, st, r)
	}
	switch {
	case d != nil && d.route != nil:
		st.rec.SetSite(h.srv.siteProxy(), d.route.Cfg.Domain)
	case s != nil:
		st.rec.SetSite(s.idx, s.label())
	}
	st.rec.Respond(resp.Status, resp.ReprDigest != "")
	st.sending = true
	st.requests++
}

// beginRecord starts the record of request r (nil: one that could not
// be parsed) on st.
func (h *h1Handler) beginRecord(c *reactor.Conn, st *h1Conn, r *h1.Request) {
	var ver uint16
	if sess := st.s.Session(); sess != nil {
		ver = sess.Version
	}
	withLog := h.srv.alog != nil
	if r == nil {
		st.rec.Begin(st.reqAt, protoH1, c.Peer().Addr(), ver, h.srv.siteNone(), false, nil, nil)
	} else {
		st.rec.Begin(st.reqAt, protoH1, c.Peer().Addr(), ver, h.srv.siteNone(), withLog, r.Method, r.Target)
		st.rec.SetMinor(uint8(r.Minor))
		if withLog {
			ref, ua := r.Get("referer"), r.Get("user-agent")
			st.rec.Headers(ref, ref != nil, ua, ua != nil)
		}
	}
	st.reqAt = time.Time{}
}

// finishResponse counts the response st sent and logs it.
func (h *h1Handler) finishResponse(st *h1Conn) {
	sent := st.s.Sent() - st.logStart
	if st.rec.Status() == 0 {
		sent = 0 // no head went out: logStart is the last response's
	}
	h.lc.logResponse(&st.rec, sent, st.s.KernelTLS())
}
