package engine

import (
	"strconv"

	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/engine/proxy"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/reframe"
	"github.com/mediaship/engine/h1"
)

// h1Client is the HTTP/1.1 side of an exchange.
type h1Client struct {
	h           *h1Handler
	c           *reactor.Conn
	st          *h1Conn
	minor       int
	log         h1.Request // what fail's answer needs of the request, copied
	reqBody     h1.BodyReader
	taken       int  // input bytes pullBody read, consumed by bodyTaken
	chunk       bool // the response goes chunked
	bodyStarted bool // body bytes have been queued
	lenBuf      [20]byte
	pr          policy.Resp // the route's policy, for the response's fields
}

// startProxy begins the exchange for the request h.req (head n bytes)
// that matched route rt; it runs from the reactor's events, and the
// connection's Serve waits for it (h1Conn.proxy).
func (h *h1Handler) startProxy(c *reactor.Conn, st *h1Conn, d *decision, n int) {
	r := &h.req
	rt := d.route
	cl := &h1Client{h: h, c: c, st: st, minor: r.Minor, pr: d.pr}
	cl.pr.Name = proxiedName(&d.pr)
	// An answer of the engine's own (fail) is sent after the request's
	// bytes are gone: what it needs of the request is copied now.
	cl.log = h1.Request{Method: reframe.Clone(r.Method), Target: reframe.Clone(r.Target), Path: reframe.Clone(r.Path), Minor: r.Minor}
	h.beginRecord(c, st, r)
	st.rec.SetSite(h.srv.siteProxy(), rt.Cfg.Domain)
	ex, tooLarge := h.lc.proxy.NewExchange(cl, c.Peer(), rt, r.Method, r.Path, r.HasBody(), r.ContentLength)
	st.s.Consume(n)
	st.headStarted = false
	st.requests++
	c.SetReadDeadline(0)
	if r.Close {
		st.closeAfter = true
	}
	st.proxy = ex
	if tooLarge {
		st.closeAfter = true // the body stays unread
		ex.Fail(413, "request body over max_body", nil)
		return
	}
	cl.reqBody.ResetRequest(r)
	via := "1.1"
	if r.Minor == 0 {
		via = "1.0"
	}
	head := reframe.Head(&reframe.Request{Method: r.Method, Path: r.Path, Query: r.Query, Host: r.Host,
		Fields: r.Headers, Connection: r.Get("connection"), Via: via, Peer: c.Peer().Addr(),
		TLS: st.s.Session() != nil, ContentLength: r.ContentLength, Chunked: r.Chunked, Upstream: rt.DefaultHost()}, h.srv.proxy.Trusted)
	ex.SetRequest(head, r.Chunked, r.HasBody() && r.Minor == 1 && h1.EqualFold(r.Get("expect"), "100-continue"))
	if prep := h.srv.edgePrepare(d); prep != nil {
		prep(ex)
	}
	ex.Start()
}

func (cl *h1Client) PullBody() ([]byte, bool, error) {
	s := cl.st.s
	for {
		in := s.Input()
		if len(in) == 0 {
			if s.EOF() || cl.c.Closed() {
				return nil, false, proxy.ErrClientGone
			}
			// The body must keep coming: body_timeout between arrivals.
			cl.c.SetReadDeadline(cl.h.srv.cfg.Limits.BodyTimeout.D())
			return nil, false, nil
		}
		n, data, err := cl.reqBody.Read(in)
		if err != nil {
			return nil, false, err
		}
		if len(data) == 0 && n > 0 {
			// Framing only (chunk sizes, the last chunk, trailers): the
			// reader has moved past it, so it is consumed here.
			s.Consume(n)
			if cl.reqBody.Done() {
				return nil, true, nil
			}
			continue
		}
		cl.taken = n
		return data, cl.reqBody.Done(), nil
	}
}

func (cl *h1Client) BodyTaken() {
	cl.st.s.Consume(cl.taken)
	cl.taken = 0
	// The client delivered: no deadline for it until pullBody finds it
	// has nothing again (when the upstream is the slow side, its
	// send timeout, read_timeout, decides).
	cl.c.SetReadDeadline(0)
	cl.c.Wake() // it may have stopped reading with a full buffer
}

func (cl *h1Client) Continue100() { cl.st.s.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n")) }

func (cl *h1Client) WriteHead(r *h1.Response, conn []byte, bodyLen int64, hasBody bool, up proxy.UpstreamHead) {
	h, st := cl.h, cl.st
	b := h1.AppendStatusLine(h.head[:0], r.Status)
	if len(r.Reason) > 0 {
		b = append(b[:len("HTTP/1.1 000 ")], r.Reason...) // the upstream's reason phrase
		b = append(b, "\r\n"...)
	}
	for _, f := range r.Headers {
		if !reframe.CopyRespField(f.Name, conn, r.Status, hasBody) || cl.pr.Drops(f.Name, r.Status) {
			continue
		}
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	w := h1Fields{b}
	cl.pr.WriteProxied(&w, r.Status)
	b = w.b
	if hasBody {
		switch {
		case bodyLen >= 0:
			b = strconv.AppendInt(append(b, "Content-Length: "...), bodyLen, 10)
			b = append(b, "\r\n"...)
		case cl.minor == 1:
			cl.chunk = true
			b = append(b, "Transfer-Encoding: chunked\r\n"...)
		default:
			st.closeAfter = true // HTTP/1.0: the end of the body is the close
		}
	}
	if st.proxy != nil && !st.proxy.BodySent() {
		// The rest of the request body will not be read (the exchange
		// sends no more of it up): no deadline waits for it, so a client
		// that stops its upload on seeing the answer still gets it all.
		st.closeAfter = true
		cl.c.SetReadDeadline(0)
	}
	if h.lc.loop.Draining() || st.s.Retiring() {
		st.closeAfter = true
	}
	switch {
	case st.closeAfter:
		b = append(b, "Connection: close\r\n"...)
	case cl.minor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	b = append(b, "\r\n"...)
	h.head = b
	st.s.StartResponse(&st.resp)
	st.s.Write(b)
	st.logStart = st.s.Sent() + int64(len(b))
	st.rec.Respond(r.Status, false)
	st.rec.SetUpstream(up.Addr, r.Status, up.Time)
}

// room lets the body's first piece follow its head into the same write
// (a small response leaves in one system call), and after that asks for
// the socket to have taken what was queued: bulk bodies move a turn's
// worth at a time (letting more queue up behind a busy socket cost CPU:
// a proxied 100 MB body over TLS took 2.5 s/GiB instead of 2.0).
func (cl *h1Client) Room() bool {
	if !cl.bodyStarted {
		return true
	}
	cl.st.s.Pump()
	return !cl.st.s.Busy()
}

func (cl *h1Client) Body(p []byte) {
	s := cl.st.s
	cl.bodyStarted = true
	if cl.chunk {
		s.Write(strconv.AppendInt(cl.lenBuf[:0], int64(len(p)), 16))
		s.Write([]byte("\r\n"))
		s.WriteBodyBytes(&cl.st.resp, p)
		s.Write([]byte("\r\n"))
		return
	}
	s.WriteBodyBytes(&cl.st.resp, p)
}

// splice moves the rest of a Content-Length body from the upstream's
// socket to a plain TCP client's with splice(2): no copy in userspace.
func (cl *h1Client) Splice(uc *reactor.Conn, n int64) bool {
	if cl.chunk {
		return false // re-framed
	}
	// Plain TCP, or TLS once the kernel seals (the body's first
	// promote_after bytes went through userspace, which promotes).
	return cl.st.s.SpliceFrom(uc, n)
}

func (cl *h1Client) End(trailers []byte) {
	if cl.chunk {
		s := cl.st.s
		s.Write([]byte("0\r\n"))
		if len(trailers) > 0 {
			s.Write(reframe.AppendTrailers(nil, trailers))
		}
		s.Write([]byte("\r\n"))
	}
}

func (cl *h1Client) ReqTrailers() []byte { return cl.reqBody.Trailers() }

func (cl *h1Client) Fail(status int, up proxy.UpstreamHead) {
	st := cl.st
	if up.Addr.IsValid() {
		st.rec.SetUpstream(up.Addr, status, up.Time)
	}
	if st.proxy != nil && !st.proxy.BodySent() {
		st.closeAfter = true // the rest of the request body will not be read
	}
	st.proxy = nil
	if cl.c.Closed() {
		return
	}
	files.ErrorResponse(&st.files.Resp, status)
	cl.h.send(cl.c, st, &cl.log, &decision{pr: cl.pr})
}

func (cl *h1Client) Abort() {
	cl.st.proxy = nil
	cl.c.Abort()
}

func (cl *h1Client) Wake() {
	cl.st.s.Pump()
	cl.c.Wake()
}

func (cl *h1Client) Finished() {
	cl.st.proxy = nil
	cl.st.sending = true // serve waits for the stream to drain, logs, and reads the next request
}

// The client sides are the proxy's clients; HTTP/1.1 takes splices and
// HTTP/2 keeps a byte budget (checked here: the exchange asks for these
// by type assertion).
var (
	_ proxy.Client       = (*h1Client)(nil)
	_ proxy.SpliceClient = (*h1Client)(nil)
	_ proxy.Client       = (*h2Client)(nil)
	_ proxy.RoomBytes    = (*h2Client)(nil)
	_ proxy.Client       = (*h3Client)(nil)
)
