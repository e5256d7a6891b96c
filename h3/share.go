package h3

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// The fair share of QUIC connection slots (Config.MaxConnections,
// Config.PerAddress, Config.MinRate), as the reactor keeps it for TCP:
// handshakes under way hold a slot; at the limit a new connection is
// admitted by closing the connection with no request in progress that
// has been so longest, else the one with requests in flight that moved
// the fewest bytes over the rate window, below MinRate; under pressure
// (handshakes piling up, or most slots taken) new clients prove their
// address first with a Retry, so that spoofed Initials cannot take
// slots, or an address's share, for a handshake timeout.

// live is the registry of accepted connections, for choosing one to
// close at the limit.
type live struct {
	mu    sync.Mutex                // guards conns and each connWatch's rate fields
	conns map[*quic.Conn]*connWatch // accepted and not yet ended
	memo  map[netip.Addr]int        // reclaim's: connections per address key, looked up once a scan
	// gen changes whenever a connection ends, a request ends or the
	// rate windows roll: what reclaim may find. The last scan that found
	// nothing, for a newcomer holding failN, saw failGen at failAt.
	gen     atomic.Int64
	failGen int64
	failN   int
	failAt  time.Time
}

// failMemory is how long a scan that found nothing stands for newcomers
// holding as many or more, nothing having changed.
const failMemory = 250 * time.Millisecond

// reclaimIdleAfter is how long a connection with no request in progress
// must have been so to be closed for a newcomer whose address holds as
// many connections as its own (one holding more, at once).
const reclaimIdleAfter = 10 * time.Second

// rateTick is how often the rate windows are rolled.
const rateTick = time.Second

// track registers c (its watch w) until it ends.
func (s *Server) track(c *quic.Conn, w *connWatch) {
	now := time.Now()
	s.live.mu.Lock()
	w.winStart = now
	w.idleSince = now
	w.live = &s.live
	if h, ok := c.Context().Value(handshakeKey{}).(*handshake); ok {
		w.key = h.key
	}
	first := len(s.live.conns) == 0
	s.live.conns[c] = w
	s.live.mu.Unlock()
	if first {
		s.rollOnce.Do(func() { go s.rollWindows() })
	}
	context.AfterFunc(c.Context(), func() {
		s.live.mu.Lock()
		delete(s.live.conns, c)
		s.live.mu.Unlock()
		s.live.gen.Add(1)
	})
}

// rollWindows rolls each connection's rate window once it has lasted
// Config.RateWindow, so that a rate is measured over one to two windows,
// until the server closes.
func (s *Server) rollWindows() {
	t := time.NewTicker(rateTick)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case now := <-t.C:
			s.live.gen.Add(1)
			s.live.mu.Lock()
			for c, w := range s.live.conns {
				if now.Sub(w.winStart) >= s.cfg.RateWindow {
					w.prevSent, w.prevStart = w.winSent, w.winStart
					w.winSent, w.winStart = c.ConnectionStats().BytesSent, now
				}
			}
			s.live.mu.Unlock()
		}
	}
}

// admit decides a new connection from addr: ok with the per-address key
// to release when it ends, or an error refusing it. quic-go asks once
// per Initial packet of a connection it refused (a ClientHello with a
// post-quantum key share takes two, and a client sends again): each
// attempt, by its address and port, is counted and logged once.
func (s *Server) admit(addr net.Addr) (key netip.Addr, err error) {
	if t := s.cfg.PerAddress; t != nil {
		var ok bool
		if key, ok = t.Acquire(addrOf(addr)); !ok {
			if s.refusals.first(addr) {
				s.stats.refusedAddress.Add(1)
				s.lim.Note("HTTP/3 connection refused: its client address holds max_connections_per_address", "addr", addr, "limit", t.Limit())
			}
			return key, errRefusedAddress
		}
	}
	if s.active.Load()+s.handshaking.Load() >= s.cfg.MaxConnections && !s.reclaim(key) {
		s.cfg.PerAddress.Release(key)
		if s.refusals.first(addr) {
			s.stats.refused.Add(1)
			s.lim.Note("HTTP/3 connection refused at max_connections: no connection is idle or slow", "addr", addr, "max_connections", s.cfg.MaxConnections)
		}
		return netip.Addr{}, errTooMany
	}
	return key, nil
}

// attempts remembers the client address-and-ports lately refused or
// asked for a Retry, so that each attempt counts once whatever number of
// Initial packets it sends. Safe for concurrent use.
type attempts struct {
	mu   sync.Mutex
	seen map[string]time.Time // guarded by mu: address:port -> when
}

// attemptMemory is how long an attempt is remembered; attemptsMax
// bounds the memory (past it, expired attempts are forgotten, and
// others until half remain).
const (
	attemptMemory = 3 * time.Second
	attemptsMax   = 1 << 14
)

// first reports whether addr was not seen within attemptMemory, and
// remembers it.
func (a *attempts) first(addr net.Addr) bool {
	k := addr.String()
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen == nil {
		a.seen = map[string]time.Time{}
	}
	if t, ok := a.seen[k]; ok && now.Sub(t) < attemptMemory {
		return false
	}
	if len(a.seen) >= attemptsMax {
		for k, t := range a.seen {
			if now.Sub(t) >= attemptMemory || len(a.seen) > attemptsMax/2 {
				delete(a.seen, k)
			}
		}
	}
	a.seen[k] = now
	return true
}

var (
	errTooMany        = errors.New("h3: too many connections")
	errRefusedAddress = errors.New("h3: too many connections from this address")
)

// reclaim closes one connection to make room for a new one from the
// address counted under key, and reports whether it did. In order: the
// connection with no request in progress for longest, the one whose
// responses moved the fewest bytes over the rate window below MinRate,
// and one with requests in flight of an address holding more
// connections than the newcomer's would (the fair share). As on TCP
// (reactor's admit), a connection is closed only for a newcomer whose
// address holds no more than the victim's (strictly fewer for the
// last), and within an order the address holding the most goes first.
func (s *Server) reclaim(key netip.Addr) bool {
	now := time.Now()
	t := s.cfg.PerAddress
	s.live.mu.Lock()
	n := 0 // the newcomer's address's connections, itself included
	if t != nil {
		n = max(1, t.HeldKey(key))
	}
	gen := s.live.gen.Load()
	if s.live.failGen == gen && n >= s.live.failN && now.Sub(s.live.failAt) < failMemory {
		// Nothing ended or went idle since a scan found nothing for a
		// newcomer holding as many: a crowd retrying costs a lookup, not a
		// scan, each.
		s.live.mu.Unlock()
		return false
	}
	memo := s.live.memo
	clear(memo)
	held := func(a netip.Addr) int {
		if t == nil || !a.IsValid() {
			return 0
		}
		h, ok := memo[a]
		if !ok {
			h = t.HeldKey(a)
			memo[a] = h
		}
		return h
	}
	var (
		victim                *quic.Conn
		vClass, vOrder, vHeld int
		vRank                 float64
	)
	for c, w := range s.live.conns {
		w.mu.Lock()
		idle, since := w.active == 0, w.idleSince
		w.mu.Unlock()
		h := held(w.key)
		var order int
		var rank float64
		switch {
		case idle && (h > n || now.Sub(since) >= reclaimIdleAfter):
			// An idle connection of an address holding as many as the
			// newcomer's goes only once idle a while: a crowd
			// reconnecting would otherwise evict its own connections
			// over and over, a handshake each.
			order, rank = 0, float64(since.UnixNano())
		case s.cfg.MinRate > 0 && !w.prevStart.IsZero() && w.rate(c, now) < float64(s.cfg.MinRate):
			order, rank = 1, w.rate(c, now)
		case t != nil && h > n:
			order, rank = 2, float64(c.ConnectionStats().BytesSent-w.prevSent)
		default:
			continue
		}
		if h < n {
			continue
		}
		// Addresses holding more than the newcomer's first, whatever
		// their connections do; then the orders (as reactor's
		// victimClass, QUIC having no silent connections).
		class := 1
		if h > n {
			class = 0
		}
		if victim == nil || class < vClass || class == vClass && (order < vOrder || order == vOrder && (h > vHeld || h == vHeld && rank < vRank)) {
			victim, vClass, vOrder, vHeld, vRank = c, class, order, h, rank
		}
	}
	if victim != nil {
		delete(s.live.conns, victim) // not chosen twice while it closes
	} else {
		s.live.failGen, s.live.failN, s.live.failAt = gen, n, now
	}
	s.live.mu.Unlock()
	switch {
	case victim == nil:
		return false
	case vOrder == 0:
		s.stats.reclaimedIdle.Add(1)
		s.lim.Note("closing an idle HTTP/3 connection to admit a new one at max_connections", "addr", victim.RemoteAddr())
		victim.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "idle connection closed to admit a new one")
	case vOrder == 1:
		s.stats.reclaimedSlow.Add(1)
		s.lim.Note("closing a slow HTTP/3 connection to admit a new one at max_connections", "addr", victim.RemoteAddr(), "bytes_per_second", int64(vRank), "min_send_rate", s.cfg.MinRate)
		victim.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "too slow at max_connections")
	default:
		s.stats.reclaimedShare.Add(1)
		s.lim.Note("closing an HTTP/3 connection of the address holding the most to admit a client holding fewer at max_connections",
			"addr", victim.RemoteAddr(), "its_connections", vHeld, "newcomer_connections", n)
		victim.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "fair share at max_connections")
	}
	return true
}

// rate is the bytes a second c sent over its rate window; only for a
// watch with one (prevStart set). Called with Server.live.mu held.
func (w *connWatch) rate(c *quic.Conn, now time.Time) float64 {
	return float64(c.ConnectionStats().BytesSent-w.prevSent) / now.Sub(w.prevStart).Seconds()
}

// verifyAddress is quic.Transport.VerifySourceAddress: a Retry first when
// handshakes pile up or most slots are taken, or when the address holds
// half its share already.
func (s *Server) verifyAddress(addr net.Addr) bool {
	hs := s.handshaking.Load()
	retry := hs >= max(64, s.cfg.MaxConnections/8) || s.active.Load()+hs >= s.cfg.MaxConnections*3/4
	if t := s.cfg.PerAddress; !retry && t != nil && t.Limit() > 0 {
		retry = t.Held(addrOf(addr)) >= max(1, t.Limit()/2)
	}
	if retry && s.retried.first(addr) {
		s.stats.retries.Add(1)
	}
	return retry
}

func addrOf(a net.Addr) netip.Addr {
	if u, ok := a.(*net.UDPAddr); ok {
		ip, _ := netip.AddrFromSlice(u.IP)
		return ip
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr()
}
