package passthrough

import (
	"bytes"
	"time"

	"github.com/mediaship/engine/quicinitial"
)

// How the QUIC router tells the flows of one client address apart: by
// the connection IDs each datagram carries, those seen in the clear
// (byCID), and, for an ID never seen, by what the client's flows have
// shown (guess). See Router.

// flowCID is a connection ID that names a flow.
type flowCID struct {
	id []byte
	up bool // the upstream gave it to itself in the clear (see quicFlow.proven)
}

// byCID finds the flow a datagram from this client belongs to by the
// connection ID it carries, and whether the upstream gave that ID.
// Called with the router's mu held.
func (cl *quicClient) byCID(d []byte, long quicinitial.Packet, isLong bool) (*quicFlow, bool) {
	for _, f := range cl.flows {
		for _, c := range f.cids {
			id := c.id
			if isLong && bytes.Equal(long.DCID, id) || !isLong && len(id) > 0 && len(d) > len(id) && bytes.Equal(d[1:1+len(id)], id) {
				return f, c.up
			}
		}
	}
	return nil, false
}

// guess finds the flow of a packet whose connection ID the router has
// not seen in the clear, and learns the ID into it, so that the next
// packets match by it. Such an ID is one the client took from
// NEW_CONNECTION_ID (encrypted): a client moves to one right after its
// handshake, and quic-go (v0.65, both ends) does so at the first packet
// it sends once its handshake is complete, which is often a long-header
// one (its Initial acknowledgement, its Handshake packets), as its
// upstream sent NEW_CONNECTION_ID in 0.5-RTT data. The rule, for a
// packet from an address with flows:
//
//   - A long-header packet goes to a flow in its handshake that could
//     have sent it: its client's first flight carried the same Source
//     Connection ID (a client keeps it in every long header), its
//     upstream has answered, and it opened less than quicSwitchWindow
//     ago. Of those: the one under whose Initial keys the packet opens,
//     when it is an Initial (the keys of the client's first DCID, which
//     only that client has: quicinitial.Keys; the first maxKeyTries
//     flows are tried, oldest first); else the newest proven one (its
//     client has sent a packet to an ID its upstream gave); else the
//     newest not confirmed; else the only one; else nowhere.
//   - A short-header packet goes to the newest flow whose client is
//     making its first switch: it has sent a 1-RTT packet to an ID its
//     upstream gave (proven1RTT), has not switched yet, and the flow
//     opened less than quicSwitchWindow ago. Else to the address's only
//     flow; else to its only proven flow; else to its only confirmed
//     flow; else nowhere.
//
// A first flight forged from a client's address (a flow beside the
// client's, for any name, sent at any moment) so takes none of its
// packets but in the ambiguous case below: its sender never sees the
// upstream's answers, so its flow is never proven; it cannot make an
// Initial under the client's keys; and when the client's Source
// Connection ID is not empty it cannot match it but by chance. What
// stays ambiguous: a client with an empty Source Connection ID (one that
// uses a socket per connection may, as quic-go's DialAddr does) whose
// Initial acknowledgement is lost, and whose first packets to a new ID
// are Handshake ones, beside a forged flow in its handshake (the newest
// not confirmed takes them); two connections sharing a socket that both
// make their first switch by a short header at once (the newest takes
// both); and two that switched already (or stayed past the window) when
// one moves to a new ID later (nowhere).
// The engine's own HTTP/3's packets never get here: route knows them by
// their IDs. Called with the router's mu held.
func (cl *quicClient) guess(d []byte, long quicinitial.Packet, isLong bool, now time.Time) *quicFlow {
	newest := func(take func(*quicFlow) bool) *quicFlow {
		var f *quicFlow
		for _, g := range cl.flows {
			if take(g) && (f == nil || g.opened.After(f.opened)) {
				f = g
			}
		}
		return f
	}
	only := func(take func(*quicFlow) bool) *quicFlow {
		var f *quicFlow
		for _, g := range cl.flows {
			if take(g) {
				if f != nil {
					return nil
				}
				f = g
			}
		}
		return f
	}
	proven := func(g *quicFlow) bool { return g.proven }
	if isLong {
		handshaking := func(g *quicFlow) bool {
			return bytes.Equal(g.scid, long.SCID) && g.answered.Load() && now.Sub(g.opened) < quicSwitchWindow
		}
		f := cl.openedBy(d, handshaking)
		if f == nil {
			f = newest(func(g *quicFlow) bool { return handshaking(g) && g.proven })
		}
		if f == nil {
			f = newest(func(g *quicFlow) bool { return handshaking(g) && !g.confirmed.Load() })
		}
		if f == nil {
			f = only(handshaking)
		}
		if f != nil && len(long.DCID) > 0 {
			f.addCID(long.DCID, false)
			f.switched = true
		}
		return f
	}
	f := newest(func(g *quicFlow) bool {
		return g.proven1RTT && !g.switched && now.Sub(g.opened) < quicSwitchWindow
	})
	if f == nil {
		f = only(func(*quicFlow) bool { return true })
	}
	if f == nil {
		f = only(proven)
	}
	if f == nil {
		f = only(func(g *quicFlow) bool { return g.confirmed.Load() })
	}
	if f != nil && f.cidLen > 0 && len(d) > f.cidLen {
		f.addCID(d[1:1+f.cidLen], false)
		f.switched = true
	}
	return f
}

// openedBy is the flow, of the first maxKeyTries that take, oldest first,
// under whose client's Initial keys d opens; nil when d is no Initial or
// opens under none. Called with the router's mu held.
func (cl *quicClient) openedBy(d []byte, take func(*quicFlow) bool) *quicFlow {
	if _, ok := quicinitial.Peek(d); !ok {
		return nil
	}
	tries := 0
	for _, g := range cl.flows {
		if !take(g) {
			continue
		}
		if tries++; tries > maxKeyTries {
			return nil
		}
		if g.keys == nil {
			g.keys, _ = quicinitial.NewKeys(g.version, g.cids[0].id)
		}
		if g.keys != nil && g.keys.Opens(d) {
			return g
		}
	}
	return nil
}

// learn notes a connection ID the upstream chose, which the client's
// packets will carry from now on.
func (f *quicFlow) learn(id []byte) {
	r := f.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if f.cidLen == 0 {
		f.cidLen = len(id) // the length of the IDs the upstream issues, for short headers
	}
	f.addCID(id, true)
}

// addCID notes a connection ID of this flow, up when the upstream gave
// it; past maxFlowCIDs the oldest learned one goes (the client's first
// DCID stays). Called with the router's mu held.
func (f *quicFlow) addCID(id []byte, up bool) {
	for i, c := range f.cids {
		if bytes.Equal(c.id, id) {
			f.cids[i].up = c.up || up
			return
		}
	}
	if len(f.cids) == maxFlowCIDs {
		copy(f.cids[1:], f.cids[2:])
		f.cids = f.cids[:maxFlowCIDs-1]
	}
	f.cids = append(f.cids, flowCID{id: bytes.Clone(id), up: up})
}
