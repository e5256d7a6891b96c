package passthrough

import (
	"bytes"
	"crypto/aes"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mediaship/engine/clienthello"
	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/internal/loglimit"
	"github.com/mediaship/engine/quicinitial"
)

// Router is QUIC passthrough on the listener's UDP socket. A datagram
// of a connection it does not know is opened far enough to read the
// ClientHello's server name from its Initial packets (quicinitial); a
// name with a passthrough route gets a flow: the client's datagrams go
// to the route's upstream from a UDP socket of the flow's own, and what
// the upstream sends on that socket goes back to the client. Everything
// else goes to the engine's own HTTP/3 (quic-go reads through the
// router), or is dropped when the engine serves no HTTP/3. The engine's
// own connections are known by their IDs: quic-go takes them from
// OwnCIDs, whose tag the router checks, and a hello released to quic-go
// leaves its client-chosen ID behind (ownHellos) for the client's
// Initial and 0-RTT packets that follow it.
//
// It never answers a client by itself (no Version Negotiation, no Retry,
// no close): a client gets only what an upstream or quic-go sent it, so
// the engine adds no amplification of its own.
//
// Flows are keyed by the client's address and told apart by connection
// IDs: the client's first Destination Connection ID, the Source
// Connection IDs the upstream used in its long-header packets, and IDs
// learned from the client's own packets when they were routed by a
// guess. The guess is needed because the IDs an upstream issues in
// NEW_CONNECTION_ID are encrypted, and a client moves to one of them
// right after its handshake (quic-go does at its first packet after
// the handshake completes, often a long-header one). The guess goes by
// what a first flight forged from the client's address cannot fake: a
// long header goes to a flow of the same client Source Connection ID,
// first the one under whose Initial keys it opens, then one whose client
// has sent a packet to an ID its upstream gave; a short header to the
// flow whose client has sent a 1-RTT packet to its upstream's ID and is
// making its first switch; the fallbacks after those, and what stays
// ambiguous, are in quicClient.guess. A datagram carrying part of a
// ClientHello is always held with its hello, never guessed into a flow.
//
// A flow whose client never answers the upstream is dropped after
// helloWait (see quicFlow.confirmed), one whose handshake is not done
// after quicHandshakeMax (established), and one whose client keeps
// sending to an upstream that has stopped answering after
// quicOneSidedMax (oneSided). A client that changes address (migration,
// NAT rebinding) is not followed.
//
// Invariant: every table is bounded (maxPendingHellos hellos of at most
// maxHeldBytes, maxFlows flows and their addresses, maxOwnHellos IDs of
// hellos released to the engine's own HTTP/3), and a full one makes
// room from what is unconfirmed or dead from its upstream's side, never
// from a flow whose upstream answers its client or that both sides
// leave idle (of the remembered hello IDs, the oldest goes).
type Router struct {
	// Immutable after construction.
	px        *Table
	udp       *net.UDPConn
	log       *slog.Logger
	limiter   *loglimit.Limiter // what clients cause at will
	own       bool              // quic-go reads what is not relayed
	ids       *OwnCIDs          // the IDs of the engine's own HTTP/3; nil unless own
	maxFlows  int               // flows open at once
	helloWait time.Duration     // bounds the gathering of one ClientHello
	now       func() time.Time  // the clock of every time the router keeps (time.Now; tests move theirs by hand)
	stop      chan struct{}
	alog      *accesslog.Log       // a line per flow as it ends; nil for none (SetAccessLog)
	hold      func(netip.AddrPort) // SetSteering; nil without it
	unhold    func(netip.AddrPort)

	logMu    sync.Mutex // guards logClock and logBuf: flows end on several goroutines
	logClock accesslog.Clock
	logBuf   []byte

	mu      sync.Mutex
	clients map[netip.AddrPort]*quicClient // guarded by mu; only addresses with flows
	pending map[string]*quicPending        // guarded by mu; by client address and DCID
	// pendingOrder is pending's keys, oldest first; some may be gone.
	pendingOrder []string // guarded by mu
	flows        int      // guarded by mu
	closed       bool     // guarded by mu
	// ownHellos holds, by client address and DCID, the hellos released to
	// the engine's own HTTP/3; ownOrder is its keys in a ring, ownNext
	// the oldest once it is full.
	ownHellos map[string]struct{} // guarded by mu
	ownOrder  []string            // guarded by mu
	ownNext   int                 // guarded by mu

	// Owned by the reading goroutine (quic-go's, or run's).
	ready   []quicDatagram // released to quic-go, oldest first
	buf     []byte
	scratch [aes.BlockSize]byte // for ids.mine
}

// quicClient is what the router knows of one client address.
type quicClient struct {
	flows []*quicFlow // guarded by the router's mu
}

// quicPending is a ClientHello being gathered: the datagrams so far, held
// until the server name is known.
type quicPending struct {
	hello quicinitial.Hello
	held  [][]byte
	bytes int
	since time.Time
}

type quicDatagram struct {
	b    []byte
	from netip.AddrPort
}

// quicFlow is one relayed QUIC connection.
type quicFlow struct {
	// Immutable after construction.
	r      *Router
	client netip.AddrPort
	rt     *routing.Route
	ups    *routing.Upstream
	up     *net.UDPConn // connected to the upstream
	idle   time.Duration
	// version and scid are those of the client's first flight: a client
	// keeps its Source Connection ID in every long header it sends.
	version uint32
	scid    []byte

	cids     []flowCID         // guarded by r.mu: connection IDs that name this flow, the client's first DCID first
	cidLen   int               // guarded by r.mu: the length of the upstream's IDs; 0 until one is seen
	switched bool              // guarded by r.mu: the client has made its first switch of ID (see guess)
	keys     *quicinitial.Keys // guarded by r.mu: the client's Initial keys, once guess needed them
	// proven: the client has sent a packet to an ID its upstream gave
	// itself in the clear (a long header's Source Connection ID), which
	// only one that receives the upstream's datagrams knows: a first
	// flight forged from the client's address never gets there.
	// proven1RTT: one of them was a short-header (1-RTT) packet, sent
	// once the client's handshake was done and before its first switch
	// of ID. Guarded by r.mu.
	proven, proven1RTT bool
	// clientLast and upLast are when (unix ns, the router's clock) the
	// client's last datagram went to the upstream, and the upstream's
	// last one arrived (0: none yet). See oneSided.
	clientLast, upLast atomic.Int64
	gone               atomic.Bool
	// answered: the upstream has sent the client something. confirmed:
	// the client has since sent something other than its first flight
	// again (a packet for another connection ID than its first), as a
	// client that got the answer does. A flow not confirmed within
	// helloWait of its opening is dropped, so that Initials replayed
	// from spoofed addresses hold a flow seconds, not minutes.
	// established: the upstream's latest datagram began with a
	// short-header (1-RTT) packet. Once its handshake is done a QUIC
	// server sends nothing else: it discards its Handshake keys (RFC 9001
	// §4.9.2), and sends HANDSHAKE_DONE and everything after in 1-RTT
	// packets. Before, it may send 0.5-RTT data alone (quic-go does), but
	// its Handshake packets follow, retransmitted until the client
	// finishes or the server gives up. A flow not established
	// quicHandshakeMax after its opening is dropped: its client answered
	// but never finished the handshake, as one that forges its answers
	// (without the keys a relay cannot validate an address the way QUIC
	// does) and sends its first flight again to keep the upstream
	// talking. See also oneSided.
	answered, confirmed, established atomic.Bool
	opened                           time.Time
	random                           [32]byte // its ClientHello's (Table.Claim)
	sni                              string   // the server name its ClientHello named
	// bytesUp and bytesDown are the datagram bytes relayed each way, for
	// its access log line.
	bytesUp, bytesDown atomic.Int64
}

// Bounds of the router's tables.
const (
	maxPendingHellos = 4096
	maxHeldDatagrams = 8 // a ClientHello in QUIC takes 1-3 datagrams
	maxHeldBytes     = 16 << 10
	maxFlowCIDs      = 8
	// maxKeyTries bounds the flows whose Initial keys one datagram is
	// tried under (see guess): each costs an AES-GCM open.
	maxKeyTries = 8
	// maxOwnHellos bounds the hellos released to the engine's own HTTP/3
	// whose IDs are remembered: each is needed only until its handshake
	// is done (seconds), and a new one replaces the oldest.
	maxOwnHellos    = 4096
	quicDatagramMax = 1 << 16 // a UDP datagram's most
	// quicSwitchWindow is how long after a flow opens its client is
	// taken to be in its handshake (sending long headers), or still
	// making its first switch of connection ID, which follows the end of
	// its handshake; a client gives up a handshake after 10 s by default
	// (quic-go: twice HandshakeIdleTimeout, 5 s). Past it, a client that
	// never switched is settled like one that did.
	quicSwitchWindow = 10 * time.Second
	// quicIdleCap bounds the idle timeout of a QUIC flow: QUIC endpoints
	// close silently after their own idle timeout (seconds to minutes),
	// so a flow quiet this long is dead.
	quicIdleCap = 3 * time.Minute
	// A flow one-sided (see quicFlow.oneSided) this long may be closed
	// for a new flow at max_connections; one-sided longer than
	// quicOneSidedMax it is closed by the sweep. A live QUIC endpoint
	// acknowledges its peer's ack-eliciting packets within its
	// max_ack_delay (25 ms by default), so its side of a flow whose
	// client talks goes quiet for a round trip and that delay, not a
	// second; and quicOneSidedMax is past quic-go's handshake idle
	// timeout (5 s) and a client's handshake (10 s), so that an upstream
	// that merely lost the client's first answers is not taken for dead.
	quicOneSidedEvict = time.Second
	quicOneSidedMax   = 15 * time.Second
	// quicHandshakeMax bounds a flow's handshake (see
	// quicFlow.established): past quic-go's handshake timeout and a
	// browser's (10 s), with a round trip to spare. A flow not
	// established quicSwitchWindow after its opening, whose client has
	// given up, may be closed for a new one at max_connections.
	quicHandshakeMax = 15 * time.Second
)

// NewRouter routes the datagrams that arrive on udp. ids issues the
// IDs of the engine's own HTTP/3, which then reads through the router
// (routedConn); nil when the engine serves none (run reads).
func NewRouter(px *Table, udp *net.UDPConn, ids *OwnCIDs, maxFlows int, helloWait time.Duration, log *slog.Logger) *Router {
	r := NewRouterOn(time.Now, px, udp, ids, maxFlows, helloWait, log)
	go r.sweep()
	return r
}

// NewRouterOn is a router on the clock now, which nothing sweeps:
// tests call expire when they have moved their clock.
func NewRouterOn(now func() time.Time, px *Table, udp *net.UDPConn, ids *OwnCIDs, maxFlows int, helloWait time.Duration, log *slog.Logger) *Router {
	return &Router{px: px, udp: udp, own: ids != nil, ids: ids, maxFlows: maxFlows, helloWait: helloWait, now: now, log: log,
		limiter: loglimit.New(log, logsPerSecond), clients: map[netip.AddrPort]*quicClient{}, pending: map[string]*quicPending{}, ownHellos: map[string]struct{}{},
		stop: make(chan struct{}), buf: make([]byte, quicDatagramMax)}
}

// Run reads and routes datagrams when the engine serves no HTTP/3 of its
// own, until the socket closes.
func (r *Router) Run() {
	for {
		_, _, err := r.next(nil)
		if err != nil {
			return
		}
	}
}

// next reads datagrams until one is for the engine itself, and copies it
// into p. Only one goroutine calls it.
func (r *Router) next(p []byte) (int, netip.AddrPort, error) {
	for {
		if len(r.ready) > 0 {
			d := r.ready[0]
			r.ready[0] = quicDatagram{}
			r.ready = r.ready[1:]
			return copy(p, d.b), d.from, nil
		}
		n, from, err := r.udp.ReadFromUDPAddrPort(r.buf)
		if err != nil {
			return 0, from, err
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if r.route(r.buf[:n], from) && r.own {
			return copy(p, r.buf[:n]), from, nil
		}
	}
}

// route takes one datagram from a client. It returns true when the
// datagram is for the engine's own HTTP/3; otherwise it was relayed,
// held, or dropped. Only the reading goroutine calls it.
func (r *Router) route(d []byte, from netip.AddrPort) (own bool) {
	long, isLong := quicinitial.Long(d)
	if r.ids != nil && r.ids.mine(ownDCID(d, long, isLong), &r.scratch) {
		return true // an ID the engine's own HTTP/3 issued
	}
	r.mu.Lock()
	cl := r.clients[from]
	relay := func(f *quicFlow) bool {
		if !f.confirmed.Load() && f.answered.Load() && (!isLong || !bytes.Equal(long.DCID, f.cids[0].id)) {
			f.confirmed.Store(true)
		}
		r.mu.Unlock()
		f.toUpstream(d)
		return false
	}
	if cl != nil {
		if f, up := cl.byCID(d, long, isLong); f != nil {
			if up {
				f.proven = true
				f.proven1RTT = f.proven1RTT || !isLong
			}
			return relay(f)
		}
	}
	var key string
	var pd *quicPending
	if isLong {
		key = pendingKey(from, long.DCID)
		if _, ok := r.ownHellos[key]; ok {
			r.mu.Unlock()
			return true // more of a handshake with the engine's own HTTP/3
		}
		pd = r.pending[key]
	}
	if pd == nil && (!isLong || !quicinitial.CarriesHello(d)) {
		// Not part of a ClientHello: a packet of a connection the router
		// knows by address only (see guess), or one for the engine. (Part
		// of one is held with it, even when it comes before its
		// beginning, and never guessed into a flow.)
		if cl != nil {
			if f := cl.guess(d, long, isLong, r.now()); f != nil {
				return relay(f)
			}
		}
		r.mu.Unlock()
		if !r.own {
			r.px.Stats.QUICPassDropped.Add(1)
		}
		return true
	}
	if pd == nil {
		if len(r.pending) >= maxPendingHellos {
			// Full: the oldest goes, so a flood of half hellos delays a
			// real client by its own pace, not by helloWait.
			r.evictPending()
		}
		pd = &quicPending{since: r.now()}
		r.pending[key] = pd
		r.pendingOrder = append(r.pendingOrder, key)
	}
	if len(pd.held) == maxHeldDatagrams || pd.bytes+len(d) > maxHeldBytes {
		delete(r.pending, key)
		r.mu.Unlock()
		r.fail(ReasonBadHello, from, "", "QUIC ClientHello spans too many datagrams")
		return false
	}
	pd.held = append(pd.held, bytes.Clone(d))
	pd.bytes += len(d)
	info, err := pd.hello.Add(d)
	if errors.Is(err, clienthello.ErrIncomplete) {
		r.mu.Unlock()
		return false // held, 0-RTT packets with the same DCID too
	}
	delete(r.pending, key)
	var rt *routing.Route
	if err == nil {
		rt = r.px.Route(info.ServerName)
	}
	if rt == nil {
		r.mu.Unlock()
		r.release(pd, key, from, info.ServerName, err)
		return false
	}
	if !r.px.Claim(info.Random) {
		r.mu.Unlock()
		r.fail(ReasonLoop, from, info.ServerName, "a QUIC ClientHello a relay open already carries came back: a passthrough upstream is this server, or relays back to it; dropped")
		return false
	}
	if r.flows >= r.maxFlows && !r.makeRoom() {
		r.px.Release(info.Random)
		r.mu.Unlock()
		r.fail(ReasonTableFull, from, info.ServerName, "too many QUIC relays open (max_connections); dropping a new one")
		return false
	}
	f, err := r.open(rt, from, long, info.Random, info.ServerName)
	if err != nil {
		r.px.Release(info.Random)
		r.mu.Unlock()
		r.fail(ReasonUpstream, from, info.ServerName, "no QUIC upstream could be reached: "+err.Error())
		return false
	}
	if cl == nil {
		cl = &quicClient{}
		r.clients[from] = cl
		if r.hold != nil {
			r.hold(from)
		}
	}
	cl.flows = append(cl.flows, f)
	r.flows++
	r.mu.Unlock()
	r.px.Stats.QUICPassRelayed.Add(1)
	r.px.Stats.QUICPassActive.Add(1)
	for _, h := range pd.held {
		f.toUpstream(h)
	}
	return false
}

// evictPending drops the oldest ClientHello being gathered, counted as
// table_full. Called with mu held.
func (r *Router) evictPending() {
	for len(r.pendingOrder) > 0 {
		k := r.pendingOrder[0]
		r.pendingOrder = r.pendingOrder[1:]
		if _, ok := r.pending[k]; ok {
			delete(r.pending, k)
			r.px.Stats.QUICFailures[ReasonTableFull].Add(1)
			return
		}
	}
}

// makeRoom makes room for a new flow by closing the oldest one whose
// client has not answered yet (see quicFlow.confirmed), or has not
// finished its handshake quicSwitchWindow after its opening (see
// established); else the one that has been one-sided longest (see
// quicFlow.oneSided), at least quicOneSidedEvict. An established flow
// whose upstream answers its client, or that both sides leave idle, is
// never closed for a new one. It reports whether it could. Called with
// mu held.
func (r *Router) makeRoom() bool {
	var unconfirmed, oneSided *quicFlow
	longest := quicOneSidedEvict
	now := r.now()
	for _, cl := range r.clients {
		for _, f := range cl.flows {
			if !f.confirmed.Load() || !f.established.Load() && now.Sub(f.opened) >= quicSwitchWindow {
				if unconfirmed == nil || f.opened.Before(unconfirmed.opened) {
					unconfirmed = f
				}
			} else if d := f.oneSided(); d >= longest {
				oneSided, longest = f, d
			}
		}
	}
	victim := unconfirmed
	if victim != nil {
		r.px.Stats.QUICPassUnconfirmed.Add(1)
	} else if victim = oneSided; victim != nil {
		r.px.Stats.QUICPassOneSided.Add(1)
	} else {
		return false
	}
	r.unlink(victim)
	go victim.close()
	return true
}

// unlink takes a flow out of the tables, if it is still there. Called
// with mu held.
func (r *Router) unlink(f *quicFlow) {
	cl := r.clients[f.client]
	if cl == nil {
		return
	}
	n := len(cl.flows)
	cl.flows = slices.DeleteFunc(cl.flows, func(g *quicFlow) bool { return g == f })
	r.flows -= n - len(cl.flows)
	if len(cl.flows) == 0 {
		r.forget(f.client)
	}
}

// forget removes a client address without flows. Called with mu held.
func (r *Router) forget(client netip.AddrPort) {
	delete(r.clients, client)
	if r.unhold != nil {
		r.unhold(client)
	}
}

// SetSteering has the router tell the kernel's QUIC steering which client
// addresses it relays flows for (hold when an address gets its first
// flow, drop when its last ends), so that a successor generation leaves
// their datagrams here. Call it before Run.
func (r *Router) SetSteering(hold, unhold func(netip.AddrPort)) { r.hold, r.unhold = hold, unhold }

// Flows is the number of flows open.
func (r *Router) Flows() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flows
}

// release hands the datagrams of a hello no route takes to the engine's
// own HTTP/3, in order, and remembers its key (client address and DCID)
// for the datagrams that follow; or drops them when there is none.
func (r *Router) release(pd *quicPending, key string, from netip.AddrPort, sni string, err error) {
	if r.own {
		r.mu.Lock()
		r.rememberOwn(key)
		r.mu.Unlock()
		for _, h := range pd.held {
			r.ready = append(r.ready, quicDatagram{h, from})
		}
		return
	}
	switch {
	case err != nil:
		r.fail(ReasonBadHello, from, "", "unreadable QUIC Initial: "+err.Error())
	case sni == "":
		r.fail(ReasonNoSNI, from, "", "QUIC ClientHello without a server name and no \"*\" route")
	default:
		r.fail(ReasonNoRoute, from, sni, "QUIC ClientHello names a server no passthrough route has")
	}
}

// rememberOwn notes the key of a hello released to the engine's own
// HTTP/3; past maxOwnHellos the oldest goes. Called with mu held.
func (r *Router) rememberOwn(key string) {
	if _, ok := r.ownHellos[key]; ok {
		return
	}
	if len(r.ownOrder) < maxOwnHellos {
		r.ownOrder = append(r.ownOrder, key)
	} else {
		delete(r.ownHellos, r.ownOrder[r.ownNext])
		r.ownOrder[r.ownNext] = key
		r.ownNext = (r.ownNext + 1) % maxOwnHellos
	}
	r.ownHellos[key] = struct{}{}
}

func (r *Router) fail(why Reason, from netip.AddrPort, sni, msg string) {
	r.px.Stats.QUICFailures[why].Add(1)
	args := []any{"peer", from, "reason", ReasonNames[why]}
	if sni != "" {
		args = append(args, "sni", sni)
	}
	r.limiter.Note("passthrough: "+msg, args...)
}

func pendingKey(from netip.AddrPort, dcid []byte) string {
	b, _ := from.MarshalBinary()
	return string(append(b, dcid...))
}

// open connects a UDP socket to an upstream of rt for a new flow, whose
// client's first flight began with first. Called with the router's mu
// held.
func (r *Router) open(rt *routing.Route, client netip.AddrPort, first quicinitial.Packet, random [32]byte, sni string) (*quicFlow, error) {
	var last error = errors.New("every upstream is backing off")
	for range rt.Ups {
		u := rt.Pick(time.Now().UnixNano())
		if u == nil {
			break
		}
		up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(u.Addr))
		if err != nil {
			u.Failed()
			last = err
			continue
		}
		f := &quicFlow{r: r, client: client, rt: rt, ups: u, up: up, idle: min(rt.Cfg.IdleTimeout.D(), quicIdleCap),
			version: first.Version, scid: bytes.Clone(first.SCID), cids: []flowCID{{id: bytes.Clone(first.DCID)}}}
		f.opened, f.random, f.sni = r.now(), random, sni
		u.Active.Add(1)
		go f.fromUpstream()
		return f, nil
	}
	return nil, last
}

// toUpstream sends a client's datagram on.
func (f *quicFlow) toUpstream(d []byte) {
	if _, err := f.up.Write(d); err == nil {
		f.clientLast.Store(f.r.now().UnixNano())
		f.r.px.Stats.QUICPassBytesUp.Add(int64(len(d)))
		f.bytesUp.Add(int64(len(d)))
	}
}

// oneSided is how long the flow's client went on sending after its
// upstream last sent anything: the time from the upstream's last
// datagram to the client's last one, or 0 when the upstream spoke last
// (or never has: see confirmed). A live upstream answers a client that
// talks within a round trip and its ack delay, so a flow one-sided for
// seconds is dead from the upstream's side (it closed the connection,
// or never had one: a client that keeps sending garbage to it); a
// connection that both sides leave idle is not one-sided, however long
// it stays so.
func (f *quicFlow) oneSided() time.Duration {
	c, u := f.clientLast.Load(), f.upLast.Load()
	if u == 0 || c <= u {
		return 0
	}
	return time.Duration(c - u)
}

// idleFor is how long nothing has moved either way.
func (f *quicFlow) idleFor(now time.Time) time.Duration {
	return time.Duration(now.UnixNano() - max(f.clientLast.Load(), f.upLast.Load(), f.opened.UnixNano()))
}

// fromUpstream sends the upstream's datagrams to the client until the
// flow ends, learning the connection IDs the upstream gives itself.
// Where the kernel allows, datagrams come in batches (UDP_GRO: a QUIC
// server that sends with GSO, as quic-go does, delivers a run of
// same-sized datagrams in one read) and leave in one send, split again
// by the kernel (UDP_SEGMENT), each datagram as the upstream sent it.
func (f *quicFlow) fromUpstream() {
	r := f.r
	gro := enableGRO(f.up)
	gso := gro
	for {
		err := readUDP(f.up, func(d, oob []byte) {
			f.upLast.Store(r.now().UnixNano())
			n, seg := len(d), len(d)
			if gro {
				if s := groSegment(oob); s > 0 && s < n {
					seg = s
				}
			}
			for off := 0; off < n; off += seg {
				if p, ok := quicinitial.Long(d[off:min(off+seg, n)]); ok && len(p.SCID) > 0 {
					f.learn(p.SCID)
				}
				f.established.Store(d[off]&0x80 == 0)
			}
			var err error
			if seg < n && gso {
				_, _, err = r.udp.WriteMsgUDPAddrPort(d, gsoControl(seg), f.client)
				if errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EINVAL) {
					gso, err = false, nil // this path cannot segment: one by one from now on
				}
			}
			if seg == n || !gso {
				for off := 0; off < n && err == nil; off += seg {
					_, err = r.udp.WriteToUDPAddrPort(d[off:min(off+seg, n)], f.client)
				}
			}
			if err == nil {
				f.answered.Store(true)
				r.px.Stats.QUICPassBytesDown.Add(int64(n))
				f.bytesDown.Add(int64(n))
			}
		})
		if f.gone.Load() || errors.Is(err, net.ErrClosed) {
			return
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			// ICMP port unreachable: nothing listens there. The upstream
			// backs off as a refused TCP connect does, and the flow goes;
			// the client's next Initial opens one to another upstream.
			backoff := f.ups.Failed()
			r.limiter.Note("passthrough: QUIC upstream refused; relay closed", "peer", f.client, "upstream", f.ups.Name, "backoff", backoff)
			r.drop(f)
			return
		}
		// Other errors: the flow stays until it is idle; the client's
		// next datagrams may get through.
		r.limiter.Note("passthrough: QUIC upstream read failed", "peer", f.client, "upstream", f.ups.Name, "err", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// sweep expires quiet flows and ClientHellos that never completed, once
// a second, until the router closes.
func (r *Router) sweep() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.expire(r.now())
		}
	}
}

func (r *Router) expire(now time.Time) {
	var dead []*quicFlow
	r.mu.Lock()
	for k, pd := range r.pending {
		if now.Sub(pd.since) > r.helloWait {
			delete(r.pending, k)
			r.px.Stats.QUICFailures[ReasonHelloTimeout].Add(1)
		}
	}
	// Keep pendingOrder to the keys still there.
	kept := r.pendingOrder[:0]
	for _, k := range r.pendingOrder {
		if _, ok := r.pending[k]; ok {
			kept = append(kept, k)
		}
	}
	clear(r.pendingOrder[len(kept):])
	r.pendingOrder = kept
	for addr, cl := range r.clients {
		kept := cl.flows[:0]
		for _, f := range cl.flows {
			if f.idleFor(now) > f.idle {
				dead = append(dead, f)
				continue
			}
			if !f.confirmed.Load() && now.Sub(f.opened) > r.helloWait ||
				!f.established.Load() && now.Sub(f.opened) > quicHandshakeMax {
				r.px.Stats.QUICPassUnconfirmed.Add(1)
				dead = append(dead, f)
				continue
			}
			if f.oneSided() > quicOneSidedMax {
				r.px.Stats.QUICPassOneSided.Add(1)
				dead = append(dead, f)
				continue
			}
			kept = append(kept, f)
		}
		clear(cl.flows[len(kept):])
		cl.flows = kept
		if len(kept) == 0 {
			r.forget(addr)
		}
	}
	r.flows -= len(dead)
	r.mu.Unlock()
	for _, f := range dead {
		f.close()
	}
}

func (f *quicFlow) close() {
	if f.gone.Swap(true) {
		return
	}
	f.up.Close()
	f.r.px.Release(f.random)
	f.ups.Active.Add(-1)
	f.r.px.Stats.QUICPassActive.Add(-1)
	f.r.logRelay(f)
}

// SetAccessLog makes the router write an access log line for each flow
// when it ends (accesslog.Relay, QUIC set). Call it before Run.
func (r *Router) SetAccessLog(l *accesslog.Log) { r.alog = l }

// logRelay writes f's access log line.
func (r *Router) logRelay(f *quicFlow) {
	if r.alog == nil {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	r.logBuf = r.alog.AppendRelay(r.logBuf[:0], &r.logClock, &accesslog.Relay{Start: f.opened, Client: f.client.Addr(),
		QUIC: true, SNI: f.sni, Route: f.rt.Cfg.Domain, Upstream: f.ups.Addr, Up: f.bytesUp.Load(), Down: f.bytesDown.Load()})
	r.alog.Write(r.logBuf)
}

// drop removes a flow from the tables and closes it.
func (r *Router) drop(f *quicFlow) {
	r.mu.Lock()
	r.unlink(f)
	r.mu.Unlock()
	f.close()
}

// Close stops the router and its flows; the socket is closed by its
// owner.
func (r *Router) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	close(r.stop)
	var all []*quicFlow
	for addr, cl := range r.clients {
		all = append(all, cl.flows...)
		if r.unhold != nil {
			r.unhold(addr)
		}
	}
	r.clients = map[netip.AddrPort]*quicClient{}
	r.mu.Unlock()
	for _, f := range all {
		f.close()
	}
}

// routedConn is the socket as quic-go sees it when the router sits
// between them: reads come through the router, writes go straight out.
// It is deliberately not a quic.OOBCapablePacketConn, whose batch reads
// would go around the router.
// PacketConn is the router's socket as the engine's own HTTP/3 reads it:
// what the router did not relay.
func (r *Router) PacketConn() net.PacketConn { return routedConn{udp: r.udp, r: r} }

type routedConn struct {
	udp *net.UDPConn
	r   *Router
}

func (c routedConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, from, err := c.r.next(p)
	if err != nil {
		return 0, nil, err
	}
	return n, net.UDPAddrFromAddrPort(from), nil
}

func (c routedConn) WriteTo(p []byte, addr net.Addr) (int, error) { return c.udp.WriteTo(p, addr) }

func (c routedConn) Close() error {
	c.r.Close()
	return c.udp.Close()
}

func (c routedConn) LocalAddr() net.Addr                   { return c.udp.LocalAddr() }
func (c routedConn) SetDeadline(t time.Time) error         { return c.udp.SetDeadline(t) }
func (c routedConn) SetReadDeadline(t time.Time) error     { return c.udp.SetReadDeadline(t) }
func (c routedConn) SetWriteDeadline(t time.Time) error    { return c.udp.SetWriteDeadline(t) }
func (c routedConn) SetReadBuffer(n int) error             { return c.udp.SetReadBuffer(n) }
func (c routedConn) SetWriteBuffer(n int) error            { return c.udp.SetWriteBuffer(n) }
func (c routedConn) SyscallConn() (syscall.RawConn, error) { return c.udp.SyscallConn() }
