package passthrough

import (
	"sync"
	"sync/atomic"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/routing"
)

// Table is TLS passthrough (routes with tls_termination = false):
// a TCP connection whose ClientHello names a relayed domain is connected
// to the route's upstream and relayed both ways with splice(2), still
// encrypted; QUIC connections likewise by their Initial packet (see
// quicpass.go). Shared by every loop.
type Table struct {
	// Immutable after construction.
	Routes *routing.Routes
	// local names what the engine terminates: sites' and terminating
	// routes' domains. A passthrough route takes a name only when it
	// names it more specifically (routing.Rank); the config refuses a
	// domain that is both relayed and terminated.
	local routing.Table[struct{}]
	Stats Counters
	// hellos are the ClientHellos of the relays open, TCP and QUIC, by
	// their random (Claim).
	hellos sync.Map // [32]byte -> struct{}
}

// Claim notes the ClientHello a relay is about to carry, by its random;
// false when a relay open already carries it. A client makes a fresh
// random for every hello, so the same hello on a second connection or
// flow is the first one's own bytes come back: its upstream is this
// server, or relays back to it (another relay pointed here), and
// relaying it again would go round without end. (Or it is a replay,
// which cannot finish a handshake either.) Release when the relay ends.
func (t *Table) Claim(random [32]byte) bool {
	_, dup := t.hellos.LoadOrStore(random, struct{}{})
	return !dup
}

// Release forgets a hello Claim took.
func (t *Table) Release(random [32]byte) { t.hellos.Delete(random) }

// Counters count what passthrough did, each named as the engine's Stats
// field it fills. Failures are counted by reason, as Stats reports them.
type Counters struct {
	PassRelayed, PassActive, PassBytesUp, PassBytesDown atomic.Int64
	Failures                                            [NReasons]atomic.Int64

	// QUIC: flows, the datagram bytes each way, datagrams dropped for
	// want of HTTP/3 of the engine's own.
	QUICPassRelayed, QUICPassActive, QUICPassBytesUp, QUICPassBytesDown, QUICPassDropped atomic.Int64
	// QUICPassUnconfirmed counts flows dropped because their client never
	// answered the upstream (a spoofed address, or a client gone) or
	// never finished its handshake with it (forged answers);
	// QUICPassOneSided, flows closed because their upstream had gone quiet
	// while their client kept sending (see quicFlow.oneSided).
	QUICPassUnconfirmed, QUICPassOneSided atomic.Int64
	QUICFailures                          [NReasons]atomic.Int64
}

// Reason is why a connection meant for passthrough was not relayed.
type Reason int

const (
	ReasonNoSNI        Reason = iota // no server name, no "*" route, and nothing local to serve
	ReasonNoRoute                    // a server name no route and no local site has
	ReasonNotTLS                     // the first bytes were not a TLS handshake
	ReasonBadHello                   // a malformed or oversized ClientHello, or the client left before it was whole
	ReasonHelloTimeout               // the ClientHello did not arrive within header_timeout
	ReasonUpstream                   // no upstream could be connected
	ReasonTableFull                  // QUIC: the router's tables are full
	ReasonLoop                       // the hello is one a relay open already carries: it came back (Table.Claim)
	NReasons
)

// ReasonNames are the reasons as Stats and the log name them.
var ReasonNames = [NReasons]string{"no_sni", "no_route", "not_tls", "bad_hello", "hello_timeout", "upstream_unreachable", "table_full", "loop"}

// New is cfg's passthrough; nil without routes that relay TLS.
func New(cfg *config.Config) (*Table, error) {
	rt, err := routing.NewRoutes(cfg, true)
	if rt == nil || err != nil {
		return nil, err
	}
	p := &Table{Routes: rt}
	for i := range cfg.Sites {
		p.local.Add(cfg.Sites[i].Domain, struct{}{})
	}
	for i := range cfg.ReverseProxy.Routes {
		if r := &cfg.ReverseProxy.Routes[i]; !r.Passthrough {
			p.local.Add(r.Domain, struct{}{})
		}
	}
	return p, nil
}

// Route is the passthrough route for a server name ("" for none: only a
// "*" route takes it), or nil: the route of the most specific domain
// naming it (exact, longest wildcard, "*"), unless a site or terminating
// route names it as specifically or more (a site "a.example.com" keeps
// its name from a passthrough "*.example.com").
func (p *Table) Route(name string) *routing.Route {
	name = routing.Normalize(name)
	rt, r := p.Routes.Match([]byte(name), []byte("/"))
	if rt == nil {
		return nil
	}
	if _, l := p.local.MatchString(name); l >= r {
		return nil
	}
	return rt
}

// logsPerSecond bounds the lines the QUIC router logs a second about
// what clients did.
const logsPerSecond = 20
