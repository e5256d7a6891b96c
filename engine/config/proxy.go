package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/mediaship/engine/internal/httpsyntax"
)

// ReverseProxy is [reverse_proxy]: routes that send requests for a domain
// and path prefix to upstream servers, on the engine's own listeners.
type ReverseProxy struct {
	// Enabled turns the routes on. Zero (false) ignores the section.
	Enabled bool `toml:"enabled"`
	// TLSTermination is true (nil: the default): the engine ends the
	// client's TLS and speaks HTTP to the upstream. False is TLS
	// passthrough: connections are routed by the ClientHello's SNI (and
	// QUIC's by its Initial packet's) and relayed encrypted to the
	// upstream, which holds the certificate. A route may override it.
	TLSTermination *bool `toml:"tls_termination"`
	// Protocols are those clients may speak to the proxy. Nil means on.
	Protocols ProxyProtocols `toml:"protocols"`
	// TLS is the certificate for the route domains (chosen by SNI), for
	// domains no site's certificate covers.
	TLS TLS `toml:"tls"`
	// TrustedProxies lists addresses or prefixes ("10.0.0.0/8") whose
	// X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host and Forwarded
	// headers are kept and extended; from any other client they are
	// replaced. Path policies (allow, deny, signatures bound to an
	// address) judge the client such a proxy names in X-Forwarded-For;
	// read even when the proxy is not enabled.
	TrustedProxies []string `toml:"trusted_proxies"`
	Routes         []Route  `toml:"routes"`

	// Trusted is TrustedProxies parsed. Not from TOML.
	Trusted []netip.Prefix `toml:"-"`
}

// ProxyProtocols enables client protocols for proxied requests.
type ProxyProtocols struct {
	H1 *bool `toml:"h1"`
	H2 *bool `toml:"h2"`
	H3 *bool `toml:"h3"`
}

// Route sends requests for Domain whose path starts with PathPrefix to
// Upstreams.
type Route struct {
	// Domain is "media.example.com", "*.example.com" or "*".
	Domain string `toml:"domain"`
	// PathPrefix selects the requests: the longest matching prefix of the
	// domain's routes wins. Zero means "/".
	PathPrefix string `toml:"path_prefix"`
	// Upstreams are host:port addresses of HTTP/1.1 servers.
	Upstreams []string `toml:"upstreams"`
	// LB is "round_robin" (the zero value) or "least_conn".
	LB string `toml:"lb"`
	// ConnectTimeout bounds a connection to an upstream. Zero means 5s.
	ConnectTimeout Duration `toml:"connect_timeout"`
	// ResponseTimeout bounds the time from the request's head being sent
	// to the response head arriving. Zero means 60s.
	ResponseTimeout Duration `toml:"response_timeout"`
	// ReadTimeout bounds the time between two reads of the response
	// body, and the time an upstream may go without taking request body
	// bytes. Zero means 60s.
	ReadTimeout Duration `toml:"read_timeout"`
	// MaxBody bounds a request body; a larger one is answered 413. Zero
	// ("0") means unlimited.
	MaxBody Size `toml:"max_body"`
	// MaxIdle bounds the idle pooled connections kept per upstream (per
	// worker). Nil means 256; 0 keeps none (a connection per request).
	MaxIdle *int `toml:"max_idle"`
	// MaxConns bounds the connections open to each upstream (busy and
	// idle, per worker): a request past it waits for one, up to
	// response_timeout, then gets 503. Nil means 256; 0 means no bound.
	MaxConns *int `toml:"max_conns"`
	// IdleTimeout closes a pooled connection unused this long; keep it
	// below the upstream's own keep-alive timeout. Zero means 50s. On a
	// passthrough route it closes a relayed connection (both sides) on
	// which no byte moved either way this long; zero means 10m.
	IdleTimeout Duration `toml:"idle_timeout"`
	// UpstreamTLS speaks TLS (HTTP/1.1 over TLS 1.2 or 1.3) to the
	// upstreams, their certificates verified against the system roots or
	// CA, for the name TLSServerName.
	UpstreamTLS bool `toml:"upstream_tls"`
	// CA is a PEM file of the roots that verify upstream certificates;
	// zero means the system's roots.
	CA string `toml:"ca"`
	// TLSServerName is the name sent as SNI and that an upstream's
	// certificate must carry. Zero means each upstream's host as written
	// in upstreams (an IP address is verified against the certificate's
	// IP addresses, and sent no SNI).
	TLSServerName string `toml:"tls_server_name"`
	// TLSClientCert and TLSClientKey are a PEM certificate (chain) and
	// its key, shown to upstreams that ask for one (mutual TLS).
	TLSClientCert string `toml:"tls_client_cert"`
	TLSClientKey  string `toml:"tls_client_key"`
	// TLSInsecureSkipVerify accepts any certificate from the upstreams:
	// anyone on the path can then read and change the traffic. For tests
	// against throwaway certificates only.
	TLSInsecureSkipVerify bool `toml:"tls_insecure_skip_verify"`
	// TLSTermination overrides [reverse_proxy] tls_termination for this
	// route: false relays its domain's connections unopened.
	TLSTermination *bool `toml:"tls_termination"`
	// ProxyProtocol is "off" (the zero value) or "v2": a passthrough
	// route sends a PROXY protocol v2 header first on each TCP
	// connection, so the origin sees the client's address.
	ProxyProtocol string `toml:"proxy_protocol"`
	// Cache has the route's GET and HEAD responses go through the edge
	// cache ([cache]): stored when the origin's freshness allows, served
	// as files while fresh.
	Cache bool `toml:"cache"`
	// CacheManifest is a BLAKE3 manifest of the origin's objects (the
	// format b3sum and engine digest write: "<hex>  <path>"), by URL
	// path without its leading slash: an object it names is stored only
	// when its bytes match, as when the origin states a digest.
	CacheManifest string `toml:"cache_manifest"`
	// Origin is "http" (the zero value: the upstreams are web servers)
	// or "s3": the upstreams are an S3-compatible object store's
	// endpoint, its objects in S3Bucket, the requests signed (AWS
	// Signature V4). An S3 origin is reached through the edge cache
	// (cache = true).
	Origin string `toml:"origin"`
	// S3Bucket is the bucket a request's path names an object of:
	// /models/a.bin is the object "models/a.bin" of the bucket.
	S3Bucket string `toml:"s3_bucket"`
	// S3Region is the region requests are signed for. Zero means
	// "us-east-1".
	S3Region string `toml:"s3_region"`
	// S3Credentials is an AWS shared credentials file (its profile
	// AWS_PROFILE, or "default"); zero means the environment's
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
	S3Credentials string `toml:"s3_credentials"`
	// Policy: auth, address rules and response fields for the route's
	// requests, as a site's [[sites.paths]] take them.
	Policy

	// Passthrough is the route's mode resolved: TLS is relayed, not
	// terminated. Not from TOML.
	Passthrough bool `toml:"-"`
}

// ProxyOn reports whether reverse proxy routes are configured and on.
func (c *Config) ProxyOn() bool { return c.ReverseProxy.Enabled && len(c.ReverseProxy.Routes) > 0 }

// Passthrough reports whether some route relays TLS unopened: the
// listener then reads each ClientHello before anything else. Valid after
// Validate.
func (c *Config) Passthrough() bool {
	if !c.ReverseProxy.Enabled {
		return false
	}
	for i := range c.ReverseProxy.Routes {
		if c.ReverseProxy.Routes[i].Passthrough {
			return true
		}
	}
	return false
}

// Terminating reports whether some route terminates TLS and proxies
// HTTP. Valid after Validate.
func (c *Config) Terminating() bool {
	if !c.ReverseProxy.Enabled {
		return false
	}
	for i := range c.ReverseProxy.Routes {
		if !c.ReverseProxy.Routes[i].Passthrough {
			return true
		}
	}
	return false
}

// validateProxy checks [reverse_proxy] and its routes. It runs after the
// sites, whose certificates may cover route domains.
func (c *Config) validateProxy(errs *Errors) {
	rp := &c.ReverseProxy
	// Read even with the proxy off: path policies judge the client a
	// trusted proxy forwards.
	rp.Trusted = rp.Trusted[:0]
	for i, s := range rp.TrustedProxies {
		p, err := ParsePrefix(s)
		if err != nil {
			errs.add(c.errAt("reverse_proxy.trusted_proxies", "entry %d (%q) is not an address or prefix; expected one such as \"10.0.0.1\" or \"10.0.0.0/8\"", i, s))
			continue
		}
		rp.Trusted = append(rp.Trusted, p)
	}
	if !rp.Enabled {
		return
	}
	if !On(rp.Protocols.H1) && !On(rp.Protocols.H2) && !On(rp.Protocols.H3) {
		errs.add(c.errAt("reverse_proxy.protocols", "every protocol is off; enable at least one of h1, h2, h3"))
	}
	c.validateSiteTLS("reverse_proxy", &rp.TLS, errs)
	if len(rp.Routes) == 0 {
		errs.add(c.errAt("reverse_proxy", "enabled but no route; add a [[reverse_proxy.routes]] table with a domain and upstreams"))
	}
	seen := map[string]int{}
	for i := range rp.Routes {
		c.validateRoute(i, seen, errs)
	}
	c.validatePassthrough(errs)
}

// validatePassthrough checks what passthrough routes ask of the rest: a
// domain is either relayed or terminated, never both; and a listener that
// relays some names must have a certificate for the files it serves.
func (c *Config) validatePassthrough(errs *Errors) {
	rp := &c.ReverseProxy
	mode := map[string]int{} // domain -> a route of it
	for i := range rp.Routes {
		r := &rp.Routes[i]
		d := httpsyntax.NormalizeName(r.Domain)
		j, ok := mode[d]
		if !ok {
			mode[d] = i
			continue
		}
		if rp.Routes[j].Passthrough != r.Passthrough {
			errs.add(c.errAt(fmt.Sprintf("reverse_proxy.routes[%d].tls_termination", i), "%q is relayed by one route and terminated by reverse_proxy.routes[%d]; a domain's TLS is either passed through or terminated, so give both routes the same tls_termination", r.Domain, j))
		}
	}
	site := map[string]int{} // domain -> its site
	for i := range c.Sites {
		site[httpsyntax.NormalizeName(c.Sites[i].Domain)] = i
	}
	for i := range rp.Routes {
		r := &rp.Routes[i]
		if j, ok := site[httpsyntax.NormalizeName(r.Domain)]; ok && r.Passthrough {
			errs.add(c.errAt(fmt.Sprintf("reverse_proxy.routes[%d].domain", i), "%q is relayed by this passthrough route and served by sites[%d]; a name's TLS is either passed through or terminated: remove one, or give the route tls_termination = true", r.Domain, j))
		}
	}
	if c.Passthrough() && !c.HasTLS() && (c.Root != "" || len(c.Sites) > 0) {
		errs.add(c.errAt("reverse_proxy.tls_termination", "passthrough routes make the listener a TLS one, and the files of root and [[sites]] have no certificate to be served with there; add [sites.tls] cert and key (or run serve --self-signed), or serve the files from another listener"))
	}
	if c.Passthrough() && !c.HasTLS() {
		for i := range rp.Routes {
			if !rp.Routes[i].Passthrough {
				errs.add(c.errAt(fmt.Sprintf("reverse_proxy.routes[%d].domain", i), "%q terminates TLS on a listener that has no certificate (its other routes are passthrough); set [reverse_proxy.tls] cert and key", rp.Routes[i].Domain))
			}
		}
	}
}

func (c *Config) validateRoute(i int, seen map[string]int, errs *Errors) {
	r := &c.ReverseProxy.Routes[i]
	key := fmt.Sprintf("reverse_proxy.routes[%d]", i)
	r.Passthrough = !On(c.ReverseProxy.TLSTermination)
	if r.TLSTermination != nil {
		r.Passthrough = !*r.TLSTermination
	}
	switch r.ProxyProtocol {
	case "", "off":
		r.ProxyProtocol = "off"
	case "v2":
		if !r.Passthrough {
			errs.add(c.errAt(key+".proxy_protocol", "\"v2\" is for passthrough routes (tls_termination = false); a terminating route tells its upstream the client's address in X-Forwarded-For and Forwarded"))
		}
	default:
		errs.add(c.errAt(key+".proxy_protocol", "%q is not a choice; expected \"off\" (the default) or \"v2\"", r.ProxyProtocol))
	}
	c.validatePolicy(key, &r.Policy, true, errs)
	if r.Passthrough {
		if r.Policy.Gated() || len(r.Policy.SetHeaders)+len(r.Policy.AddHeaders)+len(r.Policy.RemoveHeaders)+len(r.Policy.CORSOrigins) > 0 {
			errs.add(c.errAt(key, "auth, address rules and response fields have nothing to act on on a passthrough route (tls_termination = false): its bytes are relayed still encrypted; terminate TLS on this route to apply them"))
		}
		// A relayed connection is routed by its ClientHello before
		// anything else: what is decided per request, or about the
		// upstream's HTTP, has nothing to act on.
		for _, k := range []string{"path_prefix", "response_timeout", "read_timeout", "max_body", "max_idle", "max_conns", "upstream_tls", "ca", "tls_server_name", "tls_client_cert", "tls_client_key", "tls_insecure_skip_verify"} {
			if _, set := c.src.lines[key+"."+k]; set {
				errs.add(c.errAt(key+"."+k, "has no meaning on a passthrough route (tls_termination = false): its connections are routed by the ClientHello's server name and relayed still encrypted; remove it, or terminate TLS on this route"))
			}
		}
	}
	if r.Domain == "" {
		errs.add(c.errAt(key+".domain", "missing; every route needs a domain such as \"media.example.com\", \"*.example.com\" or \"*\""))
	} else if !validDomain(r.Domain) {
		errs.add(c.errAt(key+".domain", "%q is not a host name; expected a name such as \"media.example.com\", \"*.example.com\" or \"*\"", r.Domain))
	}
	if r.PathPrefix == "" {
		r.PathPrefix = "/"
	}
	switch {
	case r.PathPrefix[0] != '/' || strings.ContainsAny(r.PathPrefix, "?# \t\r\n\x00"):
		errs.add(c.errAt(key+".path_prefix", "%q is not a path prefix; expected one starting with \"/\" such as \"/api/\"", r.PathPrefix))
	case strings.ContainsAny(r.PathPrefix, "%\\") || strings.Contains(r.PathPrefix, "//") || dotSegment(r.PathPrefix):
		// Requests are matched by their path decoded once, with "."
		// segments and repeated slashes dropped, and ".." refused: such
		// a prefix would never match as written.
		errs.add(c.errAt(key+".path_prefix", "%q is not a path as requests are matched by (decoded once, repeated slashes merged, no dot segments); write it plainly, such as \"/api/\"", r.PathPrefix))
	}
	id := httpsyntax.NormalizeName(r.Domain) + " " + r.PathPrefix
	if j, dup := seen[id]; dup {
		errs.add(c.errAt(key+".path_prefix", "%q on %q is already the prefix of reverse_proxy.routes[%d]; each domain and prefix may appear once", r.PathPrefix, r.Domain, j))
	}
	seen[id] = i
	if len(r.Upstreams) == 0 {
		errs.add(c.errAt(key+".upstreams", "missing; a route needs at least one upstream such as \"10.0.0.20:8080\""))
	}
	for j, u := range r.Upstreams {
		if err := checkHostPort(u); err != nil {
			errs.add(c.errAt(key+".upstreams", "entry %d (%q) %v", j, u, err))
		} else if c.isOwnListener(r, u) {
			errs.add(c.errAt(key+".upstreams", "entry %d (%q) is this server's own listener (listen = %q): the route would send its connections back to itself, without end; name the upstream's address", j, u, c.Listen))
		}
	}
	switch r.LB {
	case "":
		r.LB = "round_robin"
	case "round_robin", "least_conn":
	default:
		errs.add(c.errAt(key+".lb", "%q is not a policy; expected \"round_robin\" (the default) or \"least_conn\"", r.LB))
	}
	for _, d := range []struct {
		name string
		v    *Duration
		def  Duration
	}{
		{"connect_timeout", &r.ConnectTimeout, Duration(5e9)},
		{"response_timeout", &r.ResponseTimeout, Duration(60e9)},
		{"read_timeout", &r.ReadTimeout, Duration(60e9)},
		{"idle_timeout", &r.IdleTimeout, Duration(50e9)},
	} {
		if r.Passthrough && d.name == "idle_timeout" {
			d.def = Duration(10 * 60e9) // nginx stream's proxy_timeout
		}
		if *d.v == 0 {
			*d.v = d.def
		} else if *d.v < Duration(1e6) {
			errs.add(c.errAt(key+"."+d.name, "%d is too short to be meant; write a duration with a unit, such as \"30s\"", int64(*d.v)))
		}
	}
	if r.MaxBody < 0 {
		errs.add(c.errAt(key+".max_body", "must not be negative; \"0\" means unlimited"))
	}
	if r.MaxIdle == nil {
		v := 256
		r.MaxIdle = &v
	} else if *r.MaxIdle < 0 || *r.MaxIdle > 1<<16 {
		errs.add(c.errAt(key+".max_idle", "%d is out of range; expected 0 (no pooling) to 65536", *r.MaxIdle))
	}
	if r.MaxConns == nil {
		v := 256
		r.MaxConns = &v
	} else if *r.MaxConns < 0 || *r.MaxConns > 1<<20 {
		errs.add(c.errAt(key+".max_conns", "%d is out of range; expected 0 (no bound) to 1048576", *r.MaxConns))
	}
	if r.CA != "" {
		r.CA = c.resolvePath(key+".ca", r.CA)
		if _, err := os.Stat(r.CA); err != nil {
			errs.add(c.errAt(key+".ca", "cannot read %q: %v; expected a PEM file of CA certificates", r.CA, unwrapPathError(err)))
		} else if !r.UpstreamTLS && !r.Passthrough {
			errs.add(c.errAt(key+".ca", "set but upstream_tls is false; a CA verifies upstream certificates, so set upstream_tls = true or remove ca"))
		}
	}
	if !r.Passthrough {
		c.validateUpstreamTLS(key, r, errs)
	}
	if r.Domain != "" && !r.Passthrough && c.HasTLS() && !c.certCovers(r.Domain) {
		errs.add(c.errAt(key+".domain", "%q has no certificate on this TLS listener; set [reverse_proxy.tls] cert and key, or add a [[sites]] table for the domain with one", r.Domain))
	}
}

// certCovers reports whether a certificate is configured for a route
// domain: the proxy's own, a site with the same domain, or --self-signed.
func (c *Config) certCovers(domain string) bool {
	if c.selfSigned || c.ReverseProxy.TLS.Cert != "" || domain == "*" {
		return true // "*": the default certificate answers any name
	}
	if c.ReverseProxy.TLS.ACME && !strings.HasPrefix(domain, "*.") {
		return true
	}
	d := httpsyntax.NormalizeName(domain)
	for i := range c.Sites {
		s := &c.Sites[i]
		if s.TLS.Has() && httpsyntax.NormalizeName(s.Domain) == d {
			return true
		}
	}
	return false
}

// checkHostPort checks an upstream address: a host name or IP, and a
// port from 1 to 65535.
func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return fmt.Errorf("is not an address; expected host:port such as \"10.0.0.20:8080\" or \"backend.internal:8080\"")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("has port %q; expected a number from 1 to 65535", port)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil && !validDomain(host) || strings.HasPrefix(host, "*") {
		return fmt.Errorf("has host %q; expected an IP address or a host name", host)
	}
	if err == nil && !Unicast(ip) {
		return fmt.Errorf("is a multicast or broadcast address, which reaches many hosts (this one among them); expected one server's address")
	}
	return nil
}

// dotSegment reports whether path has a "." or ".." segment.
func dotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// isOwnListener reports whether upstream a (host:port, checked) of a
// route is the server's own listener, as far as can be told without
// resolving names: an IP address the listener answers on, or
// "localhost" when it answers on loopback. Routes resolve the other
// names when the server starts, and check again (OnListener).
func (c *Config) isOwnListener(r *Route, a string) bool {
	host, port, _ := net.SplitHostPort(a)
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return false
	}
	udp := r.Passthrough && On(c.ReverseProxy.Protocols.H3)
	if strings.EqualFold(host, "localhost") {
		return c.OnListener(netip.AddrPortFrom(loopback4, uint16(p)), udp) ||
			c.OnListener(netip.AddrPortFrom(netip.IPv6Loopback(), uint16(p)), udp)
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && c.OnListener(netip.AddrPortFrom(ip, uint16(p)), udp)
}

// OnListener reports whether a connection to ap would reach the
// server's own listener (listen) over TCP, or, with udp, over TCP or
// UDP (QUIC passthrough relays over both): ap has the listener's port
// (a fixed one, not 0), and an address it answers on, whatever the
// zone. A listener on every address answers on loopback and on this
// host's interface addresses (over TCP, "0.0.0.0" is IPv4 only; UDP
// sockets on it take IPv6 too); one on "localhost" on both loopback
// addresses and, from this host, its interface addresses (it is the
// wildcard bound to the loopback device, reuseport.Listen). A
// connection to 0.0.0.0 or :: goes to the loopback address.
func (c *Config) OnListener(ap netip.AddrPort, udp bool) bool {
	listen := c.Listen
	if listen == "" {
		listen = ":8080"
	}
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if p, err := strconv.ParseUint(lport, 10, 16); err != nil || p == 0 || uint16(p) != ap.Port() {
		return false
	}
	ip := ap.Addr().WithZone("").Unmap()
	if ip.IsUnspecified() {
		if ip = netip.IPv6Loopback(); ap.Addr().Unmap().Is4() {
			ip = loopback4
		}
	}
	l, err := netip.ParseAddr(lhost)
	l = l.WithZone("").Unmap()
	switch {
	case lhost == "" || err == nil && l.IsUnspecified():
		if l.Is4() && ip.Is6() && !udp {
			return false
		}
		return ip.IsLoopback() || hostAddr(ip)
	case strings.EqualFold(lhost, "localhost"):
		return ip.IsLoopback() || hostAddr(ip)
	case err == nil:
		return ip == l
	}
	return false
}

// hostAddr reports whether ip (without zone) is an address of one of
// this host's interfaces.
func hostAddr(ip netip.Addr) bool {
	addrs, _ := net.InterfaceAddrs()
	for _, ia := range addrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil && p.Addr().WithZone("").Unmap() == ip {
			return true
		}
	}
	return false
}

// Unicast reports whether ip may be an upstream: not a multicast or
// broadcast address (255.255.255.255, or the broadcast address of one
// of this host's IPv4 networks), which would reach many hosts, this one
// among them.
func Unicast(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return false
	}
	if !ip.Is4() {
		return true
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ia := range addrs {
		p, err := netip.ParsePrefix(ia.String())
		if err != nil || !p.Addr().Unmap().Is4() || p.Bits() >= 31 {
			continue
		}
		b := p.Addr().Unmap().As4()
		binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])|(1<<(32-p.Bits())-1))
		if netip.AddrFrom4(b) == ip {
			return false
		}
	}
	return true
}

var loopback4 = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// validateUpstreamTLS checks the keys of TLS to a route's upstreams.
func (c *Config) validateUpstreamTLS(key string, r *Route, errs *Errors) {
	if !r.UpstreamTLS {
		for _, k := range []string{"tls_server_name", "tls_client_cert", "tls_client_key", "tls_insecure_skip_verify"} {
			if _, set := c.src.lines[key+"."+k]; set {
				errs.add(c.errAt(key+"."+k, "set but upstream_tls is false; it applies to TLS to the upstreams: set upstream_tls = true or remove it"))
			}
		}
		return
	}
	if n := r.TLSServerName; n != "" {
		if _, err := netip.ParseAddr(n); err != nil && (strings.Contains(n, "*") || !validDomain(n)) {
			errs.add(c.errAt(key+".tls_server_name", "%q is not a host name or an IP address", n))
		}
	}
	if r.TLSInsecureSkipVerify && r.CA != "" {
		errs.add(c.errAt(key+".tls_insecure_skip_verify", "true accepts any certificate, and ca is set to verify them: choose one (remove tls_insecure_skip_verify to verify against ca)"))
	}
	switch {
	case r.TLSClientCert != "" && r.TLSClientKey == "":
		errs.add(c.errAt(key+".tls_client_cert", "set without tls_client_key; a client certificate needs its key"))
	case r.TLSClientKey != "" && r.TLSClientCert == "":
		errs.add(c.errAt(key+".tls_client_key", "set without tls_client_cert; a key needs its certificate"))
	case r.TLSClientCert != "":
		r.TLSClientCert = c.resolvePath(key+".tls_client_cert", r.TLSClientCert)
		r.TLSClientKey = c.resolvePath(key+".tls_client_key", r.TLSClientKey)
		if _, err := tls.LoadX509KeyPair(r.TLSClientCert, r.TLSClientKey); err != nil {
			errs.add(c.errAt(key+".tls_client_cert", "cannot load the client certificate %q with key %q: %v", r.TLSClientCert, r.TLSClientKey, unwrapPathError(err)))
		}
	}
	if r.CA != "" {
		if b, err := os.ReadFile(r.CA); err == nil && !x509.NewCertPool().AppendCertsFromPEM(b) {
			errs.add(c.errAt(key+".ca", "%q holds no PEM certificate; expected the CA certificates that sign the upstreams' certificates", r.CA))
		}
	}
}
