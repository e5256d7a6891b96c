package proxy

import (
	"sync/atomic"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/routing"
)

// Table is the reverse proxy's routes (those that terminate TLS), and
// what its upstream pools count. Shared by every loop.
type Table struct {
	*routing.Routes
	Stats Counters
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
}

// New is cfg's table; nil without routes that terminate TLS.
func New(cfg *config.Config) (*Table, error) {
	rt, err := routing.NewRoutes(cfg, false)
	if rt == nil || err != nil {
		return nil, err
	}
	return &Table{Routes: rt}, nil
}
