package proxy

import (
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/h1"
	"github.com/mediaship/engine/internal/loglimit"
)

// Loop is the proxy on one reactor loop: that loop's idle upstream
// connections, newest last, and the requests waiting for a connection to
// an upstream that has max_conns open from this loop, oldest first; and
// what its exchanges need of the loop. Owned by the loop's goroutine.
type Loop struct {
	// Immutable after construction.
	t        *Table
	rl       *reactor.Loop
	log      *slog.Logger
	lim      *loglimit.Limiter // for what clients and upstreams cause at will
	requests *atomic.Int64     // the server's count of requests answered

	idle   map[*routing.Upstream][]*upConn
	open   map[*routing.Upstream]int // connections open (connecting, busy or idle)
	wait   map[*routing.Upstream][]*Exchange
	byIP   map[netip.Addr]int     // upstream connections held by each client address's exchanges
	held   map[*Exchange]struct{} // exchanges holding an upstream connection
	parser *h1.Parser             // upstream response heads
}

// NewLoop is t's proxy on loop rl, logging to log (and through lim),
// counting the responses it relays in requests; limits bound the
// upstreams' response heads.
func NewLoop(t *Table, rl *reactor.Loop, log *slog.Logger, lim *loglimit.Limiter, limits *config.Limits, requests *atomic.Int64) *Loop {
	return &Loop{t: t, rl: rl, log: log, lim: lim, requests: requests,
		idle: map[*routing.Upstream][]*upConn{}, open: map[*routing.Upstream]int{}, wait: map[*routing.Upstream][]*Exchange{}, byIP: map[netip.Addr]int{},
		held:   map[*Exchange]struct{}{},
		parser: h1.NewParser(h1.Limits{MaxHeadBytes: int(limits.MaxHeaderBytes), MaxHeaders: limits.MaxHeaders * 2})}
}

// get returns an idle connection to u, or nil.
func (p *Loop) get(u *routing.Upstream) *upConn {
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
func (p *Loop) put(uc *upConn, r *routing.Route) {
	uc.ex = nil
	if len(p.idle[uc.up]) >= *r.Cfg.MaxIdle || p.rl.Draining() {
		uc.c.Close()
		return
	}
	uc.c.SetReadDeadline(r.Cfg.IdleTimeout.D())
	p.idle[uc.up] = append(p.idle[uc.up], uc)
	p.admitLater(uc.up)
}

// unsolicited counts and logs a connection closed for bytes its upstream
// sent that no request asked for; found says when they were seen.
func (p *Loop) unsolicited(uc *upConn, found string) {
	p.t.Stats.ProxyUnsolicited.Add(1)
	p.lim.Note("proxy: upstream sent bytes no request asked for; connection closed, not reused",
		"upstream", uc.up.Name, "found", found)
}

// full reports whether r may open no more connections to u from this
// loop (max_conns).
func (p *Loop) full(u *routing.Upstream, r *routing.Route) bool {
	limit := *r.Cfg.MaxConns
	return limit > 0 && p.open[u] >= limit
}

// overShare reports whether the client at ip holds half of max_conns
// already, on this loop or over every loop together (its exchanges, to
// any upstream; IPv6 by prefix), and should wait for one of its own to
// end even though a connection may be free: so that one client that
// stops reading on many streams cannot hold every connection. Addresses
// in trusted_proxies (a load balancer in front, carrying many clients)
// are not limited.
func (p *Loop) overShare(r *routing.Route, ip netip.Addr) bool {
	limit := *r.Cfg.MaxConns
	if limit == 0 || p.byIP[ip] < max(1, limit/2) && p.t.Peers.Held(ip) < max(1, limit*max(1, p.t.workers)/2) {
		return false
	}
	for _, t := range p.t.Trusted {
		if t.Contains(ip) {
			return false
		}
	}
	return true
}

// admitLater starts the oldest request waiting for u, if any, once the
// current event is handled: a connection came back to the pool, or one
// closed and another may open.
func (p *Loop) admitLater(u *routing.Upstream) {
	if len(p.wait[u]) == 0 {
		return
	}
	p.rl.Post(func() {
		l := p.wait[u]
		// The request whose client address holds the fewest upstream
		// connections goes first, then the fewest client connections,
		// then the oldest; behind every other go the requests of
		// addresses whose clients stalled a response lately (preempt):
		// a crowd of addresses with requests queued cannot keep a
		// newcomer waiting.
		now := time.Now().UnixNano()
		i := -1
		var best [3]int // stalled (0 or 1), upstream connections, client connections
		for j, ex := range l {
			if ex.done {
				i = j // gone: taken out first
				break
			}
			if len(p.idle[u]) == 0 && p.full(u, ex.r) || p.overShare(ex.r, ex.peer.Addr()) {
				continue // no connection for it yet
			}
			key := p.t.Peers.Key(ex.peer.Addr())
			rank := [3]int{0, p.t.Peers.HeldKey(key), 0}
			if p.t.stalls.recent(key, now) {
				rank[0] = 1
			}
			if p.t.Clients != nil {
				rank[2] = p.t.Clients.Held(ex.peer.Addr())
			}
			if i < 0 || rank[0] < best[0] || rank[0] == best[0] && (rank[1] < best[1] || rank[1] == best[1] && rank[2] < best[2]) {
				i, best = j, rank
			}
		}
		if i >= 0 {
			ex := l[i]
			p.wait[u] = append(l[:i], l[i+1:]...)
			l[len(l)-1] = nil
			if ex.done {
				p.admitLater(u) // its client went away: the next may go
				return
			}
			ex.waitSince = 0
			if ex.connect(false) {
				ex.Pump()
			}
			return
		}
	})
}

// Expire answers 503 to the requests that waited response_timeout for a
// connection, and reports whether any is still waiting.
func (p *Loop) Expire(now int64) (waiting bool) {
	for u, l := range p.wait {
		for len(l) > 0 && (l[0].done || now-l[0].waitSince > int64(l[0].r.Cfg.ResponseTimeout.D())) {
			ex := l[0]
			l[0] = nil
			l = l[1:]
			if !ex.done {
				ex.Fail(503, "every connection to the upstream stayed busy (max_conns) for response_timeout", nil)
			}
		}
		p.wait[u] = l
		if len(l) == 0 {
			delete(p.wait, u)
		}
		waiting = waiting || len(l) > 0
	}
	p.watchStalls(now)
	for u, l := range p.wait {
		if len(l) > 0 {
			p.preempt(u, now)
		}
	}
	return waiting || len(p.held) > 0
}

// watchStalls notes, for each exchange holding an upstream connection,
// since when its upstream connection has not moved while its client had
// no room (responses), and whether it moved less than the minimum rate
// over the last stallGrace while the client was the slow side (request
// bodies trickled in, responses read slowly): preempt reads both. Expire
// calls it on every tick, waiting or not, so that a request that comes
// to wait finds the stalls already timed.
func (p *Loop) watchStalls(now int64) {
	for ex := range p.held {
		if ex.up == nil || ex.done || ex.draining {
			continue
		}
		if ex.respHead && !ex.respDone {
			if pr := ex.up.c.Progress(); pr != ex.lastProg || ex.progSince == 0 || !ex.splicing && ex.cl.Room() {
				ex.lastProg, ex.progSince = pr, now // moving, or waiting on its upstream, not its client
			}
		}
		b := ex.moved + ex.reqSent // spliced bytes are not counted: a splice is judged by progress alone
		switch {
		case ex.winStart == 0:
			ex.winStart, ex.winBytes = now, b
		case now-ex.winStart >= int64(stallGrace):
			rate := float64(b-ex.winBytes) / time.Duration(now-ex.winStart).Seconds()
			ex.slow = rate < float64(p.t.minRate) && ex.clientBound()
			ex.winStart, ex.winBytes = now, b
		}
	}
}

// clientBound reports whether the exchange waits on its client rather
// than on its upstream: a request body the upstream would take more of,
// or a response (not spliced) the client has no room for.
func (ex *Exchange) clientBound() bool {
	switch {
	case ex.up == nil || ex.splicing:
		return false
	case !ex.reqDone && !ex.respHead:
		return ex.headSent && !ex.up.c.Pending()
	case ex.respHead && !ex.respDone:
		return !ex.cl.Room()
	}
	return false
}

// stallGrace is how long an exchange's client may take no bytes of a
// response before the exchange gives up its upstream connection to a
// request that waits for one (preempt).
const stallGrace = 5 * time.Second

// preempt resets the exchange on u whose client has taken nothing for
// stallGrace, the longest stalled, or else one whose client moved less
// than the minimum rate (min_send_rate) over the last stallGrace, its
// request body or its response, when a request waits for a connection
// to u that only a full pool keeps from it: an upstream connection is
// held for a client that reads and sends, while one that stops (or
// trickles) keeps it only as long as nobody else needs it
// (send_timeout and body_timeout bound it when nobody does).
func (p *Loop) preempt(u *routing.Upstream, now int64) {
	// Only for a request whose own address has not stalled a response
	// lately: a crowd that stalls and asks again would otherwise use up,
	// for itself, every stalled exchange as soon as it is one, and a
	// newcomer would find none.
	needed := false
	for _, ex := range p.wait[u] {
		if !ex.done && p.full(u, ex.r) && len(p.idle[u]) == 0 && !p.overShare(ex.r, ex.peer.Addr()) &&
			!p.t.stalls.recent(p.t.Peers.Key(ex.peer.Addr()), now) {
			needed = true
			break
		}
	}
	if !needed {
		return
	}
	var victim *Exchange
	victimStalled := false
	for ex := range p.held {
		if ex.up == nil || ex.up.up != u || ex.done || ex.draining {
			continue
		}
		stalled := ex.respHead && !ex.respDone && ex.progSince != 0 && now-ex.progSince >= int64(stallGrace) &&
			ex.up.c.Progress() == ex.lastProg && (ex.splicing || !ex.cl.Room())
		slow := ex.slow && ex.clientBound()
		switch {
		case stalled && (victim == nil || !victimStalled || ex.progSince < victim.progSince):
			victim, victimStalled = ex, true
		case slow && victim == nil:
			victim = ex
		}
	}
	if victim == nil {
		return
	}
	p.t.Stats.ProxyPreempted.Add(1)
	p.t.stalls.mark(p.t.Peers.Key(victim.peer.Addr()), now)
	p.lim.Note("proxy: a client that stalled (no response bytes taken for 5s) or trickled (below min_send_rate, request body or response) gave up its upstream connection to a waiting request",
		"route", victim.r.Key, "upstream", u.Name, "client", victim.peer, "path", victim.path, "stalled", victimStalled)
	victim.abort("client stalled or trickled while a request waited for its connection")
}

func (p *Loop) remove(uc *upConn) {
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
	pool *Loop
	ex   *Exchange // nil while idle in the pool
	used int       // exchanges it has carried
}

func (uc *upConn) Open(c *reactor.Conn) { uc.c = c }

func (uc *upConn) Serve(c *reactor.Conn) {
	if uc.ex != nil {
		uc.ex.Pump()
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
