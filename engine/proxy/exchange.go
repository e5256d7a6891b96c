package proxy

import (
	"errors"
	"net/netip"
	"strconv"
	"time"

	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/reframe"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/h1"
)

// Client is the client side of an exchange: the driver (HTTP/1.1,
// HTTP/2 or HTTP/3) that received the request and carries the answer back.
type Client interface {
	// PullBody returns request body bytes received and not yet passed
	// up, whether the body has ended, or why it cannot go on. The bytes
	// stay valid until BodyTaken, which the exchange calls once it has
	// copied them.
	PullBody() (data []byte, done bool, err error)
	BodyTaken()
	// Continue100 sends 100 Continue where the client waits for it.
	Continue100()
	// WriteHead sends the response head: the upstream's status, reason
	// and fields (hop-by-hop ones still among them: conn is the
	// upstream's Connection value naming more). bodyLen is the body's
	// length, or -1 when it is streamed to an unknown end; hasBody is
	// false for responses that have none. up is the upstream that
	// answered, for the access log.
	WriteHead(r *h1.Response, conn []byte, bodyLen int64, hasBody bool, up UpstreamHead)
	// Room reports whether the client can take more body bytes now.
	Room() bool
	// Body takes a copy of p; end says the body is complete, with the
	// upstream's trailer lines (validated, each ending in CRLF; nil when
	// none) for a client that can carry them.
	Body(p []byte)
	End(trailers []byte)
	// ReqTrailers are the request body's trailer lines, once PullBody
	// said it was done.
	ReqTrailers() []byte
	// Fail answers with an error status before any head went out. up
	// names the upstream last tried, with Time -1 (no head came); its
	// Addr is the zero value when none was.
	Fail(status int, up UpstreamHead)
	// Abort resets the response: the client must not take it for whole.
	Abort()
	// Wake has the client's driver send what was queued and run again.
	Wake()
	// Finished detaches the exchange: the next request may go on.
	Finished()
}

// UpstreamHead is what the access log says of the upstream that
// answered: its address, and how long its response head took from the
// exchange's start (waiting for a connection, connecting and sending
// included), as nginx's $upstream_addr and $upstream_header_time. On a
// failure (502, 504) it is the upstream last tried, with Time -1: as
// nginx, the log names the address and the status the engine answered,
// and no header time.
type UpstreamHead struct {
	Addr netip.AddrPort
	Time time.Duration
}

// Source makes the connection an exchange reads its response from, in
// place of one to the route's upstreams: an HTTP/1.1 response that the
// source writes and ends with a close (the edge cache's fill, read by a
// request that joined it).
type Source func(l *reactor.Loop, timeout time.Duration, h reactor.Handler) (*reactor.Conn, error)

// SetSource has the exchange take its response from src. Call it before
// Start.
func (ex *Exchange) SetSource(src Source) { ex.source = src }

// ErrClientGone is a request body that ended early: the client closed
// or reset it.
var ErrClientGone = errors.New("client closed during the request body")

// exchange is one proxied request and its response. It lives on the
// client's loop; so does its upstream connection.
type Exchange struct {
	l    *Loop // the client's loop: pool, log, stats
	cl   Client
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
	tried       netip.AddrPort // the upstream last given to the exchange, for the access log of a failure
	waitSince   int64          // unix ns: waiting for a connection (max_conns); 0 when not
	waitingResp bool           // the response deadline is set
	awaitClient bool           // the request body waits for the client (its deadline runs on the upstream connection)

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
	splicing bool   // the rest of the body moves by splice (SpliceClient)
	source   Source // where the response comes from instead of an upstream (SetSource)
	done     bool
	// The client went away with the request sent: the response is read
	// and dropped (up to drainMax body bytes) so that the connection can
	// carry the next request instead of being closed.
	draining   bool
	drained    int64
	drainUntil time.Time  // the drain's end, whatever the upstream sends
	moved      int64      // response body bytes passed to the client
	peerKey    netip.Addr // the client's count in Table.Peers while it holds a connection
	// The upstream connection's progress (reactor.Conn.Progress) when
	// last looked at by preempt, and since when it has been that.
	lastProg  uint64
	progSince int64
	// The rate window (watchStalls): body bytes moved either way at its
	// start, when it began, and whether the last one was below the
	// minimum rate with the client the slow side.
	winBytes, winStart int64
	slow               bool
	started            time.Time // NewExchange: the upstream header time counts from here
}

// NewExchange is the exchange of a request for route rt on loop l,
// whatever the client's protocol: method and path as the client sent
// them, hasBody whether a request body follows. tooLarge reports a body
// the client declared (contentLength, -1 when not) over the route's
// max_body: the caller answers 413 through the exchange (Fail), and
// sends nothing up. Before Start the caller gives it the request head to
// send (SetRequest).
func (l *Loop) NewExchange(cl Client, peer reactor.Addr, rt *routing.Route, method, path []byte, hasBody bool, contentLength int64) (ex *Exchange, tooLarge bool) {
	ex = &Exchange{l: l, cl: cl, peer: peer, path: string(path), r: rt, isHead: string(method) == "HEAD", started: time.Now(),
		idempotent: reframe.IdempotentMethods[string(method)] && !hasBody, reqDone: !hasBody}
	mb := rt.Cfg.MaxBody
	return ex, mb > 0 && contentLength > int64(mb)
}

// SetRequest gives the exchange the request head for the upstream
// (reframe.Head); chunked: the body goes up chunked; expect100: the
// client waits for 100 Continue before its body.
func (ex *Exchange) SetRequest(head []byte, chunked, expect100 bool) {
	ex.head, ex.reqChunked, ex.expect100 = head, chunked, expect100
}

// BodySent reports whether the whole request body went up (or there was
// none).
func (ex *Exchange) BodySent() bool { return ex.reqDone }

// WakeUpstream has the exchange's upstream connection run its turn (the
// exchange pumps there): the client side has more body, or room again.
func (ex *Exchange) WakeUpstream() {
	if ex.up != nil {
		ex.up.c.Wake()
	}
}

// AwaitClient says the request body now waits for the client, for at
// most d (the client's body_timeout): the deadline runs on the upstream
// connection, and when it passes the client is answered 408. d 0: the
// body came on; the deadline is off.
func (ex *Exchange) AwaitClient(d time.Duration) {
	ex.awaitClient = d > 0
	if ex.up != nil {
		ex.up.c.SetReadDeadline(d)
	}
}

// drainMax is the most response body an exchange whose client went away
// reads and drops to keep its upstream connection: about what a new
// connection costs to open. A longer body closes the connection.
const drainMax = 64 << 10

// drainWait is how long such an exchange reads at most, its head and
// body together (and at most response_timeout): an upstream still
// working on the request learns of the close within drainWait and can
// stop, and one that sends its last bytes slowly does not hold the
// connection (and a share of max_conns) for a client long gone.
const drainWait = time.Second

// SpliceClient is a client that can take the rest of a body straight
// from the upstream's socket (HTTP/1.1 over plain TCP).
type SpliceClient interface {
	// splice queues n body bytes from the upstream connection uc, or
	// reports false when this client cannot.
	Splice(uc *reactor.Conn, n int64) bool
}

// RoomBytes is a client with a byte budget (HTTP/2's send buffers): the
// exchange passes it no more response body than RoomBytes allows.
type RoomBytes interface{ RoomBytes() int }

// spliceMin is the body remainder worth a splice: below it the bytes are
// copied through the buffers as usual.
const spliceMin = 256 << 10

// Start connects and runs the exchange. The request has no body when
// reqDone is already set.
func (ex *Exchange) Start() {
	if !ex.connect(false) {
		return
	}
	ex.Pump()
}

// connect gives the exchange an upstream connection: a pooled one unless
// fresh is set, else a new one. It returns false when it answered the
// client instead (every upstream down).
func (ex *Exchange) connect(fresh bool) bool {
	pool := ex.l
	now := time.Now().UnixNano()
	for {
		if ex.source != nil {
			// Not the upstream's: a connection of the source's own, never
			// pooled (its response closes it), outside max_conns, whether
			// the upstreams answer or not. It is counted as the route's
			// first upstream's.
			u := ex.r.Ups[0]
			uc := &upConn{up: u, pool: pool, ex: ex}
			if _, err := ex.source(ex.l.rl, ex.r.Cfg.ConnectTimeout.D(), uc); err != nil {
				ex.Fail(502, "the response's source failed", err)
				return false
			}
			pool.open[u]++
			uc.used++
			ex.holdUp(uc)
			uc.c.SetSendTimeout(ex.r.Cfg.ReadTimeout.D())
			return true
		}
		u := ex.r.Pick(now) // one that failed for this request backs off: not picked again
		if u == nil {
			ex.Fail(502, "no upstream available (every one failed recently)", nil)
			return false
		}
		var uc *upConn
		share := pool.overShare(ex.r, ex.peer.Addr())
		if !fresh && !share {
			uc = pool.get(u)
		}
		if uc != nil {
			ex.l.t.Stats.ProxyReused.Add(1)
		} else {
			if share || pool.full(u, ex.r) {
				// Every connection this loop may open to u is busy, or
				// this client holds its share: wait for one (admitLater),
				// up to response_timeout (Expire).
				ex.waitSince = now
				pool.wait[u] = append(pool.wait[u], ex)
				ex.l.t.Stats.ProxyQueued.Add(1)
				if !share {
					// A response whose client stopped reading long ago
					// gives its connection now, not at the next tick.
					pool.preempt(u, now)
				}
				return false
			}
			uc = &upConn{up: u, pool: pool, ex: ex}
			dial := ex.l.rl.Dial
			if u.TLS != nil {
				dial = func(a reactor.Addr, timeout time.Duration, h reactor.Handler) (*reactor.Conn, error) {
					// Past the exchange's own timeouts (its 504 comes first): the
					// bridge then only cleans up after an upstream that stopped reading.
					stall := 2 * max(ex.r.Cfg.ReadTimeout.D(), ex.r.Cfg.ResponseTimeout.D())
					return dialTLS(ex.l.rl, u, timeout, stall, h, ex.l.lim.Note)
				}
			}
			if _, err := dial(u.Addr, ex.r.Cfg.ConnectTimeout.D(), uc); err != nil {
				ex.upstreamFailed(u, err)
				continue
			}
			pool.open[u]++
			ex.l.t.Stats.ProxyOpened.Add(1)
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
func (ex *Exchange) holdUp(uc *upConn) {
	ex.up = uc
	ex.tried = uc.up.Addr
	uc.up.Active.Add(1)
	ex.l.byIP[ex.peer.Addr()]++
	ex.peerKey, _ = ex.l.t.Peers.Acquire(ex.peer.Addr())
	ex.l.held[ex] = struct{}{}
}

// dropUp takes the exchange's upstream connection from it, uncounted; the
// caller closes or pools it. Nil when it had none.
func (ex *Exchange) dropUp() *upConn {
	uc := ex.up
	if uc == nil {
		return nil
	}
	ex.up = nil
	uc.up.Active.Add(-1)
	p, ip := ex.l, ex.peer.Addr()
	if p.byIP[ip]--; p.byIP[ip] <= 0 {
		delete(p.byIP, ip)
	}
	p.t.Peers.Release(ex.peerKey)
	ex.peerKey = netip.Addr{}
	delete(p.held, ex)
	return uc
}

// upstreamFailed marks u down for a while after a failed connection
// (upstream.failed) and says so.
func (ex *Exchange) upstreamFailed(u *routing.Upstream, err error) {
	ex.l.t.Stats.ProxyFailed.Add(1)
	backoff := u.Failed()
	ex.l.lim.Note("upstream connection failed; trying another, and skipping this one for a while",
		"route", ex.r.Key, "upstream", u.Name, "err", err, "backoff", backoff)
}

// Pump moves the exchange on as far as it can go: the request up, the
// response down. Both connections' events call it.
func (ex *Exchange) Pump() {
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
		uc.Wake() // flushed by its own turn: Pump may run from the client's
		if ex.expect100 {
			ex.expect100 = false
			ex.cl.Continue100()
			ex.cl.Wake()
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
func (ex *Exchange) pumpRequest() {
	uc := ex.up.c
	rc := ex.r.Cfg
	for !ex.reqDone && !uc.Pending() {
		data, done, err := ex.cl.PullBody()
		if err != nil {
			if err == ErrClientGone {
				// The upstream must not take a short body for a whole one.
				ex.abort(err.Error())
				return
			}
			ex.Fail(400, "bad request body", err)
			return
		}
		if rc.MaxBody > 0 && ex.reqSent+int64(len(data)) > int64(rc.MaxBody) {
			ex.Fail(413, "request body over max_body", nil)
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
		ex.cl.BodyTaken()
		if done {
			ex.reqDone = true
			if ex.reqChunked {
				uc.Write([]byte("0\r\n"))
				uc.Write(reframe.AppendRequestTrailers(nil, ex.cl.ReqTrailers()))
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
func (ex *Exchange) readHead() bool {
	uc := ex.up.c
	for {
		in := uc.Input()
		n, err := ex.l.parser.ParseResponse(in, &ex.resp)
		if err == h1.ErrIncomplete {
			if uc.EOF() {
				ex.upstreamClosed()
			}
			return false
		}
		if err != nil {
			ex.l.t.Stats.ProxyBadResponses.Add(1)
			ex.Fail(502, "bad response from upstream", err)
			return false
		}
		if ex.resp.Status >= 100 && ex.resp.Status < 200 {
			uc.Consume(n)
			if ex.resp.Status == 101 {
				ex.Fail(502, "upstream switched protocols (not supported by the proxy)", nil)
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
			ex.l.log.Debug("proxy: upstream answered before the whole request went up; the rest of the body is not sent, and the connection closes after the response",
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
		ex.l.requests.Add(1)
		uh := UpstreamHead{Addr: ex.up.up.Addr, Time: time.Since(ex.started)}
		ex.cl.WriteHead(r, r.Get("connection"), bodyLen, hasBody, uh)
		ex.respHead = true
		ex.readDeadline(0)
		return true // pumpResponse wakes the client, with the body's first bytes queued too
	}
}

// pumpResponse moves response body bytes from the upstream to the client,
// as fast as the client takes them. headNow says the client's head was
// queued in this turn.
func (ex *Exchange) pumpResponse(headNow bool) {
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
			ex.cl.Wake()
		}
	}()
	if ex.splicing {
		if !ex.cl.Room() || !uc.Spliced() {
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
			if sp, ok := ex.cl.(SpliceClient); ok && ex.cl.Room() && sp.Splice(uc, left) {
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
		if !ex.cl.Room() {
			uc.SetReadDeadline(0) // the client is the slow side: no upstream deadline
			return
		}
		in := uc.Input()
		if rb, ok := ex.cl.(RoomBytes); ok && len(in) > 0 && ex.respBody.ContentLeft() >= 0 {
			// A client with a byte budget takes no more than it allows
			// (framing makes that exact only for Content-Length bodies).
			in = in[:min(len(in), max(rb.RoomBytes(), 1))]
		}
		if len(in) == 0 {
			if uc.EOF() {
				if ex.respBody.UntilEOF() {
					ex.respDone = true
					break
				}
				ex.l.lim.Note("upstream closed in the middle of a response body; resetting the client's response",
					"route", ex.r.Key, "upstream", ex.up.up.Name)
				ex.abort("upstream closed mid-body")
				return
			}
			ex.readDeadline(ex.r.Cfg.ReadTimeout.D())
			return
		}
		n, data, err := ex.respBody.Read(in)
		if err != nil {
			ex.l.t.Stats.ProxyBadResponses.Add(1)
			ex.l.lim.Note("bad body framing from upstream; resetting the client's response",
				"route", ex.r.Key, "upstream", ex.up.up.Name, "err", err)
			ex.abort("bad upstream body framing")
			return
		}
		if len(data) > 0 {
			ex.cl.Body(data)
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
	ex.cl.End(ex.respBody.Trailers())
	ex.finish()
}

// finish ends an exchange whose response is all queued: the upstream
// connection goes back to the pool if it can carry another, and the
// client moves on.
func (ex *Exchange) finish() {
	ex.done = true
	uc := ex.dropUp()
	reusable := ex.reqDone && !ex.early && !ex.resp.Close && !ex.respBody.UntilEOF() && !uc.c.EOF() && len(uc.c.Input()) == 0 && !uc.c.Pending()
	uc.c.SetBulkInput(false)
	if len(uc.c.Input()) > 0 {
		ex.l.unsolicited(uc, "behind the response")
	}
	if reusable {
		ex.l.put(uc, ex.r)
	} else {
		uc.ex = nil
		uc.c.Close()
	}
	ex.cl.Finished()
	ex.cl.Wake()
}

// upstreamClosed handles the upstream connection going away: before the
// response head a failed connect, a reused connection the upstream had
// closed (retried once when that is safe), a timeout or a reset; after
// it, the body's end (when the close delimits it) or a cut.
func (ex *Exchange) upstreamClosed() {
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
			ex.Pump() // the body's end or a cut: pumpResponse tells
			if ex.done {
				return
			}
		}
		ex.abort("upstream connection lost mid-response")
		return
	}
	ex.dropUp()
	uc.ex = nil
	uc.c.Close() // half closed (its end read), or closed already: not left open until a timeout
	switch {
	case uc.c.DialErr() != nil && ex.reqSent == 0:
		ex.upstreamFailed(uc.up, uc.c.DialErr())
		ex.headSent, ex.waitingResp = false, false
		if ex.connect(true) {
			ex.Pump()
		}
	case uc.c.DialErr() != nil:
		// Refused after part of the body went up (a TLS upstream's late
		// alert): the body cannot be sent again.
		ex.upstreamFailed(uc.up, uc.c.DialErr())
		ex.Fail(502, "upstream refused the connection after the request body went up", nil)
	case uc.c.TimedOut() && ex.awaitClient:
		ex.Fail(408, "the client's request body stopped (body_timeout)", nil)
	case uc.c.TimedOut() && ex.waitingResp:
		ex.l.t.Stats.ProxyTimeouts.Add(1)
		ex.Fail(504, "upstream response_timeout", nil)
	case uc.c.TimedOut():
		ex.l.t.Stats.ProxyTimeouts.Add(1)
		ex.Fail(504, "upstream timed out taking the request", nil)
	case uc.used > 1 && ex.idempotent && ex.reqSent == 0 && !ex.retried:
		// A pooled connection the upstream closed as it was reused:
		// safe to send again on a fresh one.
		ex.retried = true
		ex.l.t.Stats.ProxyRetried.Add(1)
		ex.headSent, ex.waitingResp = false, false
		if ex.connect(true) {
			ex.Pump()
		}
	default:
		ex.Fail(502, "upstream closed the connection without a response", nil)
	}
}

// release drops the exchange's upstream connection: closed, or reset
// when abort is set. It returns the upstream's name.
func (ex *Exchange) release(abort bool) string {
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

// Fail answers the client with status when no response head has gone out
// yet, and resets its response otherwise.
func (ex *Exchange) Fail(status int, cause string, err error) {
	if ex.done {
		return
	}
	if ex.respHead {
		ex.abort(cause)
		return
	}
	l := ex.l
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
		l.log.Warn("proxy: "+cause, args...)
	} else {
		l.lim.Note("proxy: "+cause, args...)
	}
	ex.cl.Fail(status, UpstreamHead{Addr: ex.tried, Time: -1})
	ex.cl.Wake()
}

// abort ends an exchange that cannot finish: the upstream connection and
// the client's response are both reset, so that neither side takes a cut
// message for a whole one.
func (ex *Exchange) abort(cause string) {
	if ex.done {
		return
	}
	ex.done = true
	ex.release(true)
	ex.l.log.Debug("proxy exchange aborted", "route", ex.r.Key, "cause", cause, "peer", ex.peer)
	ex.cl.Abort()
}

// ClientGone ends the exchange of a client that closed or reset. With
// the whole request sent and a response that may be short (its head not
// read yet, or at most drainMax of its body left), the response is read
// and dropped, and the connection goes back to the pool (clients that
// close with requests in flight, as load generators do at their end,
// would otherwise cost a connection each); otherwise, or when the head
// takes longer than drainWait, the upstream sees the request end with
// the connection.
func (ex *Exchange) ClientGone() {
	if ex.done {
		return
	}
	ex.cl = drainClient{}
	if ex.up != nil && ex.reqDone && !ex.early && !ex.splicing && !ex.resp.Close && (!ex.respHead || ex.respDone ||
		ex.respBody.ContentLeft() >= 0 && ex.respBody.ContentLeft() <= drainMax) {
		ex.draining = true
		ex.l.t.Stats.ProxyDrained.Add(1)
		d := drainWait
		if rt := ex.r.Cfg.ResponseTimeout.D(); rt > 0 && rt < d {
			d = rt
		}
		ex.drainUntil = time.Now().Add(d)
		ex.readDeadline(d)
		ex.up.c.Wake() // it goes on with the upstream's events
		return
	}
	ex.done = true
	ex.release(false)
}

// readDeadline sets the upstream connection's read deadline d from now
// (0: none), never past the end of a drain.
func (ex *Exchange) readDeadline(d time.Duration) {
	if ex.draining {
		left := max(time.Until(ex.drainUntil), time.Millisecond)
		if d == 0 || d > left {
			d = left
		}
	}
	ex.up.c.SetReadDeadline(d)
}

// drainClient stands in for a client that went away while its response
// is drained: it takes everything and sends nothing.
type drainClient struct{}

func (drainClient) PullBody() ([]byte, bool, error)                           { return nil, false, ErrClientGone }
func (drainClient) BodyTaken()                                                {}
func (drainClient) Continue100()                                              {}
func (drainClient) WriteHead(*h1.Response, []byte, int64, bool, UpstreamHead) {}
func (drainClient) Room() bool                                                { return true }
func (drainClient) Body([]byte)                                               {}
func (drainClient) End([]byte)                                                {}
func (drainClient) ReqTrailers() []byte                                       { return nil }
func (drainClient) Fail(int, UpstreamHead)                                    {}
func (drainClient) Abort()                                                    {}
func (drainClient) Wake()                                                     {}
func (drainClient) Finished()                                                 {}
