package engine

import (
	"crypto/tls"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/acme"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/internal/selfsigned"
)

// certTable chooses a certificate by SNI: exact name, then wildcard, then
// the default. It is the one rule for which names the engine's TLS
// serves, for sites and routes alike, and with what: a name's TLS facts
// (certificate, minimum version) are its site's when a site names it
// (exactly or by wildcard), else [reverse_proxy.tls]'s when a route that
// terminates TLS does. A name neither names (or no name at all) gets the
// default's when something takes such names: a "*" site, the site marked
// default, the top-level root (with the certificate it borrows), or a
// "*" route, in that order. Otherwise it gets no certificate, and the
// handshake fails with unrecognized_name; the first site is no default
// of its own accord. Requests are held to the same facts (misdirected).
type certTable struct {
	names routing.Table[*certFacts] // exact and "*." names; a "*" site is the default
	def   *certFacts                // nil: names nothing names are refused
	// acme maps the placeholder certificate of each ACME name to the
	// name: the handshake asks the ACME manager for the real one.
	acme map[*tls.Certificate]string
}

// certFacts are what a handshake for a name is given.
type certFacts struct {
	cert   *tls.Certificate
	v12    bool          // accepts TLS 1.2 (min_version = "1.2")
	groups []tls.CurveID // key_exchanges resolved; nil: crypto/tls's default
}

// facts returns the TLS facts of a normalized name: its own (exact, then
// longest wildcard), else the default's; nil when nothing serves it.
func (t *certTable) facts(name string) *certFacts {
	if f, ok := t.names.LookupString(name); ok {
		return f
	}
	return t.def
}

// allow12 reports whether TLS 1.2 ClientHellos are taken as far as the
// name they ask for, so that one for a TLS 1.3-only name is answered
// protocol_version and one for a name nothing serves unrecognized_name.
func (t *certTable) allow12() bool { return t.def != nil && t.def.v12 || t.names.Len() > 0 }

// allows12 reports whether the site a client names in SNI accepts TLS 1.2.
func (t *certTable) allows12(sni string) bool {
	f := t.facts(serverName(sni))
	return f != nil && f.v12
}

// keyExchanges is the key exchanges of the site a client names in SNI,
// chosen as its certificate is (exact, wildcard, default); nil means
// crypto/tls's default.
func (t *certTable) keyExchanges(sni string) []tls.CurveID {
	if f := t.facts(serverName(sni)); f != nil {
		return f.groups
	}
	return nil
}

// certStore holds the current table; SIGHUP swaps in a reloaded one, and
// handshakes already running keep the certificate they picked.
type certStore struct {
	cur        atomic.Pointer[certTable]
	selfSigned *tls.Certificate // when serve --self-signed made one
	acme       *acme.Manager    // nil without ACME names

	reloadMu sync.Mutex     // serializes reloads
	cfg      *config.Config // guarded by reloadMu: the configuration cur was made from; nil: the server's
}

// loadCertTable reads every site's PEM files. Errors name the file and
// the config key.
func loadCertTable(cfg *config.Config, selfSigned *tls.Certificate) (*certTable, error) {
	t := &certTable{acme: map[*tls.Certificate]string{}}
	loaded := map[string]*tls.Certificate{} // cert path -> parsed, so tables sharing files share it
	load := func(key string, c *config.TLS) (*tls.Certificate, error) {
		if cert := loaded[c.Cert+"\x00"+c.Key]; cert != nil {
			return cert, nil
		}
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, &config.Error{File: cfg.File(), Line: cfg.Line(key + ".cert"), Key: key,
				Msg: fmt.Sprintf("cannot load certificate %s with key %s: %v", c.Cert, c.Key, err)}
		}
		loaded[c.Cert+"\x00"+c.Key] = &cert
		return &cert, nil
	}
	placeholder := func(domain string) *tls.Certificate {
		c := new(tls.Certificate)
		t.acme[c] = serverName(domain)
		return c
	}
	// add gives the name d (normalized; "*.suffix" for a wildcard) cert,
	// its minimum version and its key exchanges, unless a table before
	// it took the name.
	add := func(d string, cert *tls.Certificate, v12 bool, groups []tls.CurveID) {
		t.names.Add(d, &certFacts{cert: cert, v12: v12, groups: groups})
	}

	// Each site's own certificate; nil for those without one.
	certs := make([]*tls.Certificate, len(cfg.Sites))
	var first *tls.Certificate // the first site's with one
	var first12 bool
	var firstGroups []tls.CurveID
	for i := range cfg.Sites {
		sc := &cfg.Sites[i]
		switch {
		case sc.TLS.ACME:
			certs[i] = placeholder(sc.Domain)
		case sc.TLS.Cert != "":
			c, err := load(fmt.Sprintf("sites[%d].tls", i), &sc.TLS)
			if err != nil {
				return nil, err
			}
			certs[i] = c
		default:
			certs[i] = selfSigned
		}
		if first == nil && certs[i] != nil {
			first, first12, firstGroups = certs[i], sc.TLS.MinVersion == "1.2", sc.TLS.Groups
		}
	}
	// The proxy's certificate answers for the route domains that no
	// site's certificate names.
	rp := &cfg.ReverseProxy
	var proxyCert *tls.Certificate
	if rp.Enabled {
		proxyCert = selfSigned
		if rp.TLS.Cert != "" {
			c, err := load("reverse_proxy.tls", &rp.TLS)
			if err != nil {
				return nil, err
			}
			proxyCert = c
		}
	}
	// Sites without a certificate of their own, and the top-level root,
	// which has no TLS settings, borrow one with its minimum version and
	// key exchanges: the first site's, else the proxy's, else the
	// self-signed one.
	fallback, fallback12, fallbackGroups := first, first12, firstGroups
	if fallback == nil {
		fallback, fallback12, fallbackGroups = proxyCert, rp.TLS.MinVersion == "1.2", rp.TLS.Groups
	}
	if fallback == nil {
		fallback, fallback12, fallbackGroups = selfSigned, false, nil
	}

	var star, dflt *tls.Certificate // the "*" site's, the default site's
	var star12, dflt12 bool
	var starGroups, dfltGroups []tls.CurveID
	for i := range cfg.Sites {
		sc := &cfg.Sites[i]
		cert := certs[i]
		if cert == nil {
			cert = fallback
		}
		if cert == nil {
			continue // nothing to serve it with: its handshakes fail
		}
		d := serverName(sc.Domain)
		v12, groups := sc.TLS.MinVersion == "1.2", sc.TLS.Groups
		if d == "*" {
			star, star12, starGroups = cert, v12, groups
		} else {
			add(d, cert, v12, groups)
		}
		if sc.Default {
			dflt, dflt12, dfltGroups = cert, v12, groups
		}
	}
	var anyRoute bool // a terminating "*" route
	if rp.Enabled {
		v12, groups := rp.TLS.MinVersion == "1.2", rp.TLS.Groups
		for i := range rp.Routes {
			r := &rp.Routes[i]
			if r.Passthrough {
				continue
			}
			d := serverName(r.Domain)
			switch {
			case d == "*":
				anyRoute = true
			case rp.TLS.ACME && !strings.HasPrefix(d, "*."):
				if !t.names.Names(d) {
					add(d, placeholder(d), v12, groups)
				}
			case proxyCert != nil:
				add(d, proxyCert, v12, groups)
			}
		}
	}

	// The default, for names nothing names: a "*" site, the site marked
	// default, the top-level root with the certificate it borrows, a "*"
	// route; none otherwise.
	switch {
	case star != nil:
		t.def = &certFacts{star, star12, starGroups}
	case dflt != nil:
		t.def = &certFacts{dflt, dflt12, dfltGroups}
	case cfg.Root != "":
		t.def = &certFacts{fallback, fallback12, fallbackGroups}
	case anyRoute:
		t.def = &certFacts{proxyCert, rp.TLS.MinVersion == "1.2", rp.TLS.Groups}
		if t.def.cert == nil {
			t.def.cert = fallback
		}
	}
	if t.def != nil && t.def.cert == nil {
		t.def = nil
	}
	if t.def == nil && t.names.Len() == 0 {
		return nil, &config.Error{File: cfg.File(), Key: "sites", Msg: "no certificate to serve TLS with; add [sites.tls] cert and key, or run serve --self-signed"}
	}
	return t, nil
}

// getCertificate is tls.Config.GetCertificate.
// A name whose ACME certificate is not there yet gets none: crypto/tls,
// which has no Certificates to fall back on, answers unrecognized_name.
func (s *certStore) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	t := s.cur.Load()
	c := t.pick(serverName(hello.ServerName))
	if name, ok := t.acme[c]; ok {
		return s.acme.Certificate(hello, name), nil
	}
	return c, nil
}

// serverName normalizes an SNI value or a Host: lowercase, no trailing dot.
func serverName(n string) string { return routing.Normalize(n) }

// pick chooses the certificate for a normalized name: exact, then
// longest wildcard, then the default; nil when nothing serves it.
func (t *certTable) pick(name string) *tls.Certificate {
	if f := t.facts(name); f != nil {
		return f.cert
	}
	return nil
}

// misdirected reports whether a request naming host (normalized:
// lowercase, without port or trailing dot) on a TLS connection whose
// handshake named sniName and settled on version must be answered 421
// Misdirected Request (RFC 9110 §15.5.20), whether a site or a route
// would answer it: the connection's TLS facts are not ones a handshake
// naming host would have had (certTable). Host names nothing the
// engine's TLS serves, or a name with another certificate, or one that
// accepts TLS 1.3 only on a TLS 1.2 connection; or a domain a
// passthrough route relays. Otherwise a client could reach a 1.3-only
// site or route over 1.2, or a site or route under a certificate that is
// not its own, by naming another in SNI. host is tlsHost's: the SNI
// when the request names no host; empty when neither names one. Such a
// request goes to whatever takes unnamed names, the very default whose
// facts its handshake was given (one that names nothing is refused at
// the handshake when nothing takes such names), so it is never
// misdirected: nginx's default server answers it too, and HTTP/1.0
// clients that send no Host and no SNI (openssl s_time, probes) work.
func (s *Server) misdirected(sniName string, version uint16, host []byte) bool {
	if len(host) == 0 {
		return false
	}
	h, sni := string(host), serverName(sniName)
	if s.pass != nil && s.pass.Route(h) != nil && sni != h {
		// A relayed name: its origin answers it, on a connection of
		// its own.
		return true
	}
	if s.certs == nil || h == sni {
		return false // the handshake was for this very name
	}
	t := s.certs.cur.Load()
	fh, fs := t.facts(h), t.facts(sni)
	switch {
	case fh == nil || fs == nil || fh.cert != fs.cert:
		return true
	case version < tls.VersionTLS13 && !fh.v12:
		return true
	case !groupsWithin(fs.groups, fh.groups):
		// The handshake may have settled on a key exchange host's
		// key_exchanges does not allow.
		return true
	}
	// A host without session tickets is not served on a connection that
	// may be a resumption, or hand out tickets for.
	return !s.tickets(h) && s.tickets(sni)
}

// groupsWithin reports whether every key exchange of a (nil: crypto/tls's
// default, all of them) is in b.
func groupsWithin(a, b []tls.CurveID) bool {
	if b == nil {
		return true
	}
	if a == nil {
		return false
	}
	for _, g := range a {
		if !slices.Contains(b, g) {
			return false
		}
	}
	return true
}

// servesName reports whether the engine answers host (normalized) on its
// TLS listener: a passthrough route relays it, or a handshake naming it
// gets a certificate (certTable's rule). An empty host names nothing.
func (s *Server) servesName(host string) bool {
	if host == "" {
		return false
	}
	if s.pass != nil && s.pass.Route(host) != nil {
		return true
	}
	return s.certs != nil && s.certs.cur.Load().pick(host) != nil
}

// selfSignedCert makes an in-memory ECDSA P-256 certificate for trying
// the server out: localhost, the loopback addresses and this host's name.
func selfSignedCert() (*tls.Certificate, error) {
	names := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		names = append(names, h)
	}
	return selfsigned.New("engine self-signed", 30*24*time.Hour, names...)
}
