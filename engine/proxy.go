package engine

import (
	"strconv"
	"time"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/h1"
)

// The reverse proxy for HTTP/1.1 clients. A request that matches a route
// becomes an exchange: a fresh HTTP/1.1 request written to a pooled
// upstream connection on the client's own loop, its body streamed up as
// it arrives, and the response streamed back as the client takes it.
// Each side moves only when the other has room (the client's queued
// output written, the upstream's queued output written), so memory per
// exchange is one input buffer on each side and one copy in flight.

// proxyPool is one loop's idle upstream connections, newest last.
type proxyPool struct {
	h      *h1Handler
	idle   map[*upstream][]*upConn
	parser *h1.Parser // upstream response heads
	buf    []byte     // scratch for heads
}

func newProxyPool(h *h1Handler) *proxyPool {
	return &proxyPool{h: h, idle: map[*upstream][]*upConn{},
		parser: h1.NewParser(h1.Limits{MaxHeadBytes: int(h.srv.cfg.Limits.MaxHeaderBytes), MaxHeaders: h.srv.cfg.Limits.MaxHeaders * 2})}
}

// get returns an idle connection to u, or nil.
func (p *proxyPool) get(u *upstream) *upConn {
	l := p.idle[u]
	for len(l) > 0 {
		uc := l[len(l)-1]
		l = l[:len(l)-1]
		p.idle[u] = l
		if !uc.c.Closed() && !uc.c.EOF() && len(uc.c.Input()) == 0 {
			uc.c.SetReadDeadline(0)
			return uc
		}
		uc.c.Close()
	}
	return nil
}

// put keeps uc for the next exchange, or closes it when the upstream's
// share of idle connections is full.
func (p *proxyPool) put(uc *upConn, r *route) {
	uc.ex = nil
	if len(p.idle[uc.up]) >= *r.cfg.MaxIdle || p.h.loop.Draining() {
		uc.c.Close()
		return
	}
	uc.c.SetReadDeadline(r.cfg.IdleTimeout.D())
	p.idle[uc.up] = append(p.idle[uc.up], uc)
}

func (p *proxyPool) remove(uc *upConn) {
	l := p.idle[uc.up]
	for i, x := range l {
		if x == uc {
			p.idle[uc.up] = append(l[:i], l[i+1:]...)
			return
		}
	}
}

// upConn is one connection to an upstream, served by its own reactor
// handler.
type upConn struct {
	c    *reactor.Conn
	up   *upstream
	pool *proxyPool
	ex   *exchange // nil while idle in the pool
	used int       // exchanges it has carried
}

func (uc *upConn) Open(c *reactor.Conn) { uc.c = c }

func (uc *upConn) Serve(c *reactor.Conn) {
	if uc.ex != nil {
		uc.ex.pump()
		return
	}
	// Idle: the upstream closed it, or sent bytes nobody asked for.
	if c.EOF() || len(c.Input()) > 0 {
		c.Close()
	}
}

func (uc *upConn) Closed(c *reactor.Conn) {
	if uc.ex != nil {
		uc.ex.upstreamClosed()
		return
	}
	uc.pool.remove(uc)
}

// exchange is one proxied request and its response.
type exchange struct {
	h     *h1Handler
	c     *reactor.Conn // the client
	st    *h1Conn
	r     *route
	up    *upConn
	tried []*upstream // upstreams that failed to connect for this request

	head       []byte // the request head for the upstream (kept for a retry)
	isHead     bool   // HEAD: no response body
	idempotent bool
	expect100  bool // the client waits for 100 Continue before its body
	clientMin  int  // the client's HTTP/1.minor
	logReq     h1.Request

	reqBody     h1.BodyReader
	reqHasBody  bool
	reqChunked  bool  // re-framed chunked to the upstream
	reqSent     int64 // body data bytes sent up
	headSent    bool
	reqDone     bool
	retried     bool
	waitingResp bool // the response deadline is set

	resp        h1.Response
	respHead    bool // the client has the response head
	respBody    h1.BodyReader
	respChunked bool // re-framed chunked to the client
	respDone    bool
	done        bool
}

// idempotentMethods may be retried on a fresh connection when a reused
// one was closed under them (RFC 9110 §9.2.2), if they carry no body.
var idempotentMethods = map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PUT": true, "DELETE": true}

// startProxy begins the exchange for the request h.req (head n bytes) that
// matched route rt. It returns true: the exchange runs from the reactor's
// events, and the connection's Serve waits for it.
func (h *h1Handler) startProxy(c *reactor.Conn, st *h1Conn, rt *route, n int) {
	r := &h.req
	rc := rt.cfg
	ex := &exchange{h: h, c: c, st: st, r: rt, isHead: string(r.Method) == "HEAD", clientMin: r.Minor,
		idempotent: idempotentMethods[string(r.Method)] && !r.HasBody()}
	ex.logReq = h1.Request{Method: clone(r.Method), Target: clone(r.Target), Path: clone(r.Path), Minor: r.Minor}
	for _, name := range []string{"referer", "user-agent"} {
		if v := r.Get(name); v != nil {
			ex.logReq.Headers = append(ex.logReq.Headers, h1.Header{Name: []byte(name), Value: clone(v)})
		}
	}
	st.s.Consume(n)
	st.headStarted = false
	st.requests++
	c.SetReadDeadline(0)
	if r.Close {
		st.closeAfter = true
	}
	st.proxy = ex
	if rc.MaxBody > 0 && r.ContentLength > int64(rc.MaxBody) {
		st.closeAfter = true // the body stays unread
		ex.fail(413, "request body over max_body", nil)
		return
	}
	ex.reqHasBody = r.HasBody()
	ex.reqChunked = r.Chunked
	ex.reqBody.ResetRequest(r)
	ex.reqDone = !ex.reqHasBody
	ex.expect100 = ex.reqHasBody && r.Minor == 1 && h1.EqualFold(r.Get("expect"), "100-continue")
	ex.head = h.upstreamHead(c, st, r)
	if !ex.connect(false) {
		return
	}
	ex.pump()
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// hopByHop are the fields a proxy never forwards (RFC 9110 §7.6.1), with
// the framing fields it writes itself and the forwarding fields it
// rebuilds.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "te": true, "trailer": true, "transfer-encoding": true,
	"upgrade": true, "proxy-connection": true, "proxy-authenticate": true, "proxy-authorization": true,
	"content-length": true, "expect": true,
}

// dropField reports whether a field of a message with the given
// Connection header value must not be forwarded.
func dropField(name, connection []byte) bool {
	var buf [64]byte
	low := buf[:0]
	if len(name) > len(buf) {
		low = make([]byte, 0, len(name))
	}
	for _, ch := range name {
		if ch >= 'A' && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		low = append(low, ch)
	}
	if hopByHop[string(low)] || len(low) > 6 && string(low[:6]) == "proxy-" {
		return true
	}
	return connection != nil && tokenListHasLower(connection, low)
}

// tokenListHasLower reports whether the comma-separated list v names
// tok, which is lowercase (v is compared ASCII case-insensitively).
func tokenListHasLower(v, tok []byte) bool {
	for len(v) > 0 {
		i := 0
		for i < len(v) && v[i] != ',' {
			i++
		}
		item := v[:i]
		for len(item) > 0 && (item[0] == ' ' || item[0] == '\t') {
			item = item[1:]
		}
		for len(item) > 0 && (item[len(item)-1] == ' ' || item[len(item)-1] == '\t') {
			item = item[:len(item)-1]
		}
		if h1.EqualFold(item, string(tok)) {
			return true
		}
		if i == len(v) {
			break
		}
		v = v[i+1:]
	}
	return false
}

// upstreamHead writes the request for the upstream: the client's method,
// path and fields, minus hop-by-hop fields, plus the forwarding fields.
func (h *h1Handler) upstreamHead(c *reactor.Conn, st *h1Conn, r *h1.Request) []byte {
	peer := c.Peer().Addr().Unmap()
	trusted := false
	for _, p := range h.srv.proxy.trusted {
		if p.Contains(peer) {
			trusted = true
			break
		}
	}
	proto := "http"
	if st.s.Session() != nil {
		proto = "https"
	}
	b := make([]byte, 0, 512)
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, r.Path...)
	if r.Query != nil {
		b = append(b, '?')
		b = append(b, r.Query...)
	}
	b = append(b, " HTTP/1.1\r\n"...)
	conn := r.Get("connection")
	var xff []byte
	sawHost := false
	for _, f := range r.Headers {
		if dropField(f.Name, conn) {
			continue
		}
		switch {
		case h1.EqualFold(f.Name, "host"):
			sawHost = true
		case h1.EqualFold(f.Name, "x-forwarded-for"):
			if trusted {
				if xff != nil {
					xff = append(xff, ", "...)
				}
				xff = append(xff, f.Value...)
			}
			continue
		case h1.EqualFold(f.Name, "x-forwarded-proto"), h1.EqualFold(f.Name, "x-forwarded-host"), h1.EqualFold(f.Name, "forwarded"):
			if !trusted {
				continue
			}
		}
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	if !sawHost && r.Host != nil {
		b = append(append(append(b, "Host: "...), r.Host...), "\r\n"...)
	}
	if xff != nil {
		xff = append(xff, ", "...)
	}
	xff = peer.AppendTo(xff)
	b = append(append(append(b, "X-Forwarded-For: "...), xff...), "\r\n"...)
	if !trusted || r.Get("x-forwarded-proto") == nil {
		b = append(append(append(b, "X-Forwarded-Proto: "...), proto...), "\r\n"...)
	}
	if r.Host != nil && (!trusted || r.Get("x-forwarded-host") == nil) {
		b = append(append(append(b, "X-Forwarded-Host: "...), r.Host...), "\r\n"...)
	}
	// Forwarded (RFC 7239): for= the client, host=, proto=; an IPv6
	// address is a quoted, bracketed string.
	if fw := r.Get("forwarded"); !trusted || fw == nil {
		b = append(b, "Forwarded: for="...)
	} else {
		b = append(append(b, "Forwarded: "...), fw...)
		b = append(b, ", for="...)
	}
	if peer.Is6() {
		b = append(peer.AppendTo(append(b, "\"["...)), "]\""...)
	} else {
		b = peer.AppendTo(b)
	}
	if r.Host != nil && httpToken(r.Host) {
		b = append(append(b, ";host="...), r.Host...)
	}
	b = append(append(append(b, ";proto="...), proto...), "\r\n"...)
	b = append(b, "Via: 1."...)
	b = strconv.AppendInt(b, int64(r.Minor), 10)
	b = append(b, " engine\r\n"...)
	switch {
	case r.Chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case r.ContentLength >= 0:
		b = strconv.AppendInt(append(b, "Content-Length: "...), r.ContentLength, 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// httpToken reports whether v can be a Forwarded parameter value without
// quoting (a host, possibly with a port).
func httpToken(v []byte) bool {
	for _, ch := range v {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '.' || ch == '_') {
			return false
		}
	}
	return len(v) > 0
}

// connect gives the exchange an upstream connection: a pooled one unless
// fresh is set, else a new one. It returns false when it answered the
// client instead (every upstream down).
func (ex *exchange) connect(fresh bool) bool {
	pool := ex.h.proxy
	now := time.Now().UnixNano()
	for {
		u := ex.r.pickExcept(now, ex.tried)
		if u == nil {
			ex.fail(502, "no upstream available (every one failed recently)", nil)
			return false
		}
		if !fresh {
			if uc := pool.get(u); uc != nil {
				uc.ex = ex
				uc.used++
				ex.up = uc
				u.active.Add(1)
				ex.h.srv.proxy.stats.reused.Add(1)
				return true
			}
		}
		uc := &upConn{up: u, pool: pool, ex: ex}
		if _, err := ex.h.loop.Dial(u.addr, ex.r.cfg.ConnectTimeout.D(), uc); err != nil {
			ex.upstreamFailed(u, err)
			continue
		}
		uc.used = 1
		ex.up = uc
		u.active.Add(1)
		ex.h.srv.proxy.stats.opened.Add(1)
		return true
	}
}

// pickExcept is pick, leaving out upstreams in skip.
func (r *route) pickExcept(now int64, skip []*upstream) *upstream {
	for range len(r.ups) {
		u := r.pick(now)
		if u == nil {
			return nil
		}
		tried := false
		for _, s := range skip {
			tried = tried || s == u
		}
		if !tried {
			return u
		}
		if len(skip) >= len(r.ups) {
			return nil
		}
	}
	return nil
}

// upstreamFailed marks u down for a while after a failed connection.
func (ex *exchange) upstreamFailed(u *upstream, err error) {
	ex.h.srv.proxy.stats.failed.Add(1)
	u.downUntil.Store(time.Now().Add(upstreamBackoff).UnixNano())
	ex.tried = append(ex.tried, u)
	ex.h.limiter.log(ex.h.log, "upstream connection failed; trying another, and skipping this one for a while",
		"route", ex.r.key, "upstream", u.name, "err", err, "backoff", upstreamBackoff)
}

// pump moves the exchange on as far as it can go: the request up, the
// response down. Both connections' events call it.
func (ex *exchange) pump() {
	if ex.done || ex.up == nil {
		return
	}
	uc := ex.up.c
	s := ex.st.s
	if !uc.Connected() {
		return
	}
	if !ex.headSent {
		ex.headSent = true
		uc.Write(ex.head)
		uc.Wake() // flushed by its own turn: pump may run from the client's
		if ex.expect100 {
			s.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
			ex.wakeClient()
		}
	}
	ex.pumpRequest()
	if ex.done {
		return
	}
	if !ex.respHead && !ex.readHead() {
		return
	}
	ex.pumpResponse()
}

// pumpRequest moves request body bytes from the client to the upstream,
// as fast as the upstream takes them.
func (ex *exchange) pumpRequest() {
	uc, c, s := ex.up.c, ex.c, ex.st.s
	rc := ex.r.cfg
	for !ex.reqDone && !uc.Pending() {
		in := s.Input()
		if len(in) == 0 {
			if s.EOF() || c.Closed() {
				// The client went away mid-body: the upstream must not
				// take a short body for a whole one.
				ex.abort("client closed during the request body")
				return
			}
			c.SetReadDeadline(ex.h.srv.cfg.Limits.BodyTimeout.D())
			return
		}
		n, data, err := ex.reqBody.Read(in)
		if err != nil {
			ex.st.closeAfter = true
			ex.fail(400, "bad request body framing", err)
			return
		}
		if rc.MaxBody > 0 && ex.reqSent+int64(len(data)) > int64(rc.MaxBody) {
			ex.st.closeAfter = true
			ex.fail(413, "request body over max_body", nil)
			return
		}
		if len(data) > 0 {
			if ex.reqChunked {
				uc.Write(strconv.AppendInt(ex.h.proxy.buf[:0], int64(len(data)), 16))
				uc.Write([]byte("\r\n"))
				uc.Write(data)
				uc.Write([]byte("\r\n"))
			} else {
				uc.Write(data)
			}
			ex.reqSent += int64(len(data))
		}
		s.Consume(n)
		c.Wake() // it may have stopped reading with a full buffer
		if ex.reqBody.Done() {
			ex.reqDone = true
			c.SetReadDeadline(0)
			if ex.reqChunked {
				uc.Write([]byte("0\r\n\r\n"))
			}
		}
		ex.up.c.Wake()
	}
	if ex.reqDone && !uc.Pending() && !ex.respHead && !ex.waitingResp {
		ex.waitingResp = true
		uc.SetReadDeadline(rc.ResponseTimeout.D())
	}
}

// readHead parses the upstream's response head and writes the client's.
// It returns false while the head is incomplete or after failing.
func (ex *exchange) readHead() bool {
	uc := ex.up.c
	for {
		in := uc.Input()
		n, err := ex.h.proxy.parser.ParseResponse(in, &ex.resp)
		if err == h1.ErrIncomplete {
			if uc.EOF() {
				ex.upstreamClosed()
			}
			return false
		}
		if err != nil {
			ex.h.srv.proxy.stats.badResponses.Add(1)
			uc.Close()
			ex.fail(502, "bad response from upstream", err)
			return false
		}
		if ex.resp.Status >= 100 && ex.resp.Status < 200 {
			uc.Consume(n)
			if ex.resp.Status == 101 {
				uc.Close()
				ex.fail(502, "upstream switched protocols (not supported by the proxy)", nil)
				return false
			}
			continue // 100 Continue and other interim responses: ours was sent already
		}
		uc.Consume(n)
		ex.writeClientHead(ex.resp.Get("connection"))
		ex.respHead = true
		uc.SetReadDeadline(0)
		return true
	}
}

// writeClientHead writes the response head to the client; the parsed
// response (aliasing the upstream's input) is still valid.
func (ex *exchange) writeClientHead(conn []byte) {
	h, st, r := ex.h, ex.st, &ex.resp
	hasBody := r.BodyFollows(ex.isHead)
	b := h1.AppendStatusLine(h.head[:0], r.Status)
	if len(r.Reason) > 0 {
		b = append(b[:len("HTTP/1.1 000 ")], r.Reason...) // the upstream's reason phrase
		b = append(b, "\r\n"...)
	}
	for _, f := range r.Headers {
		if dropField(f.Name, conn) && !(h1.EqualFold(f.Name, "content-length") && !hasBody) {
			continue
		}
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	if hasBody {
		switch {
		case r.ContentLength >= 0:
			b = strconv.AppendInt(append(b, "Content-Length: "...), r.ContentLength, 10)
			b = append(b, "\r\n"...)
		case ex.clientMin == 1:
			ex.respChunked = true
			b = append(b, "Transfer-Encoding: chunked\r\n"...)
		default:
			st.closeAfter = true // HTTP/1.0: the end of the body is the close
		}
		ex.respBody.ResetResponse(r)
	} else {
		ex.respDone = true
	}
	if !ex.reqDone {
		st.closeAfter = true // the rest of the request body will not be read
	}
	if h.loop.Draining() || st.s.Retiring() {
		st.closeAfter = true
	}
	switch {
	case st.closeAfter:
		b = append(b, "Connection: close\r\n"...)
	case ex.clientMin == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	b = append(b, "\r\n"...)
	h.head = b
	st.s.StartResponse(&st.resp)
	st.s.Write(b)
	st.logStart = st.s.Sent() + int64(len(b))
	h.srv.stats.requests.Add(1)
	if h.srv.alog != nil {
		h.startLogLine(ex.c, st, &ex.logReq, r.Status)
	}
	ex.wakeClient()
}

// pumpResponse moves response body bytes from the upstream to the client,
// as fast as the client takes them.
func (ex *exchange) pumpResponse() {
	uc, s := ex.up.c, ex.st.s
	for !ex.respDone {
		s.Pump()
		if s.Busy() {
			uc.SetReadDeadline(0) // the client is the slow side: no upstream deadline
			return
		}
		in := uc.Input()
		if len(in) == 0 {
			if uc.EOF() {
				if ex.respBody.UntilEOF() {
					ex.respDone = true
					break
				}
				ex.h.limiter.log(ex.h.log, "upstream closed in the middle of a response body; resetting the client connection",
					"route", ex.r.key, "upstream", ex.up.up.name)
				ex.abort("upstream closed mid-body")
				return
			}
			uc.SetReadDeadline(ex.r.cfg.ReadTimeout.D())
			return
		}
		n, data, err := ex.respBody.Read(in)
		if err != nil {
			ex.h.srv.proxy.stats.badResponses.Add(1)
			ex.h.limiter.log(ex.h.log, "bad body framing from upstream; resetting the client connection",
				"route", ex.r.key, "upstream", ex.up.up.name, "err", err)
			ex.abort("bad upstream body framing")
			return
		}
		if len(data) > 0 {
			if ex.respChunked {
				s.Write(strconv.AppendInt(ex.h.proxy.buf[:0], int64(len(data)), 16))
				s.Write([]byte("\r\n"))
				s.Write(data)
				s.Write([]byte("\r\n"))
			} else {
				s.Write(data)
			}
		}
		uc.Consume(n)
		uc.Wake() // it may have stopped reading with a full buffer
		if ex.respBody.Done() {
			ex.respDone = true
		}
		ex.wakeClient()
	}
	if ex.respChunked {
		s.Write([]byte("0\r\n\r\n"))
	}
	ex.finish()
}

func (ex *exchange) wakeClient() {
	ex.st.s.Pump()
	ex.c.Wake()
}

// finish ends an exchange whose response is all queued: the upstream
// connection goes back to the pool if it can carry another, and the
// client's connection moves on to its next request.
func (ex *exchange) finish() {
	ex.done = true
	uc := ex.up
	ex.up = nil
	uc.up.active.Add(-1)
	reusable := ex.reqDone && !ex.resp.Close && !ex.respBody.UntilEOF() && !uc.c.EOF() && len(uc.c.Input()) == 0 && !uc.c.Pending()
	if reusable {
		ex.h.proxy.put(uc, ex.r)
	} else {
		uc.ex = nil
		uc.c.Close()
	}
	ex.st.proxy = nil
	ex.st.sending = true
	ex.wakeClient()
}

// upstreamClosed handles the upstream connection going away before the
// response head: a failed connect, a reused connection the upstream had
// closed (retried once when that is safe), a timeout or a reset.
func (ex *exchange) upstreamClosed() {
	if ex.done || ex.up == nil {
		return
	}
	uc := ex.up
	if ex.respHead {
		if uc.c.EOF() && !uc.c.TimedOut() {
			ex.pump() // EOF after the head: the body's end or a cut, pump tells
			if ex.done {
				return
			}
		}
		ex.abort("upstream connection lost mid-response")
		return
	}
	ex.up = nil
	uc.ex = nil
	uc.up.active.Add(-1)
	switch {
	case uc.c.DialErr() != nil:
		ex.upstreamFailed(uc.up, uc.c.DialErr())
		if ex.connect(true) {
			ex.pump()
		}
	case uc.c.TimedOut() && ex.waitingResp:
		ex.h.srv.proxy.stats.timeouts.Add(1)
		ex.fail(504, "upstream response_timeout", nil)
	case uc.c.TimedOut():
		ex.h.srv.proxy.stats.timeouts.Add(1)
		ex.fail(504, "upstream timed out taking the request", nil)
	case uc.used > 1 && ex.idempotent && !ex.retried:
		// A pooled connection the upstream closed as it was reused:
		// safe to send again on a fresh one.
		ex.retried = true
		ex.h.srv.proxy.stats.retried.Add(1)
		ex.headSent, ex.waitingResp = false, false
		if ex.connect(true) {
			ex.pump()
		}
	default:
		ex.fail(502, "upstream closed the connection without a response", nil)
	}
}

// fail answers the client with status when no response head has gone out
// yet, and resets the client connection otherwise.
func (ex *exchange) fail(status int, cause string, err error) {
	if ex.respHead {
		ex.abort(cause)
		return
	}
	h, st := ex.h, ex.st
	up := ""
	if ex.up != nil {
		up = ex.up.up.name
		ex.up.up.active.Add(-1)
		ex.up.ex = nil
		ex.up.c.Close()
		ex.up = nil
	}
	args := []any{"status", status, "route", ex.r.key, "path", string(ex.logReq.Path), "peer", ex.c.Peer()}
	if up != "" {
		args = append(args, "upstream", up)
	}
	if err != nil {
		args = append(args, "err", err)
	}
	if status >= 500 {
		h.log.Warn("proxy: "+cause, args...)
	} else {
		h.limiter.log(h.log, "proxy: "+cause, args...)
	}
	ex.done = true
	if !ex.reqDone {
		st.closeAfter = true
	}
	files.ErrorResponse(&st.files.Resp, status)
	st.proxy = nil
	if ex.c.Closed() {
		return
	}
	h.send(ex.c, st, &ex.logReq, nil)
	ex.wakeClient()
}

// abort ends an exchange that cannot finish: both connections reset, so
// that neither side takes a cut message for a whole one.
func (ex *exchange) abort(cause string) {
	if ex.done {
		return
	}
	ex.done = true
	if uc := ex.up; uc != nil {
		ex.up = nil
		uc.ex = nil
		uc.up.active.Add(-1)
		uc.c.Abort()
	}
	ex.st.proxy = nil
	ex.h.log.Debug("proxy exchange aborted", "route", ex.r.key, "cause", cause, "peer", ex.c.Peer())
	ex.c.Abort()
}

// clientClosed ends the exchange of a client connection that closed.
func (ex *exchange) clientClosed() {
	if ex.done {
		return
	}
	ex.done = true
	if uc := ex.up; uc != nil {
		ex.up = nil
		uc.ex = nil
		uc.up.active.Add(-1)
		uc.c.Close() // the upstream sees the request end
	}
}

// normHost writes host without its port, lowercased and without a
// trailing dot, into buf.
func normHost(host, buf []byte) []byte {
	h := host
	if len(h) > 0 && h[0] == '[' {
		if i := indexByte(h, ']'); i >= 0 {
			h = h[:i+1]
		}
	} else if i := indexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	buf = buf[:0]
	for _, ch := range h {
		if ch >= 'A' && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		buf = append(buf, ch)
	}
	if n := len(buf); n > 0 && buf[n-1] == '.' {
		buf = buf[:n-1]
	}
	return buf
}

// unsafeProxyPath reports whether a request path would mean something
// else to an upstream than to the route that matched it: dot segments,
// or an encoded slash, dot or backslash (a path that "/api/../admin"
// would reach the upstream's /admin through the route for /api/).
func unsafeProxyPath(p []byte) bool {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			return true
		case '%':
			if i+2 < len(p) {
				a, b := p[i+1], p[i+2]|0x20
				if a == '2' && (b == 'e' || b == 'f') || a == '5' && b == 'c' {
					return true
				}
			}
		case '.':
			if p[i-1] == '/' && (i+1 == len(p) || p[i+1] == '/' || p[i+1] == '.' && (i+2 == len(p) || p[i+2] == '/')) {
				return true
			}
		}
	}
	return false
}
