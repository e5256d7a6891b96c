package routing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/policy"
)

// Routes are the reverse proxy's routes that terminate TLS, or those
// that relay it (passthrough), shared by every loop. Immutable after
// construction except the upstreams' health and counts.
type Routes struct {
	domains Table[[]*Route] // domain -> its routes, longest prefix first
	Trusted []netip.Prefix  // trusted_proxies
	// Client protocols the proxy answers ([reverse_proxy.protocols]).
	H1, H2, H3 bool
	// Policies are every route's policy, in configuration order.
	Policies []*policy.Path
}

// Route is one [[reverse_proxy.routes]] table.
type Route struct {
	Cfg    *config.Route
	Key    string // "reverse_proxy.routes[N]", for logs
	Prefix string
	Ups    []*Upstream
	// Policy is the route's auth, address rules and response fields.
	Policy *policy.Path
	next   atomic.Uint32 // round robin

	attachOnce sync.Once
	attached   any // Attach's, made once
}

// Attach returns the value make gives, made on the first call: state
// another package keeps per route (the edge cache's client of the
// route's origin) and that goes with the route at a reload.
func (r *Route) Attach(make func() any) any {
	r.attachOnce.Do(func() { r.attached = make() })
	return r.attached
}

// Upstream is one upstream address. Its pooled connections belong to
// loops; its health is shared.
type Upstream struct {
	Name string // as configured
	Addr netip.AddrPort
	// TLS is the client configuration of TLS to the upstream (verified
	// as the route says, with a session cache of its own); nil for plain
	// HTTP. An upstream named by several routes with different TLS
	// settings is one Upstream per setting, each with its own pool.
	TLS       *tls.Config
	DownUntil atomic.Int64 // unix nanoseconds: skipped until then after a failure
	Failures  atomic.Int64 // failed connections since it last answered
	Active    atomic.Int64 // exchanges in progress (least_conn)
}

// Failed marks u down for a while after a failed connection: 1 s after
// the first failure, doubling with each one after it up to 30 s, so that
// a restarted upstream is back soon and a dead one is not tried on every
// request. It returns the back-off.
func (u *Upstream) Failed() time.Duration {
	n := min(u.Failures.Add(1), 6)
	backoff := min(time.Second<<(n-1), UpstreamBackoff)
	u.DownUntil.Store(time.Now().Add(backoff).UnixNano())
	return backoff
}

// UpstreamBackoff is the longest an upstream that keeps refusing or
// timing out is skipped.
const UpstreamBackoff = 30 * time.Second

// NewRoutes builds the table of the routes that terminate TLS
// (passthrough false) or of those that relay it (true); nil when there
// are none. Host names among the upstreams are resolved once, here; one
// that does not resolve stops the start.
func NewRoutes(cfg *config.Config, passthrough bool) (*Routes, error) {
	rp := &cfg.ReverseProxy
	if !cfg.ProxyOn() {
		return nil, nil
	}
	t := &Routes{Trusted: rp.Trusted,
		H1: config.On(rp.Protocols.H1), H2: config.On(rp.Protocols.H2), H3: config.On(rp.Protocols.H3)}
	ups := map[string]*Upstream{}
	byDomain := map[string][]*Route{}
	var domains []string // in the order of their first route
	n := 0
	for i := range rp.Routes {
		rc := &rp.Routes[i]
		if rc.Passthrough != passthrough {
			continue
		}
		n++
		r := &Route{Cfg: rc, Key: fmt.Sprintf("reverse_proxy.routes[%d]", i), Prefix: rc.PathPrefix,
			Policy: policy.CompileRoute(rc.PathPrefix, &rc.Policy, rc.Domain)}
		for _, name := range rc.Upstreams {
			id := name + upstreamTLSKey(rc)
			u := ups[id]
			if u == nil {
				refuse := func(format string, args ...any) error {
					key := r.Key + ".upstreams"
					return &config.Error{File: cfg.File(), Line: cfg.Line(key), Key: key, Msg: fmt.Sprintf(format, args...)}
				}
				addr, err := resolveUpstream(name)
				if err != nil {
					return nil, refuse("%q: %v; the server resolves its upstreams' names when it starts", name, err)
				}
				// The configuration refuses the addresses it can tell
				// are not an upstream's; a name's are known only now.
				udp := passthrough && config.On(rp.Protocols.H3)
				if cfg.OnListener(addr, udp) {
					return nil, refuse("%q is %s, this server's own listener (listen = %q): the route would send its connections back to itself, without end; name the upstream's address", name, addr, cfg.Listen)
				}
				if !config.Unicast(addr.Addr()) {
					return nil, refuse("%q is %s, a multicast or broadcast address, which reaches many hosts (this one among them); name one server's address", name, addr)
				}
				u = &Upstream{Name: name, Addr: addr}
				if rc.UpstreamTLS && !passthrough {
					if u.TLS, err = upstreamTLS(rc, name); err != nil {
						return nil, refuse("%v", err)
					}
				}
				ups[id] = u
			}
			r.Ups = append(r.Ups, u)
		}
		d := Normalize(rc.Domain)
		if byDomain[d] == nil {
			domains = append(domains, d)
		}
		byDomain[d] = append(byDomain[d], r)
		t.Policies = append(t.Policies, r.Policy)
	}
	for _, d := range domains {
		rs := byDomain[d]
		sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].Prefix) > len(rs[j].Prefix) })
		t.domains.Add(d, rs)
	}
	if n == 0 {
		return nil, nil
	}
	return t, nil
}

// upstreamTLSKey tells apart an upstream's TLS settings: "" for plain.
func upstreamTLSKey(rc *config.Route) string {
	if !rc.UpstreamTLS || rc.Passthrough {
		return ""
	}
	return fmt.Sprintf("\x00tls\x00%s\x00%s\x00%s\x00%s\x00%t", rc.CA, rc.TLSServerName, rc.TLSClientCert, rc.TLSClientKey, rc.TLSInsecureSkipVerify)
}

// upstreamTLS is the client TLS configuration for upstream name on route
// rc: HTTP/1.1 (ALPN), TLS 1.2 at least, the route's roots (or the
// system's), its server name (or the upstream's host), its client
// certificate, and a cache of sessions so that new connections resume.
func upstreamTLS(rc *config.Route, name string) (*tls.Config, error) {
	host, _, err := net.SplitHostPort(name)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{
		ServerName:         host,
		NextProtos:         []string{"http/1.1"},
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: tls.NewLRUClientSessionCache(64),
		InsecureSkipVerify: rc.TLSInsecureSkipVerify,
	}
	if rc.TLSServerName != "" {
		c.ServerName = rc.TLSServerName
	}
	if rc.CA != "" {
		b, err := os.ReadFile(rc.CA)
		if err != nil {
			return nil, err
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(b) {
			return nil, errors.New("ca " + rc.CA + " holds no PEM certificate")
		}
	}
	if rc.TLSClientCert != "" {
		cert, err := tls.LoadX509KeyPair(rc.TLSClientCert, rc.TLSClientKey)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
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

// Rank is how specifically some route's domain names host (normalized),
// counting "*" routes.
func (t *Routes) Rank(host string) Rank {
	_, r := t.domains.MatchString(host)
	return r
}

// Match returns the route for host (lowercase, no port) and path, or nil:
// the longest prefix among the routes of the most specific domain that
// has routes (exact, then the longest wildcard, then "*"), and the rank
// that domain names host by (RankNone with no domain for host, even
// when no prefix matches).
func (t *Routes) Match(host, path []byte) (*Route, Rank) {
	rs, r := t.domains.Match(host)
	return longestPrefix(rs, path), r
}

// Of is a route of the most specific domain that has routes for host,
// whatever the path (the one with the longest prefix), or nil: what a
// request its domain names but no prefix takes is answered under.
func (t *Routes) Of(host []byte) *Route {
	if rs, _ := t.domains.Match(host); len(rs) > 0 {
		return rs[0]
	}
	return nil
}

func longestPrefix(rs []*Route, path []byte) *Route {
	for _, r := range rs {
		if len(path) >= len(r.Prefix) && string(path[:len(r.Prefix)]) == r.Prefix {
			return r
		}
	}
	return nil
}

// DefaultHost is the Host sent for a request that named none (HTTP/1.0):
// the route's domain when it is one name, else its first upstream.
func (r *Route) DefaultHost() string {
	if d := r.Cfg.Domain; d != "*" && !strings.HasPrefix(d, "*.") {
		return d
	}
	return r.Ups[0].Name
}

// Pick chooses an upstream by the route's policy among those not backing
// off, or nil when every one is.
func (r *Route) Pick(now int64) *Upstream {
	n := len(r.Ups)
	if r.Cfg.LB == "least_conn" {
		var best *Upstream
		for _, u := range r.Ups {
			if u.DownUntil.Load() > now {
				continue
			}
			if best == nil || u.Active.Load() < best.Active.Load() {
				best = u
			}
		}
		return best
	}
	start := int(r.next.Add(1) - 1)
	for i := 0; i < n; i++ {
		if u := r.Ups[(start+i)%n]; u.DownUntil.Load() <= now {
			return u
		}
	}
	return nil
}
