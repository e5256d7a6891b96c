package engine

import (
	"errors"
	"net/netip"
	"time"

	"github.com/mediaship/engine/clienthello"
	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/passthrough"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/ktls"
	"github.com/mediaship/engine/proxyproto"
)

// passConn is one client connection in passthrough: reading its
// ClientHello, then connecting, then relaying. Owned by the loop.
type passConn struct {
	h        *connHandler
	c        *reactor.Conn  // the client
	r        *routing.Route // chosen by the ClientHello; nil while it is read
	sni      string
	u        *reactor.Conn // the upstream connection; nil before the dial
	up       *routing.Upstream
	tried    int            // upstreams tried
	lastUp   netip.AddrPort // the upstream last tried, for the access log line of a relay none took
	header   int            // bytes of PROXY header sent before the client's
	started  bool           // relaying
	done     bool           // both directions ended: the closes are clean
	counted  bool           // its bytes are in the counters
	refused  bool           // answered with an alert and closing
	moved    int64          // bytes relayed both ways at the last idle check
	movedAt  int64          // loop time (unix ns) they last changed
	relayIdx int            // index in the loop's relays
	random   [32]byte       // its ClientHello's, while claimed (passthrough.Table.Claim)
	opened   time.Time      // accepted: its access log line's time
	claimed  bool
}

// passUp serves the upstream side of a loop's relays.
type passUp struct{ h *connHandler }

// servePass moves a passthrough connection on. It returns false when the
// connection turned out to be for the engine itself: the caller goes on
// with the TLS handshake as for any connection.
func (h *connHandler) servePass(c *reactor.Conn, hc *httpConn) bool {
	pc := hc.pass
	if pc.r != nil {
		pc.serve()
		return true
	}
	px := h.srv.pass
	info, _, err := clienthello.FromRecords(c.Input())
	switch {
	case errors.Is(err, clienthello.ErrIncomplete):
		if c.EOF() || c.InputFull() {
			pc.refuse(passthrough.ReasonBadHello, 0, "client left before its ClientHello was whole")
		}
		return true // the header_timeout set at accept runs
	case errors.Is(err, clienthello.ErrNotTLS):
		if h.srv.tlsConfig != nil {
			hc.pass = nil
			return false // the handshake answers it with its alert
		}
		pc.refuse(passthrough.ReasonNotTLS, ktls.AlertUnexpectedMessage, "not a TLS handshake on a passthrough listener")
		return true
	case err != nil:
		pc.refuse(passthrough.ReasonBadHello, ktls.AlertDecodeError, "malformed ClientHello: "+err.Error())
		return true
	}
	pc.sni = info.ServerName
	r := px.Route(info.ServerName)
	if r == nil {
		if h.localTLS(info.ServerName) {
			hc.pass = nil
			return false
		}
		reason := passthrough.ReasonNoRoute
		if info.ServerName == "" {
			reason = passthrough.ReasonNoSNI
		}
		pc.refuse(reason, ktls.AlertUnrecognizedName, "no passthrough route and no site for the server name")
		return true
	}
	if !px.Claim(info.Random) {
		pc.refuse(passthrough.ReasonLoop, ktls.AlertInternalError, "a ClientHello a relay open already carries came back: a passthrough upstream is this server, or relays back to it")
		return true
	}
	pc.random, pc.claimed = info.Random, true
	pc.r = r
	c.SetReadDeadline(0) // the connect timeout bounds what comes next
	pc.dial()
	return true
}

// localTLS reports whether the engine terminates TLS for a server name
// no passthrough route takes: the handshake would give it a certificate
// (a site or a terminating route names it, or a default takes names
// nothing names: certTable).
func (h *connHandler) localTLS(name string) bool {
	s := h.srv
	return s.tlsConfig != nil && s.certs.cur.Load().pick(serverName(name)) != nil
}

// refuse answers a connection that cannot be relayed with a TLS alert in
// the clear (none when desc is 0), counts and logs why, and closes it.
func (pc *passConn) refuse(why passthrough.Reason, desc byte, msg string) {
	h, c := pc.h, pc.c
	if pc.refused {
		return
	}
	pc.refused = true
	h.srv.pass.Stats.Failures[why].Add(1)
	args := []any{"peer", c.Peer(), "reason", passthrough.ReasonNames[why]}
	if pc.sni != "" || why == passthrough.ReasonNoRoute {
		args = append(args, "sni", pc.sni)
	}
	h.lc.note("passthrough: "+msg, args...)
	if desc != 0 {
		c.Write(ktls.ClearAlert(desc))
	}
	c.CloseAfterFlush()
	c.Wake() // refuse may run from the upstream's events
}

// dial connects to the next upstream of the route that is not backing
// off; with none left the client gets an internal_error alert.
func (pc *passConn) dial() {
	h, r := pc.h, pc.r
	for pc.tried < len(r.Ups) {
		u := r.Pick(time.Now().UnixNano())
		pc.tried++
		if u == nil {
			break
		}
		pc.lastUp = u.Addr
		uc, err := h.lc.loop.Dial(u.Addr, r.Cfg.ConnectTimeout.D(), passUp{h})
		if err != nil {
			pc.upFailed(u, err)
			continue
		}
		pc.u, pc.up = uc, u
		uc.State = pc
		u.Active.Add(1)
		return
	}
	// Logged as nginx's stream module logs it: status 502, nothing
	// relayed, the upstream last tried (none when every one was backing
	// off).
	lc := h.lc
	lc.logBuf = lc.srv.alog.AppendRelay(lc.logBuf, &lc.logClock, &accesslog.Relay{Start: pc.opened, Client: pc.c.Peer().Addr(),
		SNI: pc.sni, Route: r.Cfg.Domain, Upstream: pc.lastUp, Status: 502})
	lc.batchLog()
	pc.refuse(passthrough.ReasonUpstream, ktls.AlertInternalError, "no upstream could be connected")
}

func (pc *passConn) upFailed(u *routing.Upstream, err error) {
	backoff := u.Failed()
	pc.h.lc.note("passthrough: upstream connection failed; trying another, and skipping this one for a while",
		"route", pc.r.Key, "upstream", u.Name, "err", err, "backoff", backoff)
}

// serve runs on either connection's events once the route is chosen.
func (pc *passConn) serve() {
	c, u := pc.c, pc.u
	if u == nil || c.Closed() {
		return
	}
	if !pc.started {
		if !u.Connected() {
			return
		}
		pc.start()
		return
	}
	if c.EOF() && u.EOF() && !c.Pending() && !u.Pending() {
		pc.done = true
		c.Close()
		u.Close()
	}
}

// start sends what the client has sent so far (its ClientHello and
// anything after), behind a PROXY header when the route wants one, then
// relays both ways.
func (pc *passConn) start() {
	c, u, r := pc.c, pc.u, pc.r
	pc.started = true
	pc.up.Failures.Store(0)
	if r.Cfg.ProxyProtocol == "v2" {
		local, _ := c.LocalAddr()
		hdr := proxyproto.AppendV2(nil, proxyproto.TCP, c.Peer(), local)
		pc.header = len(hdr)
		u.Write(hdr)
	}
	in := c.Input()
	u.Write(in)
	c.Consume(len(in))
	u.Relay(c)
	c.Relay(u)
	px := pc.h.srv.pass
	px.Stats.PassRelayed.Add(1)
	px.Stats.PassActive.Add(1)
	pc.movedAt = c.Loop().Now().UnixNano()
	pc.h.addRelay(pc)
}

// closed runs when either connection has closed: the other goes too,
// with a reset unless both directions had ended.
func (pc *passConn) closed(x *reactor.Conn) {
	if !pc.started && x == pc.u && !pc.c.Closed() {
		// The connect failed: try the next upstream.
		pc.up.Active.Add(-1)
		pc.u = nil
		err := x.DialErr()
		if err == nil {
			err = errors.New("closed before the relay began")
		}
		pc.upFailed(pc.up, err)
		pc.dial()
		return
	}
	if pc.claimed {
		pc.claimed = false
		pc.h.srv.pass.Release(pc.random)
	}
	for _, o := range []*reactor.Conn{pc.c, pc.u} {
		if o != nil && o != x && !o.Closed() {
			if pc.done {
				o.Close()
			} else {
				o.Abort()
			}
		}
	}
	if pc.started && !pc.counted {
		pc.counted = true
		px := pc.h.srv.pass
		up, down := pc.u.Sent()-int64(pc.header), pc.c.Sent()
		px.Stats.PassActive.Add(-1)
		px.Stats.PassBytesUp.Add(up)
		px.Stats.PassBytesDown.Add(down)
		lc := pc.h.lc
		lc.logBuf = lc.srv.alog.AppendRelay(lc.logBuf, &lc.logClock, &accesslog.Relay{Start: pc.opened, Client: pc.c.Peer().Addr(),
			SNI: pc.sni, Route: pc.r.Cfg.Domain, Upstream: pc.up.Addr, Up: up, Down: down})
		lc.batchLog()
		pc.up.Active.Add(-1)
		pc.h.removeRelay(pc)
	} else if !pc.started && pc.u != nil && x == pc.c {
		pc.up.Active.Add(-1)
	}
}

func (p passUp) Open(*reactor.Conn) {}

func (p passUp) Serve(u *reactor.Conn) {
	if pc, _ := u.State.(*passConn); pc != nil {
		pc.serve()
	}
}

func (p passUp) Closed(u *reactor.Conn) {
	if pc, _ := u.State.(*passConn); pc != nil {
		pc.closed(u)
	}
}

// addRelay and removeRelay keep the loop's list of relays for the idle
// check.
func (h *connHandler) addRelay(pc *passConn) {
	pc.relayIdx = len(h.relays)
	h.relays = append(h.relays, pc)
}

func (h *connHandler) removeRelay(pc *passConn) {
	i := pc.relayIdx
	last := len(h.relays) - 1
	h.relays[i] = h.relays[last]
	h.relays[i].relayIdx = i
	h.relays[last] = nil
	h.relays = h.relays[:last]
}

// expireRelays closes relays on which no byte moved either way for their
// route's idle_timeout.
func (h *connHandler) expireRelays() {
	if len(h.relays) == 0 {
		return
	}
	now := h.lc.loop.Now().UnixNano()
	var idle []*passConn
	for _, pc := range h.relays {
		moved := pc.c.Sent() + pc.u.Sent()
		if moved != pc.moved {
			pc.moved, pc.movedAt = moved, now
			pc.c.MarkIdle(false)
			continue
		}
		// Quiet since the last check: at max_connections the loop may
		// close it, the longest quiet first, to admit a new client.
		pc.c.MarkIdle(true)
		if now-pc.movedAt > int64(pc.r.Cfg.IdleTimeout.D()) {
			idle = append(idle, pc)
		}
	}
	for _, pc := range idle {
		h.lc.note("passthrough: relay idle; closing", "peer", pc.c.Peer(), "sni", pc.sni,
			"upstream", pc.up.Name, "idle_timeout", pc.r.Cfg.IdleTimeout.D())
		pc.done = true // a quiet end, not an error: both sides get a FIN
		pc.c.Close()
	}
}
