package passthrough

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaship/engine/clienthello"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/quicinitial"
	"github.com/quic-go/quic-go"
)

// TestQUICRouterGuess: packets whose connection ID the router never saw
// (a client's switch to an ID from NEW_CONNECTION_ID, which is
// encrypted), all from one client address that several connections
// share, go to the flow whose client is making its first switch, and
// the ID is learned; never to a flow whose client did not answer its
// upstream (a forged first flight); nowhere when no flow can be told;
// and the IDs of the engine's own HTTP/3 are never guessed into a relay.
// The router is fed synthetic datagrams after real first flights, and
// what each upstream receives is read from its socket.
func TestQUICRouterGuess(t *testing.T) {
	type step struct {
		do   func(h *routerHarness) // sets the scene
		send func(h *routerHarness) []byte
		own  bool     // want: the engine's own HTTP/3 got it
		to   []string // want: the flows whose upstream got it
	}
	id := func(name string) func(h *routerHarness) []byte {
		return func(h *routerHarness) []byte { return h.short(h.id(name)) }
	}
	tests := []struct {
		name  string
		own   bool // the engine serves HTTP/3 itself
		steps []step
	}{
		{"the only flow takes a new ID", false, []step{
			{do: func(h *routerHarness) { h.open("A", "a.test"); h.handshake("A") }, send: id("x"), to: []string{"A"}},
		}},
		{"first switch of the newest flow beside a settled one", false, []step{
			{do: func(h *routerHarness) { h.open("A", "a.test"); h.handshake("A") }, send: id("x1"), to: []string{"A"}},
			{do: func(h *routerHarness) { h.open("B", "b.test"); h.handshake("B") }, send: id("x2"), to: []string{"B"}},
			{send: id("x2"), to: []string{"B"}}, // learned
			{send: id("x1"), to: []string{"A"}},
		}},
		{"several flows before their switch: the most recent", false, []step{
			{do: func(h *routerHarness) {
				h.open("A", "a.test")
				h.handshake("A")
				h.open("B", "b.test")
				h.handshake("B")
			}, send: id("x"), to: []string{"B"}},
		}},
		{"a forged first flight beside a client before its switch", false, []step{
			{do: func(h *routerHarness) {
				h.open("A", "b.test")
				h.handshake("A")
				h.open("forged", "b.test")
				h.answer("forged") // its upstream answers; the real client never does
			}, send: id("x"), to: []string{"A"}},
		}},
		{"a settled client's later switch beside a forged flow", false, []step{
			{do: func(h *routerHarness) { h.open("A", "b.test"); h.handshake("A") }, send: id("x1"), to: []string{"A"}},
			{do: func(h *routerHarness) { h.open("forged", "b.test"); h.answer("forged") }, send: id("x2"), to: []string{"A"}},
		}},
		{"a forged first flight in a client's handshake: its Initial to a new ID", false, []step{
			// quic-go's client, once its handshake is complete, moves to an
			// ID from the upstream's 0.5-RTT NEW_CONNECTION_ID at once:
			// its first datagram after the upstream's flight begins with
			// an Initial to that ID. Its Source Connection ID is empty, as
			// the forger's can be.
			{do: func(h *routerHarness) {
				h.open("A", "a.test")
				h.open("forged", "b.test") // spoofed from A's address, a moment later
				h.answer("A")
				h.answer("forged")
			}, send: func(h *routerHarness) []byte { return h.initial("A", h.id("n")) }, to: []string{"A"}},
			{send: func(h *routerHarness) []byte { return h.hs("A", h.id("n")) }, to: []string{"A"}},
			{send: id("n"), to: []string{"A"}},
		}},
		{"a forged first flight in a client's handshake: its Handshake packets to a new ID", false, []step{
			// Its Initial acknowledgement went to the upstream's ID first
			// (it was sent before the handshake completed), then it moved.
			{do: func(h *routerHarness) {
				h.open("A", "a.test")
				h.open("forged", "b.test")
				h.answer("A")
				h.answer("forged")
				h.send("A", h.initial("A", h.id("A/up")))
			}, send: func(h *routerHarness) []byte { return h.hs("A", h.id("n")) }, to: []string{"A"}},
			{send: id("n"), to: []string{"A"}},
		}},
		{"a forged first flight in the handshake of a client with Source Connection IDs", false, []step{
			{do: func(h *routerHarness) {
				h.openShared("A", "a.test")
				h.openShared("forged", "b.test")
				h.answer("A")
				h.answer("forged")
			}, send: func(h *routerHarness) []byte { return h.hs("A", h.id("n")) }, to: []string{"A"}},
			{send: id("n"), to: []string{"A"}},
		}},
		{"two connections on one socket in their handshakes at once", false, []step{
			{do: func(h *routerHarness) {
				h.openShared("A", "a.test")
				h.openShared("B", "b.test")
				h.answer("A")
				h.answer("B")
			}, send: func(h *routerHarness) []byte { return h.hs("A", h.id("n1")) }, to: []string{"A"}},
			{send: func(h *routerHarness) []byte { return h.hs("B", h.id("n2")) }, to: []string{"B"}},
		}},
		{"a forged flow its sender confirmed beside a client making its first switch", false, []step{
			// The forger answers its own flow (it knows its own Source
			// Connection ID) and sends it 1-RTT packets, but never to the
			// upstream's ID, which it never sees.
			{do: func(h *routerHarness) {
				h.openShared("A", "a.test")
				h.handshake("A")
				h.openShared("forged", "b.test")
				h.answer("forged")
			}, send: func(h *routerHarness) []byte { return h.short(h.named["forged"]) }, to: []string{"forged"}}, // 1-RTT, but to an ID of its own
			{send: id("x"), to: []string{"A"}},
			{send: func(h *routerHarness) []byte { return h.hs("forged", h.id("g")) }, to: []string{"forged"}},
		}},
		{"two settled flows: no telling", false, []step{
			{do: func(h *routerHarness) { h.open("A", "a.test"); h.handshake("A") }, send: id("x1"), to: []string{"A"}},
			{do: func(h *routerHarness) { h.open("B", "b.test"); h.handshake("B") }, send: id("x2"), to: []string{"B"}},
			{send: id("x3"), to: nil}, // dropped
		}},
		{"a flow that never switched is settled after the window", false, []step{
			{do: func(h *routerHarness) { h.open("A", "a.test"); h.handshake("A") }, send: id("x1"), to: []string{"A"}},
			{do: func(h *routerHarness) {
				h.open("B", "b.test")
				h.handshake("B")
				h.age("B", quicSwitchWindow+time.Second)
			}, send: id("x2"), to: nil},
		}},
		{"the engine's own IDs are its own", true, []step{
			{do: func(h *routerHarness) { h.open("B", "b.test"); h.handshake("B") }, send: func(h *routerHarness) []byte {
				return h.short(h.ownID())
			}, own: true},
			{send: func(h *routerHarness) []byte { return h.long(0x2, h.ownID(), h.id("s")) }, own: true},
			{send: id("x"), to: []string{"B"}}, // an unknown ID is not the engine's
		}},
		{"a hello released to the engine's own HTTP/3 keeps its ID", true, []step{
			{do: func(h *routerHarness) {
				h.open("B", "b.test")
				h.handshake("B")
				h.release("own", "own.test")
			}, send: func(h *routerHarness) []byte { return h.long(0x1, h.id("own"), h.id("c")) }, own: true}, // 0-RTT
			{send: id("x"), to: []string{"B"}}, // at an address the engine serves too, an unknown ID is still not its own
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newRouterHarness(t, tt.own, 16)
			for i, s := range tt.steps {
				if s.do != nil {
					s.do(h)
				}
				d := s.send(h)
				own, to := h.where(d)
				if own != s.own || !slices.Equal(to, s.to) {
					t.Fatalf("step %d: route(% x…) = own %v, relayed to %q; want own %v, relayed to %q", i, d[:min(len(d), 12)], own, to, s.own, s.to)
				}
			}
		})
	}
}

// TestQUICRouterOneSided: a flow whose client keeps sending while its
// upstream says nothing (one answer to a forged first flight, then
// garbage every few seconds to an upstream that closed) is dead from the
// upstream's side. At max_connections a new client takes the place of
// the one that has been so longest, one second at least; never of a flow
// both sides leave idle, nor of one whose upstream answers. The sweep
// closes one past 15 s. The router's clock is moved by hand.
func TestQUICRouterOneSided(t *testing.T) {
	t.Run("a new flow at max_connections", func(t *testing.T) {
		h := newRouterHarness(t, false, 4)
		for _, l := range []string{"idle", "active", "one-sided 3s", "one-sided 6s"} {
			h.open(l, "a.test")
			h.handshake(l)
		}
		h.advance(3 * time.Second)
		h.talk("one-sided 3s")
		h.advance(3 * time.Second)
		h.talk("one-sided 6s")
		h.exchange("active")
		h.open("new", "a.test")
		h.wantOpen("the longest one-sided flow makes room", "idle", "active", "one-sided 3s", "new")
		h.handshake("new")
		h.open("new 2", "b.test")
		h.wantOpen("the other one-sided flow makes room", "idle", "active", "new", "new 2")
		h.handshake("new 2")
		h.advance(500 * time.Millisecond)
		h.talk("new") // its upstream has said nothing for half a second: not yet one-sided enough
		if h.tryOpen("refused", "a.test") {
			t.Fatal("a flow opened in place of an idle, an active or a briefly one-sided one")
		}
		h.wantOpen("no flow makes room", "idle", "active", "new", "new 2")
		if st := &h.r.px.Stats; st.QUICPassOneSided.Load() != 2 || st.QUICPassUnconfirmed.Load() != 0 || st.QUICFailures[ReasonTableFull].Load() != 1 {
			t.Errorf("closed one-sided %d, unconfirmed %d, refused %d; want 2, 0 and 1",
				st.QUICPassOneSided.Load(), st.QUICPassUnconfirmed.Load(), st.QUICFailures[ReasonTableFull].Load())
		}
	})
	t.Run("the sweep", func(t *testing.T) {
		h := newRouterHarness(t, false, 16)
		for _, l := range []string{"idle", "active", "one-sided"} {
			h.open(l, "a.test")
			h.handshake(l)
		}
		for i := 1; i <= 4; i++ {
			h.advance(5 * time.Second)
			h.talk("one-sided")
			h.exchange("active")
			h.r.expire(h.now())
			if i*5 <= int(quicOneSidedMax/time.Second) {
				h.wantOpen(fmt.Sprintf("one-sided for %d s", i*5), "idle", "active", "one-sided")
			}
		}
		h.wantOpen("one-sided for 20 s", "idle", "active")
		if n := h.r.px.Stats.QUICPassOneSided.Load(); n != 1 {
			t.Errorf("closed one-sided: %d; want 1", n)
		}
	})
}

// TestQUICRouterUnfinished: a flow whose client answered its upstream but
// never finished the handshake, kept two-sided by sending its first
// flight again (which the upstream answers as a new connection) beside
// its garbage, may be closed for a new flow 10 s after its opening, and
// is closed by the sweep past 15 s, though its upstream sent 0.5-RTT
// data alone (as quic-go does) before its Handshake packets again; a
// flow whose handshake is done (its upstream sends 1-RTT packets only)
// is not. The router's clock is moved by hand.
func TestQUICRouterUnfinished(t *testing.T) {
	h := newRouterHarness(t, false, 3)
	h.open("done", "a.test")
	h.handshake("done")
	for _, l := range []string{"stuck", "stuck 2"} {
		h.open(l, "b.test")
		h.answer(l)
		h.down(l, h.short(h.id("c/"+l))) // 0.5-RTT
		h.talk(l)                        // confirmed
		h.answer(l)                      // the upstream's Handshake again
	}
	step := func(d time.Duration) {
		h.advance(d)
		for _, l := range []string{"stuck", "stuck 2"} {
			if h.isOpen(l) {
				h.talk(l)
				h.answer(l) // never one-sided
			}
		}
	}
	step(5 * time.Second)
	if h.tryOpen("refused", "a.test") {
		t.Fatal("a flow opened in place of one 5 s into its handshake")
	}
	step(5 * time.Second)
	h.open("new", "a.test")
	h.wantOpen("a new flow at max_connections, 10 s on", "done", "stuck 2", "new")
	h.handshake("new")
	step(4 * time.Second)
	h.r.expire(h.now())
	h.wantOpen("the sweep, 14 s on", "done", "stuck 2", "new")
	step(2 * time.Second)
	h.r.expire(h.now())
	h.wantOpen("the sweep, 16 s on", "done", "new")
	if st := &h.r.px.Stats; st.QUICPassUnconfirmed.Load() != 2 || st.QUICPassOneSided.Load() != 0 {
		t.Errorf("closed unconfirmed %d, one-sided %d; want 2 and 0", st.QUICPassUnconfirmed.Load(), st.QUICPassOneSided.Load())
	}
}

// routerHarness is a Router fed by hand: one client address, fake
// upstreams for "a.test" and "b.test" that record what they receive, and
// a clock that moves only when the test moves it (nothing sweeps but
// the test, by expire).
type routerHarness struct {
	t     *testing.T
	r     *Router
	clock atomic.Int64 // unix ns
	ids   *OwnCIDs
	cli   *net.UDPConn // the client's socket: from there, by route
	from  netip.AddrPort
	ups   map[string]*fakeUpstream // by server name
	flows map[string]*quicFlow     // by label
	named map[string][]byte        // connection IDs by name
}

type fakeUpstream struct {
	c   *net.UDPConn
	got chan upDatagram
}

type upDatagram struct {
	from netip.AddrPort
	b    []byte
}

func newRouterHarness(t *testing.T, own bool, maxFlows int) *routerHarness {
	h := &routerHarness{t: t, ups: map[string]*fakeUpstream{}, flows: map[string]*quicFlow{}, named: map[string][]byte{}}
	toml := "[reverse_proxy]\nenabled = true\ntls_termination = false\n"
	for _, name := range []string{"a.test", "b.test"} {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		u := &fakeUpstream{c: c, got: make(chan upDatagram, 64)}
		go func() {
			buf := make([]byte, 2048)
			for {
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				u.got <- upDatagram{from, bytes.Clone(buf[:n])}
			}
		}()
		t.Cleanup(func() { c.Close() })
		h.ups[name] = u
		toml += fmt.Sprintf("[[reverse_proxy.routes]]\ndomain = %q\nupstreams = [%q]\n", name, c.LocalAddr())
	}
	px := newTable(t, toml)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if own {
		h.ids = NewOwnCIDs(1)
	}
	h.clock.Store(time.Now().UnixNano())
	h.r = NewRouterOn(h.now, px, udp, h.ids, maxFlows, 10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.cli, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	h.from = h.cli.LocalAddr().(*net.UDPAddr).AddrPort()
	t.Cleanup(func() { h.r.Close(); udp.Close(); h.cli.Close() })
	return h
}

// open routes a quic-go client's first flight for sni from the client
// address, and names the flow it opens.
func (h *routerHarness) open(label, sni string) {
	h.t.Helper()
	if !h.tryOpen(label, sni) {
		h.t.Fatalf("the first flight for %s opened no flow", sni)
	}
}

// openShared is open for a client whose socket may carry several
// connections, so whose Source Connection IDs are not empty.
func (h *routerHarness) openShared(label, sni string) {
	h.t.Helper()
	if !h.openFlight(label, sni, helloFlight(h.t, sni, true)) {
		h.t.Fatalf("the first flight for %s opened no flow", sni)
	}
}

// tryOpen is open, and reports whether the first flight opened a flow.
func (h *routerHarness) tryOpen(label, sni string) bool {
	h.t.Helper()
	return h.openFlight(label, sni, helloFlight(h.t, sni, false))
}

// openFlight routes flight, a first flight for sni, names the flow it
// opens, and reports whether it opened one.
func (h *routerHarness) openFlight(label, sni string, flight [][]byte) bool {
	h.t.Helper()
	h.advance(time.Millisecond) // a flow opened later is newer
	for _, d := range flight {
		h.r.route(d, h.from)
	}
	h.r.mu.Lock()
	var f *quicFlow
	if cl := h.r.clients[h.from]; cl != nil {
		for _, g := range cl.flows {
			if !slices.Contains(slices.Collect(maps.Values(h.flows)), g) {
				f = g
			}
		}
	}
	if f != nil {
		h.flows[label] = f
		h.named[label] = f.cids[0].id
	}
	h.r.mu.Unlock()
	if f == nil {
		return false
	}
	for range flight {
		h.recv(h.ups[sni]) // the held hello, replayed
	}
	return true
}

// isOpen reports whether the flow is still in the router's tables.
func (h *routerHarness) isOpen(label string) bool {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	f := h.flows[label]
	return h.r.clients[f.client] != nil && slices.Contains(h.r.clients[f.client].flows, f)
}

// release routes a first flight for a name no route has: the engine's
// own HTTP/3's. The flight's DCID is named label.
func (h *routerHarness) release(label, sni string) {
	h.t.Helper()
	flight := helloFlight(h.t, sni, false)
	for _, d := range flight {
		h.r.route(d, h.from)
	}
	p, _ := quicinitial.Long(flight[0])
	h.named[label] = bytes.Clone(p.DCID)
	if len(h.r.ready) != len(flight) {
		h.t.Fatalf("%d datagrams released to the engine's own HTTP/3; want the flight's %d", len(h.r.ready), len(flight))
	}
	h.r.ready = nil
}

// wantOpen fails unless the flows open are those named, of those the
// test opened.
func (h *routerHarness) wantOpen(when string, labels ...string) {
	h.t.Helper()
	var open []string
	for _, l := range slices.Sorted(maps.Keys(h.flows)) {
		if h.isOpen(l) {
			open = append(open, l)
		}
	}
	slices.Sort(labels)
	if !slices.Equal(open, labels) {
		h.t.Fatalf("%s: flows open %q; want %q", when, open, labels)
	}
}

// answer has the flow's upstream send the client a Handshake packet from
// a connection ID of its own (named label+"/up"), and waits until it is
// passed on.
func (h *routerHarness) answer(label string) {
	h.t.Helper()
	h.down(label, h.long(0x2, h.id("c/"+label), h.id(label+"/up")))
}

// down has the flow's upstream send the client d, and waits until it is
// passed on.
func (h *routerHarness) down(label string, d []byte) {
	h.t.Helper()
	f := h.flows[label]
	up := h.ups[f.rt.Cfg.Domain]
	if _, err := up.c.WriteToUDPAddrPort(d, f.up.LocalAddr().(*net.UDPAddr).AddrPort()); err != nil {
		h.t.Fatal(err)
	}
	buf := make([]byte, 2048)
	h.cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _, err := h.cli.ReadFromUDPAddrPort(buf); err != nil || !bytes.Equal(buf[:n], d) {
		h.t.Fatalf("the upstream's answer to %s did not reach the client: % x %v", label, buf[:n], err)
	}
	for deadline := time.Now().Add(10 * time.Second); !f.answered.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatalf("the flow %s never saw its upstream answer", label)
		}
	}
}

// handshake answers the flow's client, has the client answer back (a
// Handshake packet to the upstream's ID), the upstream send a 1-RTT
// packet (HANDSHAKE_DONE), and the client its first 1-RTT packet to the
// upstream's ID (before it moves to an ID from NEW_CONNECTION_ID), as
// real ones do.
func (h *routerHarness) handshake(label string) {
	h.t.Helper()
	h.answer(label)
	h.talk(label)
	h.down(label, h.short(h.id("c/"+label)))
	h.send(label, h.short(h.id(label+"/up")))
	if f := h.flows[label]; !f.confirmed.Load() || !f.established.Load() {
		h.t.Fatalf("the flow %s after its handshake: confirmed %v, established %v", label, f.confirmed.Load(), f.established.Load())
	}
}

// talk has the flow's client send a Handshake packet to its upstream's
// ID, and waits until the upstream has it.
func (h *routerHarness) talk(label string) {
	h.t.Helper()
	h.send(label, h.long(0x2, h.id(label+"/up"), h.flows[label].scid))
}

// exchange has the flow's upstream send its client a 1-RTT packet, and
// the client answer with one, as on an established connection.
func (h *routerHarness) exchange(label string) {
	h.t.Helper()
	h.down(label, h.short(h.id("c/"+label)))
	h.send(label, h.short(h.id(label+"/up")))
}

// send routes d, from the client, which must reach the flow's upstream,
// and waits until it has.
func (h *routerHarness) send(label string, d []byte) {
	h.t.Helper()
	f := h.flows[label]
	h.r.route(d, h.from)
	if g := h.recvFrom(h.ups[f.rt.Cfg.Domain], f.up.LocalAddr().(*net.UDPAddr).AddrPort()); !bytes.Equal(g, d) {
		h.t.Fatalf("the upstream of %s got % x…, not what its client sent", label, g[:min(len(g), 12)])
	}
}

func (h *routerHarness) now() time.Time { return time.Unix(0, h.clock.Load()) }

// advance moves the router's clock on by d.
func (h *routerHarness) advance(d time.Duration) { h.clock.Add(int64(d)) }

// age moves the opening of a flow back by d.
func (h *routerHarness) age(label string, d time.Duration) {
	h.r.mu.Lock()
	h.flows[label].opened = h.flows[label].opened.Add(-d)
	h.r.mu.Unlock()
}

// where routes d from the client address, and tells whether it went to
// the engine's own HTTP/3 and which flows' upstreams got it. Each flow is
// then sent a marker by its first ID: what its upstream got before the
// marker is what d did there.
func (h *routerHarness) where(d []byte) (own bool, to []string) {
	h.t.Helper()
	own = h.r.route(d, h.from) && h.r.own
	for _, l := range slices.Sorted(maps.Keys(h.flows)) {
		f := h.flows[l]
		marker := h.long(0x1, h.named[l], h.id("c/"+l))
		h.r.route(marker, h.from)
		src := f.up.LocalAddr().(*net.UDPAddr).AddrPort()
		for {
			g := h.recvFrom(h.ups[f.rt.Cfg.Domain], src)
			if bytes.Equal(g, marker) {
				break
			}
			if bytes.Equal(g, d) {
				to = append(to, l)
			}
		}
	}
	return own, to
}

// recv reads one datagram the upstream got.
func (h *routerHarness) recv(u *fakeUpstream) upDatagram {
	h.t.Helper()
	select {
	case g := <-u.got:
		return g
	case <-time.After(10 * time.Second):
		h.t.Fatal("the upstream got nothing")
		return upDatagram{}
	}
}

// recvFrom reads the next datagram the upstream got from src; those from
// other flows are put back after it.
func (h *routerHarness) recvFrom(u *fakeUpstream, src netip.AddrPort) []byte {
	h.t.Helper()
	var others []upDatagram
	defer func() {
		for _, g := range others {
			u.got <- g
		}
	}()
	for {
		g := h.recv(u)
		if g.from == src {
			return g.b
		}
		others = append(others, g)
	}
}

// id is the connection ID called name: 8 random bytes, the same on each
// call.
func (h *routerHarness) id(name string) []byte {
	if b, ok := h.named[name]; ok {
		return b
	}
	b := make([]byte, 8)
	rand.Read(b)
	h.named[name] = b
	return b
}

// ownID is a new ID of the engine's own HTTP/3.
func (h *routerHarness) ownID() []byte {
	id, err := h.ids.GenerateConnectionID()
	if err != nil {
		h.t.Fatal(err)
	}
	return id.Bytes()
}

// initial is an Initial packet from the flow's client to dcid, under its
// Initial keys (those of its first DCID), as the client sends to
// acknowledge its upstream's Initial once it moved to the upstream's ID
// or to a newer one.
func (h *routerHarness) initial(label string, dcid []byte) []byte {
	h.t.Helper()
	d := sealInitial(h.t, h.named[label], dcid, h.flows[label].scid)
	if k, err := quicinitial.NewKeys(quicinitial.Version1, h.named[label]); err != nil || !k.Opens(d) {
		h.t.Fatalf("the Initial sealed for %s does not open under its keys (%v)", label, err)
	}
	return d
}

// hs is a Handshake packet from the flow's client (its Source Connection
// ID) to dcid, its payload random.
func (h *routerHarness) hs(label string, dcid []byte) []byte {
	return h.long(0x2, dcid, h.flows[label].scid)
}

// sealInitial is a QUIC v1 client Initial to dcid from scid protected
// under the Initial keys of first, a client's first DCID (RFC 9001 §5.2,
// §5.3, §5.4), its payload a PING and PADDING: no ClientHello.
func sealInitial(t *testing.T, first, dcid, scid []byte) []byte {
	t.Helper()
	salt := []byte{0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f, 0x0a}
	label := func(secret []byte, l string, n int) []byte {
		full := "tls13 " + l
		info := append([]byte{byte(n >> 8), byte(n), byte(len(full))}, full...)
		b, err := hkdf.Expand(sha256.New, secret, string(append(info, 0)), n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	initial, err := hkdf.Extract(sha256.New, first, salt)
	if err != nil {
		t.Fatal(err)
	}
	secret := label(initial, "client in", 32)
	block, _ := aes.NewCipher(label(secret, "quic key", 16))
	aead, _ := cipher.NewGCM(block)
	hp, _ := aes.NewCipher(label(secret, "quic hp", 16))
	iv := label(secret, "quic iv", 12)

	const pn, size = 2, 1100
	hdr := append([]byte{0xc0, 0, 0, 0, 1, byte(len(dcid))}, dcid...)
	hdr = append(append(hdr, byte(len(scid))), scid...)
	length := 1 + size + aead.Overhead() // a one-byte packet number
	hdr = append(hdr, 0, 0x40|byte(length>>8), byte(length))
	pnOff := len(hdr)
	hdr = append(hdr, pn)
	payload := make([]byte, size)
	payload[0] = 0x01 // PING
	iv[len(iv)-1] ^= pn
	d := aead.Seal(bytes.Clone(hdr), iv, payload, hdr)
	mask := make([]byte, aes.BlockSize)
	hp.Encrypt(mask, d[pnOff+4:pnOff+4+aes.BlockSize])
	d[0] ^= mask[0] & 0x0f
	d[pnOff] ^= mask[1]
	return d
}

// short is a 1-RTT packet (short header) to dcid, its payload random.
func (h *routerHarness) short(dcid []byte) []byte {
	d := append([]byte{0x40}, dcid...)
	pad := make([]byte, 40)
	rand.Read(pad)
	return append(d, pad...)
}

// long is a QUIC v1 long-header packet of type typ (1: 0-RTT, 2:
// Handshake) from scid to dcid, its payload random.
func (h *routerHarness) long(typ byte, dcid, scid []byte) []byte {
	d := []byte{0xc0 | typ<<4, 0, 0, 0, 1, byte(len(dcid))}
	d = append(d, dcid...)
	d = append(d, byte(len(scid)))
	d = append(d, scid...)
	pad := make([]byte, 40)
	rand.Read(pad)
	return append(d, pad...)
}

// helloFlight is a quic-go client's first flight for sni: its datagrams
// until the ClientHello is whole, sent to a socket that never answers.
// With shared, the client dials from a quic.Transport, whose Source
// Connection IDs are 4 bytes as it may carry several connections
// (quic.DialAddr's, a socket per connection, are empty).
func helloFlight(t *testing.T, sni string, shared bool) [][]byte {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc := &tls.Config{ServerName: sni, NextProtos: []string{"h3"}}
	if shared {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		tr := &quic.Transport{Conn: c}
		defer tr.Close()
		go tr.Dial(ctx, pc.LocalAddr(), tc, nil)
	} else {
		go quic.DialAddr(ctx, pc.LocalAddr().String(), tc, nil)
	}
	var hello quicinitial.Hello
	var flight [][]byte
	buf := make([]byte, 2048)
	pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("the client's first flight for %s: %d datagrams, then %v", sni, len(flight), err)
		}
		flight = append(flight, bytes.Clone(buf[:n]))
		if _, err := hello.Add(buf[:n]); !errors.Is(err, clienthello.ErrIncomplete) {
			if err != nil {
				t.Fatalf("the client's first flight for %s: %v", sni, err)
			}
			return flight
		}
	}
}

// TestQUICRouterLoop: a route whose upstream is the router's own socket
// (which the configuration refuses when it can tell; here, the socket's
// port is not the listen one) relays a client's first flight once: the
// flight that comes back from the relay's own socket is dropped as a
// loop, not relayed again without end.
func TestQUICRouterLoop(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf("[reverse_proxy]\nenabled = true\ntls_termination = false\n[[reverse_proxy.routes]]\ndomain = \"a.test\"\nupstreams = [%q]\n", udp.LocalAddr())
	px := newTable(t, toml)
	r := NewRouter(px, udp, nil, 64, 10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go r.Run()
	t.Cleanup(func() { r.Close(); udp.Close() })
	cli, err := net.DialUDP("udp", nil, udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, d := range helloFlight(t, "a.test", false) {
		cli.Write(d)
	}
	for end := time.Now().Add(10 * time.Second); px.Stats.QUICFailures[ReasonLoop].Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no loop seen in 10 s; %d flows relayed", px.Stats.QUICPassRelayed.Load())
		}
	}
	if n := px.Stats.QUICPassRelayed.Load(); n != 1 {
		t.Errorf("%d flows relayed; want the client's only", n)
	}
}

// newTable is the passthrough table of a configuration text.
func newTable(t *testing.T, toml string) *Table {
	t.Helper()
	cfg, err := config.Parse("test.toml", t.TempDir(), []byte(toml))
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatal(err)
	}
	px, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return px
}
