package engine

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/internal/selfsigned"
)

// certTable chooses a certificate by SNI: exact name, then wildcard, then
// the default (the default site's, or the first site's).
type certTable struct {
	exact     map[string]*tls.Certificate
	wildcards []wildcardCert
	def       *tls.Certificate
	// TLS 1.2: the names (and wildcard suffixes) of sites with
	// min_version = "1.2", and whether the default site is one.
	v12   map[string]bool
	def12 bool
	// Key exchanges (key_exchanges resolved), keyed as v12 is, and the
	// default site's; nil means crypto/tls's default order.
	groups    map[string][]tls.CurveID
	defGroups []tls.CurveID
	// acme maps the placeholder certificate of each ACME name to the
	// name: the handshake asks the ACME manager for the real one.
	acme map[*tls.Certificate]string
}

type wildcardCert struct {
	suffix string // ".example.com"
	cert   *tls.Certificate
}

// allow12 reports whether any site accepts TLS 1.2.
func (t *certTable) allow12() bool { return t.def12 || len(t.v12) > 0 }

// allows12 reports whether the site a client names in SNI accepts TLS 1.2.
func (t *certTable) allows12(serverName string) bool {
	name := strings.ToLower(strings.TrimSuffix(serverName, "."))
	if v, ok := t.v12[name]; ok {
		return v
	}
	if _, ok := t.exact[name]; ok {
		return false
	}
	for _, w := range t.wildcards {
		if len(name) > len(w.suffix) && strings.HasSuffix(name, w.suffix) {
			return t.v12[w.suffix]
		}
	}
	return t.def12
}

// keyExchanges is the key exchanges of the site a client names in SNI,
// chosen as its certificate is (exact, wildcard, default); nil means
// crypto/tls's default order.
func (t *certTable) keyExchanges(sni string) []tls.CurveID {
	name := serverName(sni)
	if g, ok := t.groups[name]; ok {
		return g
	}
	if _, ok := t.exact[name]; ok {
		return nil
	}
	for _, w := range t.wildcards {
		if len(name) > len(w.suffix) && strings.HasSuffix(name, w.suffix) {
			return t.groups[w.suffix]
		}
	}
	return t.defGroups
}

// certStore holds the current table; SIGHUP swaps in a reloaded one, and
// handshakes already running keep the certificate they picked.
type certStore struct {
	cur        atomic.Pointer[certTable]
	selfSigned *tls.Certificate // when serve --self-signed made one
	acme       *acmeManager     // nil without ACME names

	reloadMu sync.Mutex     // serializes reloads
	cfg      *config.Config // guarded by reloadMu: the configuration cur was made from; nil: the server's
}

// loadCertTable reads every site's PEM files. Errors name the file and
// the config key.
func loadCertTable(cfg *config.Config, selfSigned *tls.Certificate) (*certTable, error) {
	t := &certTable{exact: map[string]*tls.Certificate{}, v12: map[string]bool{}, groups: map[string][]tls.CurveID{}, acme: map[*tls.Certificate]string{}}
	loaded := map[string]*tls.Certificate{} // cert path -> parsed, so sites sharing files share it
	placeholder := func(domain string) *tls.Certificate {
		c := new(tls.Certificate)
		t.acme[c] = serverName(domain)
		return c
	}
	for i := range cfg.Sites {
		sc := &cfg.Sites[i]
		var cert *tls.Certificate
		switch {
		case sc.TLS.ACME:
			cert = placeholder(sc.Domain)
		case sc.TLS.Cert != "":
			cert = loaded[sc.TLS.Cert+"\x00"+sc.TLS.Key]
			if cert == nil {
				c, err := tls.LoadX509KeyPair(sc.TLS.Cert, sc.TLS.Key)
				if err != nil {
					return nil, &config.Error{File: cfg.File(), Line: cfg.Line(fmt.Sprintf("sites[%d].tls.cert", i)),
						Key: fmt.Sprintf("sites[%d].tls", i),
						Msg: fmt.Sprintf("cannot load certificate %s with key %s: %v", sc.TLS.Cert, sc.TLS.Key, err)}
				}
				cert = &c
				loaded[sc.TLS.Cert+"\x00"+sc.TLS.Key] = cert
			}
		case selfSigned != nil:
			cert = selfSigned
		default:
			continue
		}
		d := strings.ToLower(strings.TrimSuffix(sc.Domain, "."))
		v12, groups := sc.TLS.MinVersion == "1.2", sc.TLS.Groups
		switch {
		case d == "*":
		case strings.HasPrefix(d, "*."):
			t.wildcards = append(t.wildcards, wildcardCert{suffix: d[1:], cert: cert})
			t.v12[d[1:]] = v12
			t.groups[d[1:]] = groups
		default:
			t.exact[d] = cert
			t.v12[d] = v12
			t.groups[d] = groups
		}
		if t.def == nil || sc.Default || d == "*" {
			t.def = cert
			t.def12, t.defGroups = v12, groups
		}
	}
	if rp := &cfg.ReverseProxy; rp.Enabled {
		// The proxy's certificate answers for the route domains that no
		// site's certificate names.
		cert := selfSigned
		if rp.TLS.Cert != "" {
			c, err := tls.LoadX509KeyPair(rp.TLS.Cert, rp.TLS.Key)
			if err != nil {
				return nil, &config.Error{File: cfg.File(), Line: cfg.Line("reverse_proxy.tls.cert"), Key: "reverse_proxy.tls",
					Msg: fmt.Sprintf("cannot load certificate %s with key %s: %v", rp.TLS.Cert, rp.TLS.Key, err)}
			}
			cert = &c
		}
		v12, groups := rp.TLS.MinVersion == "1.2", rp.TLS.Groups
		for i := range rp.Routes {
			d := strings.ToLower(strings.TrimSuffix(rp.Routes[i].Domain, "."))
			if rp.TLS.ACME && d != "*" && !strings.HasPrefix(d, "*.") && !rp.Routes[i].Passthrough && t.exact[d] == nil {
				t.exact[d] = placeholder(d)
				t.v12[d] = v12
				t.groups[d] = groups
				if t.def == nil {
					t.def, t.def12, t.defGroups = t.exact[d], v12, groups
				}
				continue
			}
			if cert == nil {
				continue
			}
			switch {
			case d == "*":
				if t.def == nil {
					t.def, t.def12, t.defGroups = cert, v12, groups
				}
			case strings.HasPrefix(d, "*."):
				if _, ok := t.v12[d[1:]]; !ok {
					t.wildcards = append(t.wildcards, wildcardCert{suffix: d[1:], cert: cert})
					t.v12[d[1:]] = v12
					t.groups[d[1:]] = groups
				}
			default:
				if t.exact[d] == nil {
					t.exact[d] = cert
					t.v12[d] = v12
					t.groups[d] = groups
				}
			}
		}
		if t.def == nil && cert != nil {
			t.def, t.def12, t.defGroups = cert, v12, groups
		}
	}
	if t.def == nil {
		t.def = selfSigned
	}
	if t.def == nil {
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
		return s.acme.certificate(hello, name), nil
	}
	return c, nil
}

// serverName normalizes an SNI value or a Host: lowercase, no trailing dot.
func serverName(n string) string { return strings.ToLower(strings.TrimSuffix(n, ".")) }

// pick chooses the certificate for a normalized name: exact, then
// wildcard, then the default.
func (t *certTable) pick(name string) *tls.Certificate {
	if c := t.exact[name]; c != nil {
		return c
	}
	for _, w := range t.wildcards {
		if len(name) > len(w.suffix) && strings.HasSuffix(name, w.suffix) {
			return w.cert
		}
	}
	return t.def
}

// misdirected reports whether a request naming host (normalized as
// siteTable.lookup leaves it: lowercase, without port or trailing dot) on
// a TLS connection whose handshake named sniName and settled on version
// must be answered 421 Misdirected Request (RFC 9110 §15.5.20): the Host
// names a site with another TLS policy than the one the handshake was
// made for, another certificate, or TLS 1.3 only on a TLS 1.2 connection,
// or a domain a passthrough route relays. Otherwise a client
// could reach a 1.3-only site over 1.2, or a site under a certificate that
// is not its own, by naming another site in SNI. A request without a Host
// is not judged.
func (s *Server) misdirected(sniName string, version uint16, host []byte) bool {
	if s.pass != nil && len(host) > 0 && s.pass.route(string(host)) != nil && serverName(sniName) != string(host) {
		// A relayed name: its origin answers it, on a connection of
		// its own.
		return true
	}
	if s.certs == nil || len(host) == 0 || len(s.sites.all) == 1 {
		return false // one site has one policy (and lookup leaves host unnormalized, unless passthrough routes exist)
	}
	sni := serverName(sniName)
	if string(host) == sni {
		return false
	}
	t := s.certs.cur.Load()
	h := string(host)
	if t.pick(h) != t.pick(sni) {
		return true
	}
	return version < tls.VersionTLS13 && !t.allows12(h)
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
