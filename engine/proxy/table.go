package proxy

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/internal/peershare"
)

// Table is the reverse proxy's routes (those that terminate TLS), and
// what its upstream pools count. Shared by every loop.
type Table struct {
	*routing.Routes
	Stats Counters
	// Peers counts the upstream connections each client address's
	// exchanges hold, over every loop (never limits by itself: overShare
	// compares it with the route's share).
	Peers *peershare.Table
	// Clients, when set, counts the client connections each address
	// holds (the server's, TCP and QUIC): of two waiting requests whose
	// addresses hold as many upstream connections, the one whose address
	// holds fewer client connections goes first. Set before serving.
	Clients *peershare.Table
	// stalls remembers the client addresses that had a response
	// preempted (their client stopped reading while others waited), and
	// when: their requests wait behind others' for a minute.
	stalls stallMemory
	// minRate is [limits] min_send_rate: a client moving fewer body
	// bytes a second than this while others wait for its upstream
	// connection gives it up (preempt).
	minRate int64
	// workers is the number of loops sharing the table: a route's
	// max_conns is per loop, so its connections over all loops are
	// max_conns times this.
	workers int
	// H2Buffered is the proxied response bytes every HTTP/2 stream of
	// the server holds ahead of its client (proxy_h2_tls_total_send_buffer_bytes
	// bounds it).
	H2Buffered atomic.Int64
}

// Counters count what the upstream pools did; each is named as the
// engine's Stats field it fills.
type Counters struct {
	ProxyOpened, ProxyReused, ProxyFailed, ProxyRetried, ProxyTimeouts atomic.Int64
	ProxyBadResponses, ProxyDrained, ProxyQueued                       atomic.Int64
	// ProxyUnsolicited: connections closed for bytes no request asked for.
	ProxyUnsolicited atomic.Int64
	// ProxyPreempted: exchanges whose client took nothing for
	// stallGrace, reset to give their upstream connection to a request
	// that waited for one.
	ProxyPreempted atomic.Int64
}

// New is cfg's table; nil without routes that terminate TLS.
func New(cfg *config.Config) (*Table, error) {
	rt, err := routing.NewRoutes(cfg, false)
	if rt == nil || err != nil {
		return nil, err
	}
	return &Table{Routes: rt, Peers: peershare.New(0, cfg.Limits.AddressIPv6Prefix, rt.Trusted), workers: cfg.WorkerCount(), minRate: int64(cfg.Limits.MinSendRate)}, nil
}

// stallMemory is the addresses whose clients stalled a response while
// others waited for its connection. Safe for concurrent use (every loop).
type stallMemory struct {
	mu sync.Mutex
	at map[netip.Addr]int64 // guarded by mu: address key -> when (unix ns)
}

// stallMemoryFor is how long an address is remembered.
const stallMemoryFor = int64(time.Minute)

func (m *stallMemory) mark(key netip.Addr, now int64) {
	if !key.IsValid() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at == nil {
		m.at = map[netip.Addr]int64{}
	}
	if len(m.at) >= 1<<16 {
		for k, t := range m.at {
			if now-t > stallMemoryFor {
				delete(m.at, k)
			}
		}
	}
	if len(m.at) < 1<<16 {
		m.at[key] = now
	}
}

func (m *stallMemory) recent(key netip.Addr, now int64) bool {
	if !key.IsValid() {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.at[key]
	return ok && now-t <= stallMemoryFor
}
