package engine

import (
	"errors"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/reframe"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/h1"
)

// The reverse proxy. A request that matches a route, in any protocol,
// becomes an exchange: a fresh HTTP/1.1 request written to a pooled
// upstream connection on a reactor loop (the client's own, for HTTP/1.1
// and HTTP/2), its body streamed up as it arrives, and the response
// streamed back as the client takes it.
// Each side moves only when the other has room (the client's queued
// output written, the upstream's queued output written), so memory per
// exchange is one input buffer on each side and one copy in flight.

// proxyTable is the reverse proxy's routes (those that terminate TLS),
// and what its upstream pools count.
type proxyTable struct {
	*routing.Routes
	stats proxyCounters
	// h2Buffered is the proxied response bytes every HTTP/2 stream of
	// the server holds ahead of its client (proxy_h2_tls_total_send_buffer_bytes
	// bounds it).
	h2Buffered atomic.Int64
}

// proxyCounters count what the upstream pools did; each is named as the
// Stats field it fills (loadCounters).
type proxyCounters struct {
	ProxyOpened, ProxyReused, ProxyFailed, ProxyRetried, ProxyTimeouts atomic.Int64
	ProxyBadResponses, ProxyDrained, ProxyQueued                       atomic.Int64
	// ProxyUnsolicited: connections closed for bytes no request asked for.
	ProxyUnsolicited atomic.Int64
}

// newProxyTable is cfg's table; nil without routes that terminate TLS.
func newProxyTable(cfg *config.Config) (*proxyTable, error) {
	rt, err := routing.NewRoutes(cfg, false)
	if rt == nil || err != nil {
		return nil, err
	}
	return &proxyTable{Routes: rt}, nil
}

// proxyPool is one loop's idle upstream connections, newest last, and
// the requests waiting for a connection to an upstream that has max_conns
// open from this loop, oldest first.
type proxyPool struct {
	lc     *loopCtx
	idle   map[*routing.Upstream][]*upConn
	open   map[*routing.Upstream]int // connections open (connecting, busy or idle)
	wait   map[*routing.Upstream][]*exchange
	byIP   map[netip.Addr]int // upstream connections held by each client address's exchanges
	parser *h1.Parser         // upstream response heads
}

func newProxyPool(lc *loopCtx) *proxyPool {
	return &proxyPool{lc: lc, idle: map[*routing.Upstream][]*upConn{}, open: map[*routing.Upstream]int{}, wait: map[*routing.Upstream][]*exchange{}, byIP: map[netip.Addr]int{},
		parser: h1.NewParser(h1.Limits{MaxHeadBytes: int(lc.srv.cfg.Limits.MaxHeaderBytes), MaxHeaders: lc.srv.cfg.Limits.MaxHeaders * 2})}
}

// get returns an idle connection to u, or nil.
func (p *proxyPool) get(u *routing.Upstream) *upConn {
	l := p.idle[u]
	for len(l) > 0 {
		uc := l[len(l)-1]
		l = l[:len(l)-1]
		p.idle[u] = l
		// Bytes that came after the last response (an upstream answering
		// twice, its error, or a close on its way) would be read as the
		// next response: such a connection is not reused, even if its
		// event has not been seen.
		stale, data := uc.c.Stale()
		if !stale {
			uc.c.SetReadDeadline(0)
			return uc
		}
		if data {
			p.unsolicited(uc, "when taken from the pool")
		}
		uc.c.Close()
	}
	return nil
}

// put keeps uc for the next exchange, or closes it when the upstream's
// share of idle connections is full.
func (p *proxyPool) put(uc *upConn, r *routing.Route) {
	uc.ex = nil
	if len(p.idle[uc.up]) >= *r.Cfg.MaxIdle || p.lc.loop.Draining() {
		uc.c.Close()
		return
	}
	uc.c.SetReadDeadline(r.Cfg.IdleTimeout.D())
	p.idle[uc.up] = append(p.idle[uc.up], uc)
	p.admitLater(uc.up)
}

// unsolicited counts and logs a connection closed for bytes its upstream
// sent that no request asked for; found says when they were seen.
func (p *proxyPool) unsolicited(uc *upConn, found string) {
	p.lc.srv.proxy.stats.ProxyUnsolicited.Add(1)
	p.lc.note("proxy: upstream sent bytes no request asked for; connection closed, not reused",
		"upstream", uc.up.Name, "found", found)
}

// full reports whether r may open no more connections to u from this
// loop (max_conns).
func (p *proxyPool) full(u *routing.Upstream, r *routing.Route) bool {
	limit := *r.Cfg.MaxConns
	return limit > 0 && p.open[u] >= limit
}

// overShare reports whether the client at ip holds half of max_conns
// already (its exchanges on this loop, to any upstream), and should wait
// for one of its own to end even though a connection may be free: so
// that one client that stops reading on many streams cannot hold every
// connection. Addresses in trusted_proxies (a load balancer in front,
// carrying many clients) are not limited.
func (p *proxyPool) overShare(r *routing.Route, ip netip.Addr) bool {
	limit := *r.Cfg.MaxConns
	if limit == 0 || p.byIP[ip] < max(1, limit/2) {
		return false
	}
	for _, t := range p.lc.srv.proxy.Trusted {
		if t.Contains(ip) {
			return false
		}
	}
	return true
}

// admitLater starts the oldest request waiting for u, if any, once the
// current event is handled: a connection came back to the pool, or one
// closed and another may open.
func (p *proxyPool) admitLater(u *routing.Upstream) {
	if len(p.wait[u]) == 0 {
		return
	}
	p.lc.loop.Post(func() {
		l := p.wait[u]
		for i, ex := range l {
			if !ex.done && (len(p.idle[u]) == 0 && p.full(u, ex.r) || p.overShare(ex.r, ex.peer.Addr())) {
				continue // no connection for it yet; the oldest that can go, goes
			}
			p.wait[u] = append(l[:i], l[i+1:]...)
			l[len(l)-1] = nil
			if ex.done {
				p.admitLater(u) // its client went away: the next may go
				return
			}
			ex.waitSince = 0
			if ex.connect(false) {
				ex.pump()
			}
			return
		}
	})
}

// expire answers 503 to the requests that waited response_timeout for a
// connection, and reports whether any is still waiting.
func (p *proxyPool) expire(now int64) (waiting bool) {
	for u, l := range p.wait {
		for len(l) > 0 && (l[0].done || now-l[0].waitSince > int64(l[0].r.Cfg.ResponseTimeout.D())) {
			ex := l[0]
			l[0] = nil
			l = l[1:]
			if !ex.done {
				ex.fail(503, "every connection to the upstream stayed busy (max_conns) for response_timeout", nil)
			}
		}
		p.wait[u] = l
		if len(l) == 0 {
			delete(p.wait, u)
		}
		waiting = waiting || len(l) > 0
	}
	return waiting
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
	up   *routing.Upstream
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
	if len(c.Input()) > 0 {
		uc.pool.unsolicited(uc, "while idle in the pool")
		c.Close()
	} else if c.EOF() {
		c.Close()
	}
}

func (uc *upConn) Closed(c *reactor.Conn) {
	uc.pool.open[uc.up]--
	uc.pool.admitLater(uc.up)
	if uc.ex != nil {
		uc.ex.upstreamClosed()
		return
	}
	uc.pool.remove(uc)
}

// proxyClient is the client side of an exchange: the driver (HTTP/1.1
// or HTTP/2) that received the request and carries the answer back.
type proxyClient interface {
	// pullBody returns request body bytes received and not yet passed
	// up, whether the body has ended, or why it cannot go on. The bytes
	// stay valid until bodyTaken, which the exchange calls once it has
	// copied them.
	pullBody() (data []byte, done bool, err error)
	bodyTaken()
	// continue100 sends 100 Continue where the client waits for it.
	continue100()
	// writeHead sends the response head: the upstream's status, reason
	// and fields (hop-by-hop ones still among them: conn is the
	// upstream's Connection value naming more). bodyLen is the body's
	// length, or -1 when it is streamed to an unknown end; hasBody is
	// false for responses that have none.
	writeHead(r *h1.Response, conn []byte, bodyLen int64, hasBody bool)
	// room reports whether the client can take more body bytes now.
	room() bool
	// body takes a copy of p; end says the body is complete, with the
	// upstream's trailer lines (validated, each ending in CRLF; nil when
	// none) for a client that can carry them.
	body(p []byte)
	end(trailers []byte)
	// reqTrailers are the request body's trailer lines, once pullBody
	// said it was done.
	reqTrailers() []byte
	// fail answers with an error status before any head went out.
	fail(status int)
	// abort resets the response: the client must not take it for whole.
	abort()
	// wake has the client's driver send what was queued and run again.
	wake()
	// finished detaches the exchange: the next request may go on.
	finished()
}

// errClientGone is a request body that ended early: the client closed
// or reset it.
var errClientGone = errors.New("client closed during the request body")

// exchange is one proxied request and its response. It lives on the
// client's loop; so does its upstream connection.
type exchange struct {
	lc   *loopCtx // the client's loop: pool, log, stats
	cl   proxyClient
	peer reactor.Addr
	path string // for logs
	r    *routing.Route
	up   *upConn

	head       []byte // the request head for the upstream (kept for a retry)
	isHead     bool   // HEAD: no response body
	idempotent bool
	expect100  bool

	reqChunked  bool  // re-framed chunked to the upstream
	reqSent     int64 // body data bytes sent up
	headSent    bool
	reqDone     bool
	retried     bool
	waitSince   int64 // unix ns: waiting for a connection (max_conns); 0 when not
	waitingResp bool  // the response deadline is set
	awaitClient bool  // the request body waits for the client (its deadline runs on the upstream connection)

	resp     h1.Response
	respHead bool // the client has the response head
	// The final response head came before the whole request had gone up:
	// the upstream did not wait for the body (or answered bytes it was
	// never sent). No more of the body goes up (a body it has not read
	// could be taken for a request of its own, answered later on this
	// connection), and the connection closes after the response.
	early    bool
	respBody h1.BodyReader
	respDone bool
	splicing bool // the rest of the body moves by splice (spliceClient)
	done     bool
	// The client went away with the request sent: the response is read
	// and dropped (up to drainMax body bytes) so that the connection can
	// carry the next request instead of being closed.
	draining bool
	drained  int64
	moved    int64 // response body bytes passed to the client
}

// newExchange is the exchange of a request for route rt, whatever the
// client's protocol: method and path as the client sent them, hasBody
// whether a request body follows. tooLarge reports a body the client
// declared (contentLength, -1 when not) over the route's max_body: the
// caller answers 413 through the exchange, and sends nothing up.
func newExchange(lc *loopCtx, cl proxyClient, peer reactor.Addr, rt *routing.Route, method, path []byte, hasBody bool, contentLength int64) (ex *exchange, tooLarge bool) {
	ex = &exchange{lc: lc, cl: cl, peer: peer, path: string(path), r: rt, isHead: string(method) == "HEAD",
		idempotent: reframe.IdempotentMethods[string(method)] && !hasBody, reqDone: !hasBody}
	mb := rt.Cfg.MaxBody
	return ex, mb > 0 && contentLength > int64(mb)
}

// drainMax is the most response body an exchange whose client went away
// reads and drops to keep its upstream connection: about what a new
// connection costs to open. A longer body closes the connection.
const drainMax = 64 << 10

// drainWait is how long such an exchange waits for a response head that
// has not come yet (at most response_timeout): an upstream still working
// on the request after it learns of the close within drainWait and can
// stop.
const drainWait = time.Second

// spliceClient is a client that can take the rest of a body straight
// from the upstream's socket (HTTP/1.1 over plain TCP).
type spliceClient interface {
	// splice queues n body bytes from the upstream connection uc, or
	// reports false when this client cannot.
	splice(uc *reactor.Conn, n int64) bool
}

// spliceMin is the body remainder worth a splice: below it the bytes are
// copied through the buffers as usual.
const spliceMin = 256 << 10

// start connects and runs the exchange. The request has no body when
// reqDone is already set.
func (ex *exchange) start() {
	if !ex.connect(false) {
		return
	}
	ex.pump()
}

// connect gives the exchange an upstream connection: a pooled one unless
// fresh is set, else a new one. It returns false when it answered the
// client instead (every upstream down).
func (ex *exchange) connect(fresh bool) bool {
	pool := ex.lc.proxy
	now := time.Now().UnixNano()
	for {
		u := ex.r.Pick(now) // one that failed for this request backs off: not picked again
		if u == nil {
			ex.fail(502, "no upstream available (every one failed recently)", nil)
			return false
		}
		var uc *upConn
		share := pool.overShare(ex.r, ex.peer.Addr())
		if !fresh && !share {
			uc = pool.get(u)
		}
		if uc != nil {
			ex.lc.srv.proxy.stats.ProxyReused.Add(1)
		} else {
			if share || pool.full(u, ex.r) {
				// Every connection this loop may open to u is busy, or
				// this client holds its share: wait for one (admitLater),
				// up to response_timeout (expire).
				ex.waitSince = now
				pool.wait[u] = append(pool.wait[u], ex)
				ex.lc.srv.proxy.stats.ProxyQueued.Add(1)
				return false
			}
			uc = &upConn{up: u, pool: pool, ex: ex}
			if _, err := ex.lc.loop.Dial(u.Addr, ex.r.Cfg.ConnectTimeout.D(), uc); err != nil {
				ex.upstreamFailed(u, err)
				continue
			}
			pool.open[u]++
			ex.lc.srv.proxy.stats.ProxyOpened.Add(1)
		}
		uc.ex = ex
		uc.used++
		ex.holdUp(uc)
		// An upstream that takes no request bytes for read_timeout is
		// given up (504), as one that sends none.
		uc.c.SetSendTimeout(ex.r.Cfg.ReadTimeout.D())
		return true
	}
}

// holdUp gives the exchange uc, counted in the upstream's exchanges in
// progress (least_conn) and its client address's share of this loop's
// connections (fair).
func (ex *exchange) holdUp(uc *upConn) {
	ex.up = uc
	uc.up.Active.Add(1)
	ex.lc.proxy.byIP[ex.peer.Addr()]++
}

// dropUp takes the exchange's upstream connection from it, uncounted; the
// caller closes or pools it. Nil when it had none.
func (ex *exchange) dropUp() *upConn {
	uc := ex.up
	if uc == nil {
		return nil
	}
	ex.up = nil
	uc.up.Active.Add(-1)
	p, ip := ex.lc.proxy, ex.peer.Addr()
	if p.byIP[ip]--; p.byIP[ip] <= 0 {
		delete(p.byIP, ip)
	}
	return uc
}

// upstreamFailed marks u down for a while after a failed connection
// (upstream.failed) and says so.
func (ex *exchange) upstreamFailed(u *routing.Upstream, err error) {
	ex.lc.srv.proxy.stats.ProxyFailed.Add(1)
	backoff := u.Failed()
	ex.lc.note("upstream connection failed; trying another, and skipping this one for a while",
		"route", ex.r.Key, "upstream", u.Name, "err", err, "backoff", backoff)
}

// pump moves the exchange on as far as it can go: the request up, the
// response down. Both connections' events call it.
func (ex *exchange) pump() {
	if ex.done || ex.up == nil {
		return
	}
	uc := ex.up.c
	if !uc.Connected() {
		return
	}
	if !ex.headSent {
		ex.headSent = true
		uc.Write(ex.head)
		uc.Wake() // flushed by its own turn: pump may run from the client's
		if ex.expect100 {
			ex.expect100 = false
			ex.cl.continue100()
			ex.cl.wake()
		}
	}
	if !ex.respHead {
		ex.pumpRequest()
	}
	if ex.done {
		return
	}
	headNow := !ex.respHead
	if headNow && !ex.readHead() {
		return
	}
	if ex.done || ex.up == nil {
		return // writing the head ended it (a client that went away)
	}
	ex.pumpResponse(headNow)
}

// pumpRequest moves request body bytes from the client to the upstream,
// as fast as the upstream takes them.
func (ex *exchange) pumpRequest() {
	uc := ex.up.c
	rc := ex.r.Cfg
	for !ex.reqDone && !uc.Pending() {
		data, done, err := ex.cl.pullBody()
		if err != nil {
			if err == errClientGone {
				// The upstream must not take a short body for a whole one.
				ex.abort(err.Error())
				return
			}
			ex.fail(400, "bad request body", err)
			return
		}
		if rc.MaxBody > 0 && ex.reqSent+int64(len(data)) > int64(rc.MaxBody) {
			ex.fail(413, "request body over max_body", nil)
			return
		}
		if len(data) == 0 && !done {
			return // more comes with the client's next event
		}
		if len(data) > 0 {
			if ex.reqChunked {
				var size [16]byte
				uc.Write(strconv.AppendInt(size[:0], int64(len(data)), 16))
				uc.Write([]byte("\r\n"))
				uc.Write(data)
				uc.Write([]byte("\r\n"))
			} else {
				uc.Write(data)
			}
			ex.reqSent += int64(len(data))
		}
		ex.cl.bodyTaken()
		if done {
			ex.reqDone = true
			if ex.reqChunked {
				uc.Write([]byte("0\r\n"))
				uc.Write(reframe.AppendTrailers(nil, ex.cl.reqTrailers()))
				uc.Write([]byte("\r\n"))
			}
		}
		uc.Wake()
	}
	if ex.reqDone && !uc.Pending() && !ex.respHead && !ex.waitingResp {
		ex.waitingResp = true
		uc.SetReadDeadline(rc.ResponseTimeout.D())
	}
}

// readHead parses the upstream's response head and has the client send
// its own. It returns false while the head is incomplete or after failing.
func (ex *exchange) readHead() bool {
	uc := ex.up.c
	for {
		in := uc.Input()
		n, err := ex.lc.proxy.parser.ParseResponse(in, &ex.resp)
		if err == h1.ErrIncomplete {
			if uc.EOF() {
				ex.upstreamClosed()
			}
			return false
		}
		if err != nil {
			ex.lc.srv.proxy.stats.ProxyBadResponses.Add(1)
			ex.fail(502, "bad response from upstream", err)
			return false
		}
		if ex.resp.Status >= 100 && ex.resp.Status < 200 {
			uc.Consume(n)
			if ex.resp.Status == 101 {
				ex.fail(502, "upstream switched protocols (not supported by the proxy)", nil)
				return false
			}
			continue // 100 Continue and other interim responses: ours was sent already
		}
		uc.Consume(n)
		ex.up.up.Failures.Store(0) // it answers
		if !ex.reqDone || uc.Pending() {
			// RFC 9112 §9.5: a client that sees a response before it has
			// sent the whole body may stop sending it; nginx stops, and
			// never keeps a connection whose request was not all sent.
			ex.early = true
			ex.lc.log.Debug("proxy: upstream answered before the whole request went up; the rest of the body is not sent, and the connection closes after the response",
				"route", ex.r.Key, "upstream", ex.up.up.Name, "body_sent", ex.reqSent)
		}
		r := &ex.resp
		hasBody := r.BodyFollows(ex.isHead)
		bodyLen := int64(0)
		if hasBody {
			bodyLen = r.ContentLength // -1: streamed to an unknown end
			ex.respBody.ResetResponse(r)
		} else {
			ex.respDone = true
		}
		ex.lc.srv.stats.Requests.Add(1)
		ex.cl.writeHead(r, r.Get("connection"), bodyLen, hasBody)
		ex.respHead = true
		uc.SetReadDeadline(0)
		return true // pumpResponse wakes the client, with the body's first bytes queued too
	}
}

// pumpResponse moves response body bytes from the upstream to the client,
// as fast as the client takes them. headNow says the client's head was
// queued in this turn.
func (ex *exchange) pumpResponse(headNow bool) {
	uc := ex.up.c
	// The client sends what this turn queued (the head, body bytes, the
	// splice it should try again) once, at the end: many small upstream
	// chunks leave as one write, one frame. A turn that queued nothing
	// wakes nobody: an HTTP/1.1 client's turn pumps the exchange, so a
	// wake for nothing would run it again at once, and the loop would spin
	// for as long as the upstream pauses.
	wake := headNow
	defer func() {
		if wake && !ex.done {
			ex.cl.wake()
		}
	}()
	if ex.splicing {
		if !ex.cl.room() || !uc.Spliced() {
			// The splice is under way: the client's flush moves it. This
			// runs on the upstream's events (input, or its end).
			wake = true
			return
		}
		ex.splicing = false
		ex.respDone = true
	}
	for !ex.respDone {
		if ex.respBody.Done() { // Content-Length: 0, or the last chunk read
			ex.respDone = true
			break
		}
		if left := ex.respBody.ContentLeft(); left >= spliceMin && len(uc.Input()) == 0 {
			if sp, ok := ex.cl.(spliceClient); ok && ex.cl.room() && sp.splice(uc, left) {
				ex.respBody.Advance(left)
				ex.splicing = true
				wake = true
				uc.SetReadDeadline(0) // the client's send_timeout bounds a stalled splice
				return
			}
		}
		if left := ex.respBody.ContentLeft(); left >= spliceMin || left < 0 && ex.moved >= spliceMin {
			// A long body through userspace: fewer, larger reads.
			uc.SetBulkInput(true)
		}
		if !ex.cl.room() {
			uc.SetReadDeadline(0) // the client is the slow side: no upstream deadline
			return
		}
		in := uc.Input()
		if rb, ok := ex.cl.(interface{ roomBytes() int }); ok && len(in) > 0 && ex.respBody.ContentLeft() >= 0 {
			// A client with a byte budget takes no more than it allows
			// (framing makes that exact only for Content-Length bodies).
			in = in[:min(len(in), max(rb.roomBytes(), 1))]
		}
		if len(in) == 0 {
			if uc.EOF() {
				if ex.respBody.UntilEOF() {
					ex.respDone = true
					break
				}
				ex.lc.note("upstream closed in the middle of a response body; resetting the client's response",
					"route", ex.r.Key, "upstream", ex.up.up.Name)
				ex.abort("upstream closed mid-body")
				return
			}
			uc.SetReadDeadline(ex.r.Cfg.ReadTimeout.D())
			return
		}
		n, data, err := ex.respBody.Read(in)
		if err != nil {
			ex.lc.srv.proxy.stats.ProxyBadResponses.Add(1)
			ex.lc.note("bad body framing from upstream; resetting the client's response",
				"route", ex.r.Key, "upstream", ex.up.up.Name, "err", err)
			ex.abort("bad upstream body framing")
			return
		}
		if len(data) > 0 {
			ex.cl.body(data)
			ex.moved += int64(len(data))
			wake = true
		}
		if ex.draining {
			if ex.drained += int64(len(data)); ex.drained > drainMax {
				ex.done = true
				ex.release(false)
				return
			}
		}
		uc.Consume(n)
		uc.Wake() // it may have stopped reading with a full buffer
		if ex.respBody.Done() {
			ex.respDone = true
		}
	}
	ex.cl.end(ex.respBody.Trailers())
	ex.finish()
}

// finish ends an exchange whose response is all queued: the upstream
// connection goes back to the pool if it can carry another, and the
// client moves on.
func (ex *exchange) finish() {
	ex.done = true
	uc := ex.dropUp()
	reusable := ex.reqDone && !ex.early && !ex.resp.Close && !ex.respBody.UntilEOF() && !uc.c.EOF() && len(uc.c.Input()) == 0 && !uc.c.Pending()
	uc.c.SetBulkInput(false)
	if len(uc.c.Input()) > 0 {
		ex.lc.proxy.unsolicited(uc, "behind the response")
	}
	if reusable {
		ex.lc.proxy.put(uc, ex.r)
	} else {
		uc.ex = nil
		uc.c.Close()
	}
	ex.cl.finished()
	ex.cl.wake()
}

// upstreamClosed handles the upstream connection going away: before the
// response head a failed connect, a reused connection the upstream had
// closed (retried once when that is safe), a timeout or a reset; after
// it, the body's end (when the close delimits it) or a cut.
func (ex *exchange) upstreamClosed() {
	if ex.done || ex.up == nil {
		return
	}
	uc := ex.up
	if ex.draining {
		// Nobody waits for the answer: no retry, no error page.
		ex.done = true
		ex.release(false)
		return
	}
	if ex.respHead {
		if uc.c.EOF() && !uc.c.TimedOut() {
			ex.pump() // the body's end or a cut: pumpResponse tells
			if ex.done {
				return
			}
		}
		ex.abort("upstream connection lost mid-response")
		return
	}
	ex.dropUp()
	uc.ex = nil
	switch {
	case uc.c.DialErr() != nil:
		ex.upstreamFailed(uc.up, uc.c.DialErr())
		ex.headSent, ex.waitingResp = false, false
		if ex.connect(true) {
			ex.pump()
		}
	case uc.c.TimedOut() && ex.awaitClient:
		ex.fail(408, "the client's request body stopped (body_timeout)", nil)
	case uc.c.TimedOut() && ex.waitingResp:
		ex.lc.srv.proxy.stats.ProxyTimeouts.Add(1)
		ex.fail(504, "upstream response_timeout", nil)
	case uc.c.TimedOut():
		ex.lc.srv.proxy.stats.ProxyTimeouts.Add(1)
		ex.fail(504, "upstream timed out taking the request", nil)
	case uc.used > 1 && ex.idempotent && ex.reqSent == 0 && !ex.retried:
		// A pooled connection the upstream closed as it was reused:
		// safe to send again on a fresh one.
		ex.retried = true
		ex.lc.srv.proxy.stats.ProxyRetried.Add(1)
		ex.headSent, ex.waitingResp = false, false
		if ex.connect(true) {
			ex.pump()
		}
	default:
		ex.fail(502, "upstream closed the connection without a response", nil)
	}
}

// release drops the exchange's upstream connection: closed, or reset
// when abort is set. It returns the upstream's name.
func (ex *exchange) release(abort bool) string {
	uc := ex.dropUp()
	if uc == nil {
		return ""
	}
	uc.ex = nil
	if abort {
		uc.c.Abort()
	} else {
		uc.c.Close()
	}
	return uc.up.Name
}

// fail answers the client with status when no response head has gone out
// yet, and resets its response otherwise.
func (ex *exchange) fail(status int, cause string, err error) {
	if ex.done {
		return
	}
	if ex.respHead {
		ex.abort(cause)
		return
	}
	lc := ex.lc
	ex.done = true
	up := ex.release(false)
	args := []any{"status", status, "route", ex.r.Key, "path", ex.path, "peer", ex.peer}
	if up != "" {
		args = append(args, "upstream", up)
	}
	if err != nil {
		args = append(args, "err", err)
	}
	if status >= 500 {
		lc.log.Warn("proxy: "+cause, args...)
	} else {
		lc.note("proxy: "+cause, args...)
	}
	ex.cl.fail(status)
	ex.cl.wake()
}

// abort ends an exchange that cannot finish: the upstream connection and
// the client's response are both reset, so that neither side takes a cut
// message for a whole one.
func (ex *exchange) abort(cause string) {
	if ex.done {
		return
	}
	ex.done = true
	ex.release(true)
	ex.lc.log.Debug("proxy exchange aborted", "route", ex.r.Key, "cause", cause, "peer", ex.peer)
	ex.cl.abort()
}

// clientGone ends the exchange of a client that closed or reset. With
// the whole request sent and a response that may be short (its head not
// read yet, or at most drainMax of its body left), the response is read
// and dropped, and the connection goes back to the pool (clients that
// close with requests in flight, as load generators do at their end,
// would otherwise cost a connection each); otherwise, or when the head
// takes longer than drainWait, the upstream sees the request end with
// the connection.
func (ex *exchange) clientGone() {
	if ex.done {
		return
	}
	ex.cl = drainClient{}
	if ex.up != nil && ex.reqDone && !ex.early && !ex.splicing && !ex.resp.Close && (!ex.respHead || ex.respDone ||
		ex.respBody.ContentLeft() >= 0 && ex.respBody.ContentLeft() <= drainMax) {
		ex.draining = true
		ex.lc.srv.proxy.stats.ProxyDrained.Add(1)
		if !ex.respHead {
			d := drainWait
			if rt := ex.r.Cfg.ResponseTimeout.D(); rt > 0 && rt < d {
				d = rt
			}
			ex.up.c.SetReadDeadline(d)
		}
		ex.up.c.Wake() // it goes on with the upstream's events
		return
	}
	ex.done = true
	ex.release(false)
}

// drainClient stands in for a client that went away while its response
// is drained: it takes everything and sends nothing.
type drainClient struct{}

func (drainClient) pullBody() ([]byte, bool, error)             { return nil, false, errClientGone }
func (drainClient) bodyTaken()                                  {}
func (drainClient) continue100()                                {}
func (drainClient) writeHead(*h1.Response, []byte, int64, bool) {}
func (drainClient) room() bool                                  { return true }
func (drainClient) body([]byte)                                 {}
func (drainClient) end([]byte)                                  {}
func (drainClient) reqTrailers() []byte                         { return nil }
func (drainClient) fail(int)                                    {}
func (drainClient) abort()                                      {}
func (drainClient) wake()                                       {}
func (drainClient) finished()                                   {}
