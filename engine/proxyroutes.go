package engine

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/routing"
)

// proxyRoutes are the reverse proxy's routes, shared by every loop.
// Immutable after construction except the upstreams' health and counts.
type proxyRoutes struct {
	domains routing.Table[[]*route] // domain -> its routes, longest prefix first
	trusted []netip.Prefix
	h1, h2  bool // client protocols the proxy answers
	h3      bool
	stats   proxyCounters
	// h2Buffered is the proxied response bytes every HTTP/2 stream of
	// the server holds ahead of its client (proxy_h2_tls_total_send_buffer_bytes
	// bounds it).
	h2Buffered atomic.Int64
}

// route is one [[reverse_proxy.routes]] table.
type route struct {
	cfg    *config.Route
	key    string // "reverse_proxy.routes[N]", for logs
	prefix string
	ups    []*upstream
	next   atomic.Uint32 // round robin
}

// upstream is one upstream address. Its pooled connections belong to
// loops; its health is shared.
type upstream struct {
	name      string // as configured
	addr      netip.AddrPort
	downUntil atomic.Int64 // unix nanoseconds: skipped until then after a failure
	failures  atomic.Int64 // failed connections since it last answered
	active    atomic.Int64 // exchanges in progress (least_conn)
}

// failed marks u down for a while after a failed connection: 1 s after
// the first failure, doubling with each one after it up to 30 s, so that
// a restarted upstream is back soon and a dead one is not tried on every
// request. It returns the back-off.
func (u *upstream) failed() time.Duration {
	n := min(u.failures.Add(1), 6)
	backoff := min(time.Second<<(n-1), upstreamBackoff)
	u.downUntil.Store(time.Now().Add(backoff).UnixNano())
	return backoff
}

// proxyCounters count what the upstream pools did.
type proxyCounters struct {
	opened, reused, failed, retried, timeouts, badResponses, drained, queued atomic.Int64
	// unsolicited: connections closed for bytes no request asked for.
	unsolicited atomic.Int64
}

// upstreamBackoff is the longest an upstream that keeps refusing or
// timing out is skipped.
const upstreamBackoff = 30 * time.Second

// newProxyRoutes builds the table of the routes that terminate TLS
// (passthrough false) or of those that relay it (true); nil when there
// are none. Host names among the upstreams are resolved once, here; one
// that does not resolve stops the start.
func newProxyRoutes(cfg *config.Config, passthrough bool) (*proxyRoutes, error) {
	rp := &cfg.ReverseProxy
	if !cfg.ProxyOn() {
		return nil, nil
	}
	t := &proxyRoutes{trusted: rp.Trusted,
		h1: config.On(rp.Protocols.H1), h2: config.On(rp.Protocols.H2), h3: config.On(rp.Protocols.H3)}
	ups := map[string]*upstream{}
	byDomain := map[string][]*route{}
	var domains []string // in the order of their first route
	n := 0
	for i := range rp.Routes {
		rc := &rp.Routes[i]
		if rc.Passthrough != passthrough {
			continue
		}
		n++
		r := &route{cfg: rc, key: fmt.Sprintf("reverse_proxy.routes[%d]", i), prefix: rc.PathPrefix}
		for _, name := range rc.Upstreams {
			u := ups[name]
			if u == nil {
				addr, err := resolveUpstream(name)
				if err != nil {
					return nil, fmt.Errorf("engine: %s.upstreams: %q: %w", r.key, name, err)
				}
				u = &upstream{name: name, addr: addr}
				ups[name] = u
			}
			r.ups = append(r.ups, u)
		}
		d := routing.Normalize(rc.Domain)
		if byDomain[d] == nil {
			domains = append(domains, d)
		}
		byDomain[d] = append(byDomain[d], r)
	}
	for _, d := range domains {
		rs := byDomain[d]
		sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].prefix) > len(rs[j].prefix) })
		t.domains.Add(d, rs)
	}
	if n == 0 {
		return nil, nil
	}
	return t, nil
}

func resolveUpstream(name string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(name); err == nil {
		return ap, nil
	}
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.AddrPort{}, fmt.Errorf("cannot resolve %s: %v", host, err)
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(addrs[0].Unmap().String(), port))
	return ap, err
}

// hasDomain reports whether some route is for host (normalized),
// counting "*" routes.
func (t *proxyRoutes) hasDomain(host string) bool {
	_, ok := t.domains.LookupString(host)
	return ok
}

// match returns the route for host (lowercase, no port) and path, or nil:
// the longest prefix among the routes of the most specific domain that
// has routes (exact, then the longest wildcard, then "*").
func (t *proxyRoutes) match(host, path []byte) *route {
	rs, _ := t.domains.Lookup(host)
	return longestPrefix(rs, path)
}

func longestPrefix(rs []*route, path []byte) *route {
	for _, r := range rs {
		if len(path) >= len(r.prefix) && string(path[:len(r.prefix)]) == r.prefix {
			return r
		}
	}
	return nil
}

// defaultHost is the Host sent for a request that named none (HTTP/1.0):
// the route's domain when it is one name, else its first upstream.
func (r *route) defaultHost() string {
	if d := r.cfg.Domain; d != "*" && !strings.HasPrefix(d, "*.") {
		return d
	}
	return r.ups[0].name
}

// pick chooses an upstream by the route's policy among those not backing
// off, or nil when every one is.
func (r *route) pick(now int64) *upstream {
	n := len(r.ups)
	if r.cfg.LB == "least_conn" {
		var best *upstream
		for _, u := range r.ups {
			if u.downUntil.Load() > now {
				continue
			}
			if best == nil || u.active.Load() < best.active.Load() {
				best = u
			}
		}
		return best
	}
	start := int(r.next.Add(1) - 1)
	for i := 0; i < n; i++ {
		if u := r.ups[(start+i)%n]; u.downUntil.Load() <= now {
			return u
		}
	}
	return nil
}
