package engine

import (
	"strconv"
	"strings"

	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/engine/proxy"

	"golang.org/x/net/http2/hpack"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reframe"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/h1"
	"github.com/mediaship/engine/h2"
)

// h2Client is the HTTP/2 side of an exchange: one stream. Request body
// bytes wait in in (at most the stream's window: the client may send no
// more until Consumed); response body bytes wait in out until Produce
// pulls them into frames (at most proxy_h2_tls_max_send_buffer_bytes per
// stream, proxy_h2_tls_connection_send_buffer_bytes per connection).
type h2Client struct {
	pr      *policy.Resp // the route's policy (the stream's decision's)
	hc      *h2Conn
	hs      *h2Strm
	ex      *proxy.Exchange
	in      []byte
	inEnd   bool
	gone    bool // the stream was reset or ended before the exchange
	out     []byte
	outBase int64 // body offset of out[0]
	ready   int64 // body bytes made ready so far
	fields  []hpack.HeaderField
}

// startProxyH2 begins the exchange for stream hs, whose request matched
// route rt.
func (hc *h2Conn) startProxyH2(hs *h2Strm, rt *routing.Route) {
	hh := hc.h
	st := hs.st
	r := &st.Req
	cl := &h2Client{hc: hc, hs: hs, pr: &hs.d.pr}
	hs.proxy = cl
	hs.rec.SetSite(hh.srv.siteProxy(), rt.Cfg.Domain)
	path, query := splitTarget(r.Path)
	ex, tooLarge := hh.lc.proxy.NewExchange(cl, hc.c.Peer(), rt, r.Method, path, !st.RemoteDone(), r.ContentLength)
	cl.ex = ex
	if tooLarge {
		ex.Fail(413, "request body over max_body", nil)
		return
	}
	fields := make([]h1.Header, 0, len(r.Fields))
	for _, f := range r.Fields {
		if !reframe.ValidFieldValue(f.Value) {
			// HTTP/2 forbids only NUL, CR and LF in values; an HTTP/1.1
			// upstream must not get other controls either.
			ex.Fail(400, "control character in a request field", nil)
			return
		}
		fields = append(fields, h1.Header{Name: f.Name, Value: f.Value})
	}
	chunked := !ex.BodySent() && r.ContentLength < 0
	ex.SetRequest(reframe.Head(&reframe.Request{Method: r.Method, Path: path, Query: query, Host: r.Get("host"),
		Fields: fields, Via: "2", Peer: hc.c.Peer().Addr(), TLS: hc.s.Session() != nil,
		ContentLength: r.ContentLength, Chunked: chunked, Upstream: rt.DefaultHost()}, hh.srv.proxy.Trusted), chunked, false)
	if prep := hh.srv.edgePrepare(&hs.d); prep != nil {
		prep(ex)
	}
	hc.conn.MarkBusy(st)
	ex.Start()
}

// Body takes request DATA for a proxied stream (h2.BodyHandler); other
// streams' bodies are discarded unread.
func (hc *h2Conn) Body(st *h2.Stream, p []byte, end bool) {
	hs, _ := st.User.(*h2Strm)
	if hs == nil || hs.proxy == nil || hs.proxy.ex == nil {
		return
	}
	cl := hs.proxy
	cl.in = append(cl.in, p...)
	cl.inEnd = cl.inEnd || end
	cl.ex.WakeUpstream() // the exchange pumps on the upstream's turn, not inside Feed
}

func (cl *h2Client) PullBody() ([]byte, bool, error) {
	if cl.gone {
		return nil, false, proxy.ErrClientGone
	}
	if len(cl.in) == 0 && !cl.inEnd {
		// The upstream waits for the client: body_timeout bounds it.
		cl.ex.AwaitClient(cl.hc.h.srv.cfg.Limits.BodyTimeout.D())
		return nil, false, nil
	}
	cl.ex.AwaitClient(0)
	return cl.in, cl.inEnd, nil
}

func (cl *h2Client) BodyTaken() {
	n := len(cl.in)
	cl.in = cl.in[:0]
	cl.ex.AwaitClient(0)
	cl.hc.conn.Consumed(cl.hs.st, n)
	cl.Wake() // the WINDOW_UPDATE goes out now, not with the next event
}

func (cl *h2Client) Continue100() {}

func (cl *h2Client) WriteHead(r *h1.Response, conn []byte, bodyLen int64, hasBody bool, up proxy.UpstreamHead) {
	hc, hs := cl.hc, cl.hs
	f := cl.fields[:0]
	for _, h := range r.Headers {
		if !reframe.CopyRespField(h.Name, conn, r.Status, hasBody) || cl.pr.Drops(h.Name, r.Status) {
			continue
		}
		f = append(f, hpack.HeaderField{Name: strings.ToLower(string(h.Name)), Value: string(h.Value)})
	}
	w := hpackFields{f}
	cl.pr.WriteProxied(&w, r.Status)
	f = w.f
	if hasBody && bodyLen >= 0 {
		f = append(f, hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(bodyLen, 10)})
	}
	cl.fields = f
	hc.h.srv.stats.H2Streams.Add(1)
	hs.rec.Respond(r.Status, false)
	hs.rec.SetUpstream(up.Addr, r.Status, up.Time)
	n := int64(0)
	if hasBody {
		n = -1 // streamed: BodyReady as the upstream delivers, EndBody at its end
	}
	hc.conn.Respond(hs.st, r.Status, f, n)
}

func (cl *h2Client) Room() bool {
	srv := cl.hc.h.srv
	rs := &srv.cfg.Runtime.Settings
	// Past the stream's budget, or beyond a floor the connection's or the
	// server's, the upstream waits for this client to take bytes: take
	// wakes it. No other stream's progress is needed, so streams whose
	// clients stop reading slow the others to the floor, never stop them.
	if cl.gone || len(cl.out) >= int(rs.ProxyH2TLSMaxSendBuffer) {
		return false
	}
	return len(cl.out) < h2ProxyFloor ||
		cl.hc.proxyBuffered < int(rs.ProxyH2TLSConnectionSendBuffer) && srv.proxy.H2Buffered.Load() < int64(rs.ProxyH2TLSTotalSendBuffer)
}

// roomBytes is how many more body bytes room allows: the exchange passes
// no more of a Content-Length body at once, so a stream's buffer stays
// within its budget instead of overshooting it by a whole upstream read.
func (cl *h2Client) RoomBytes() int {
	srv := cl.hc.h.srv
	rs := &srv.cfg.Runtime.Settings
	limit := int(rs.ProxyH2TLSMaxSendBuffer)
	if cl.hc.proxyBuffered >= int(rs.ProxyH2TLSConnectionSendBuffer) || srv.proxy.H2Buffered.Load() >= int64(rs.ProxyH2TLSTotalSendBuffer) {
		limit = min(limit, h2ProxyFloor)
	}
	return max(limit-len(cl.out), 0)
}

// h2ProxyFloor is what a proxied HTTP/2 stream may buffer even when the
// server-wide budget is spent.
const h2ProxyFloor = 32 << 10

func (cl *h2Client) Body(p []byte) {
	cl.out = append(cl.out, p...)
	cl.ready += int64(len(p))
	cl.hc.proxyBuffered += len(p)
	cl.hc.h.srv.proxy.H2Buffered.Add(int64(len(p)))
	cl.hc.conn.BodyReady(cl.hs.st, cl.ready)
}

// end ends the stream's body, with the upstream's trailers in a HEADERS
// frame after the last DATA when it sent any.
func (cl *h2Client) End(trailers []byte) {
	cl.hc.conn.EndBody(cl.hs.st, reframe.TrailerFields(trailers))
}

// reqTrailers are the request's trailer fields as lines, for a body
// re-framed chunked to the upstream (reframe.AppendTrailers filters them).
func (cl *h2Client) ReqTrailers() []byte {
	var b []byte
	for _, f := range cl.hs.st.Trailers {
		if reframe.ValidFieldValue(f.Value) {
			b = append(append(append(append(b, f.Name...), ": "...), f.Value...), "\r\n"...)
		}
	}
	return b
}

// take copies n bytes of the body from off into a DATA frame (called by
// the stream's Sink) and drops them: they have been copied.
func (cl *h2Client) take(out interface{ Write([]byte) }, hdr []byte, off int64, n int) bool {
	i := int(off - cl.outBase)
	if i < 0 || i+n > len(cl.out) {
		return false
	}
	out.Write(hdr)
	out.Write(cl.out[i : i+n])
	rest := copy(cl.out, cl.out[i+n:])
	cl.out = cl.out[:rest]
	cl.outBase = off + int64(n)
	cl.hc.proxyBuffered -= i + n
	cl.hc.h.srv.proxy.H2Buffered.Add(-int64(i + n))
	if cl.ex != nil {
		cl.ex.WakeUpstream() // room again: read more from the upstream
	}
	return true
}

func (cl *h2Client) Fail(status int, up proxy.UpstreamHead) {
	hc, hs := cl.hc, cl.hs
	cl.detach()
	if cl.gone || hc.c.Closed() {
		return
	}
	if up.Addr.IsValid() {
		hs.rec.SetUpstream(up.Addr, status, up.Time)
	}
	hs.proxy = nil
	files.ErrorResponse(&hs.files.Resp, status)
	hc.respond(hs)
}

func (cl *h2Client) Abort() {
	cl.detach()
	if !cl.gone {
		cl.hc.conn.AbortStream(cl.hs.st)
		cl.Wake() // the RST_STREAM goes out
	}
}

func (cl *h2Client) Wake() {
	cl.hc.output()
	cl.hc.c.Wake()
}

func (cl *h2Client) Finished() { cl.detach() }

// detach ends the exchange's hold on the stream (MarkBusy).
func (cl *h2Client) detach() {
	if cl.ex != nil {
		cl.ex = nil
		cl.hc.conn.WorkDone(cl.hs.st)
	}
}

// streamDone releases a proxied stream: the client reset it, or its
// response was produced to the end.
func (cl *h2Client) streamDone() {
	cl.hc.proxyBuffered -= len(cl.out)
	cl.hc.h.srv.proxy.H2Buffered.Add(-int64(len(cl.out)))
	cl.out, cl.in = nil, nil
	if !cl.hs.st.Reset {
		// Produced to the end: a response without a body ends its stream
		// as its head goes out, while the exchange still runs; it
		// finishes (and pools the upstream connection) on its own.
		return
	}
	cl.gone = true
	if ex := cl.ex; ex != nil {
		cl.detach()
		ex.ClientGone()
	}
}
