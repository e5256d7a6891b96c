package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/internal/httpsyntax"
)

// ACME is [acme]: the CA that issues and renews the certificates of
// sites (and proxy domains) with tls.acme = true.
type ACME struct {
	// Email is the account's contact; the CA writes to it about expiring
	// certificates and incidents. Required with tls.acme.
	Email string `toml:"email"`
	// CA is the ACME directory URL (RFC 8555). Zero means Let's Encrypt.
	CA string `toml:"ca"`
	// CARoot is a PEM file of the roots that verify the CA's own HTTPS
	// server, for a private CA. Zero means the system roots.
	CARoot string `toml:"ca_root"`
	// Storage is the directory that keeps the account, the certificates
	// and their keys. Engines sharing it (a fleet) share certificates,
	// coordinated by lock files. Zero means /var/lib/engine/acme.
	Storage string `toml:"storage"`
	// Challenges are the ways the CA may check that the engine answers
	// for a name: "tls-alpn-01" (on the TLS listener, which the CA
	// reaches on port 443) and "http-01" (on [redirect_http], which it
	// reaches on port 80). Zero means both.
	Challenges []string `toml:"challenges"`
	// Agree accepts the CA's terms of service. Required with tls.acme.
	Agree bool `toml:"agree"`
	// Profile asks the CA for a certificate profile (Let's Encrypt:
	// "classic", "tlsserver", "shortlived"). Zero means the CA's default.
	Profile string `toml:"profile"`
	// RenewInterval is how often certificates are checked for renewal
	// (renewed when a third of their life is left, or when the CA's
	// renewal information says). Zero means 10m.
	RenewInterval Duration `toml:"renew_interval"`
	// OCSPInterval is how often OCSP staples are refreshed. Zero means 1h.
	OCSPInterval Duration `toml:"ocsp_interval"`
}

// RedirectHTTP is [redirect_http]: a plain HTTP listener that answers
// every request for a configured name with 308 to its https:// URL, and
// answers the CA's HTTP-01 challenges.
type RedirectHTTP struct {
	// Listen is the TCP address, such as ":80". Empty: no listener.
	Listen string `toml:"listen"`
	// HTTPSPort is the port written in the Location of redirects. Zero
	// means the TLS listener's port (left out when it is 443).
	HTTPSPort int `toml:"https_port"`
}

// LetsEncrypt is the default ACME directory.
const LetsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

// The challenge types the engine answers itself.
const (
	ChallengeTLSALPN = "tls-alpn-01"
	ChallengeHTTP    = "http-01"
)

// ACMEOn reports whether some certificate comes from ACME. Valid after
// Validate.
func (c *Config) ACMEOn() bool { return len(c.ACMENames()) > 0 }

// ACMENames lists the names (lowercase, without a trailing dot) whose
// certificates come from ACME: sites with tls.acme, and with
// [reverse_proxy.tls] acme the domains of terminating routes that no
// site serves. Valid after Validate.
func (c *Config) ACMENames() []string {
	var names []string
	seen := map[string]bool{}
	add := func(d string) {
		d = httpsyntax.NormalizeName(d)
		if !seen[d] && d != "*" && !strings.HasPrefix(d, "*.") {
			seen[d] = true
			names = append(names, d)
		}
	}
	sites := map[string]bool{}
	for i := range c.Sites {
		s := &c.Sites[i]
		sites[httpsyntax.NormalizeName(s.Domain)] = true
		if s.TLS.ACME {
			add(s.Domain)
		}
	}
	if rp := &c.ReverseProxy; rp.Enabled && rp.TLS.ACME {
		for i := range rp.Routes {
			r := &rp.Routes[i]
			if !r.Passthrough && !sites[httpsyntax.NormalizeName(r.Domain)] {
				add(r.Domain)
			}
		}
	}
	return names
}

// HasChallenge reports whether [acme] challenges allows the type.
func (a *ACME) HasChallenge(t string) bool {
	for _, c := range a.Challenges {
		if c == t {
			return true
		}
	}
	return false
}

// validateACME checks [acme] and [redirect_http], and what tls.acme asks
// of them. It runs after the sites and the proxy.
func (c *Config) validateACME(errs *Errors) {
	a := &c.ACME
	var users []string // keys that ask for ACME: "sites[0].tls.acme"
	for i := range c.Sites {
		s := &c.Sites[i]
		if !s.TLS.ACME {
			continue
		}
		key := fmt.Sprintf("sites[%d].tls", i)
		users = append(users, key+".acme")
		if s.TLS.Cert != "" {
			errs.add(c.errAt(key+".acme", "acme = true and cert/key both give %q a certificate; keep one", s.Domain))
		}
		if d := s.Domain; d == "*" || strings.HasPrefix(d, "*.") {
			errs.add(c.errAt(key+".acme", "%q is a wildcard: a CA proves a wildcard only by DNS-01, which the engine does not answer; name the hosts in their own [[sites]], or give this site cert and key", d))
		}
	}
	if rp := &c.ReverseProxy; rp.Enabled && rp.TLS.ACME {
		users = append(users, "reverse_proxy.tls.acme")
		if rp.TLS.Cert != "" {
			errs.add(c.errAt("reverse_proxy.tls.acme", "acme = true and cert/key both give the proxy a certificate; keep one"))
		}
		for i := range rp.Routes {
			r := &rp.Routes[i]
			if !r.Passthrough && (r.Domain == "*" || strings.HasPrefix(r.Domain, "*.")) && !c.certCovers(r.Domain) {
				errs.add(c.errAt(fmt.Sprintf("reverse_proxy.routes[%d].domain", i), "%q is a wildcard: [reverse_proxy.tls] acme gets a certificate per route domain, and a CA proves a wildcard only by DNS-01, which the engine does not answer; name the hosts, or set a site with cert and key for it", r.Domain))
			}
		}
	}

	if a.CA == "" {
		a.CA = LetsEncrypt
	} else if u, err := url.Parse(a.CA); err != nil || u.Scheme != "https" || u.Host == "" {
		errs.add(c.errAt("acme.ca", "%q is not an https:// URL; expected an ACME directory such as %q", a.CA, LetsEncrypt))
	}
	if a.CARoot != "" {
		a.CARoot = c.resolvePath("acme.ca_root", a.CARoot)
		if _, err := os.Stat(a.CARoot); err != nil {
			errs.add(c.errAt("acme.ca_root", "cannot read %q: %v; expected a PEM file of the roots that sign the CA's HTTPS certificate", a.CARoot, unwrapPathError(err)))
		}
	}
	if a.Storage == "" {
		a.Storage = "/var/lib/engine/acme"
	} else {
		a.Storage = c.resolvePath("acme.storage", a.Storage)
	}
	_, chalWritten := c.src.lines["acme.challenges"]
	if len(a.Challenges) == 0 {
		if chalWritten {
			errs.add(c.errAt("acme.challenges", "empty; expected [\"tls-alpn-01\", \"http-01\"] or one of them"))
		}
		a.Challenges = []string{ChallengeTLSALPN}
		if c.RedirectHTTP.Listen != "" {
			a.Challenges = append(a.Challenges, ChallengeHTTP)
		}
	}
	for i, ch := range a.Challenges {
		switch ch {
		case ChallengeTLSALPN, ChallengeHTTP:
		case "dns-01":
			errs.add(c.errAt("acme.challenges", "entry %d: dns-01 is not answered by the engine (it needs a DNS provider's API); expected \"tls-alpn-01\" or \"http-01\"", i))
		default:
			errs.add(c.errAt("acme.challenges", "entry %d (%q) is not a challenge type; expected \"tls-alpn-01\" or \"http-01\"", i, ch))
		}
	}
	if a.RenewInterval == 0 {
		a.RenewInterval = Duration(10 * time.Minute)
	} else if a.RenewInterval < Duration(time.Second) {
		errs.add(c.errAt("acme.renew_interval", "%v is too short; expected 1s or more (the default is 10m)", a.RenewInterval.D()))
	}
	if a.OCSPInterval == 0 {
		a.OCSPInterval = Duration(time.Hour)
	} else if a.OCSPInterval < Duration(time.Second) {
		errs.add(c.errAt("acme.ocsp_interval", "%v is too short; expected 1s or more (the default is 1h)", a.OCSPInterval.D()))
	}
	if a.Email != "" && (!strings.Contains(a.Email, "@") || strings.ContainsAny(a.Email, " \t,;<>")) {
		errs.add(c.errAt("acme.email", "%q is not an email address; expected one such as \"ops@example.com\"", a.Email))
	}
	if len(users) > 0 {
		// Name the key that is missing, at the line of [acme] when it
		// is written, else at the line that asks for ACME.
		at := func(key string) *Error {
			e := c.errAt(key, "")
			if e.Line == 0 && e.Key == key {
				e.Line = c.src.lines[users[0]]
			}
			return e
		}
		if !a.Agree {
			e := at("acme.agree")
			e.Msg = fmt.Sprintf("%s = true needs the CA's terms of service accepted: read them (the directory %s links them) and set agree = true in [acme]", users[0], a.CA)
			errs.add(e)
		}
		if a.Email == "" {
			e := at("acme.email")
			e.Msg = fmt.Sprintf("%s = true needs a contact for the CA's account: set email = \"ops@example.com\" in [acme]", users[0])
			errs.add(e)
		}
		if a.HasChallenge(ChallengeHTTP) && c.RedirectHTTP.Listen == "" {
			errs.add(c.errAt("acme.challenges", "http-01 is answered on the plain listener of [redirect_http], which is not configured; add [redirect_http] listen = \":80\", or keep only \"tls-alpn-01\""))
		}
	}

	r := &c.RedirectHTTP
	_, written := c.src.lines["redirect_http"]
	if r.Listen == "" {
		if written || r.HTTPSPort != 0 {
			errs.add(c.errAt("redirect_http.listen", "missing; expected the plain HTTP address to redirect from, such as \":80\""))
		}
		return
	}
	if !c.HasTLS() {
		errs.add(c.errAt("redirect_http", "redirects to https://, and the engine serves no TLS; give a site a certificate (cert and key, or acme = true)"))
	}
	host, port, err := net.SplitHostPort(r.Listen)
	p, perr := strconv.Atoi(port)
	switch {
	case err != nil:
		errs.add(c.errAt("redirect_http.listen", "%q is not an address; expected host:port such as \":80\"", r.Listen))
	case perr != nil || p < 0 || p > 65535:
		errs.add(c.errAt("redirect_http.listen", "port %q is not a number from 0 to 65535", port))
	case host != "" && net.ParseIP(host) == nil && host != "localhost":
		errs.add(c.errAt("redirect_http.listen", "host %q is not an IP address; expected an address such as 0.0.0.0, [::] or 127.0.0.1", host))
	case p != 0 && samePort(r.Listen, c.Listen):
		errs.add(c.errAt("redirect_http.listen", "%q is the port of listen (%q); the redirect listener needs a port of its own, such as :80", r.Listen, c.Listen))
	}
	if r.HTTPSPort < 0 || r.HTTPSPort > 65535 {
		errs.add(c.errAt("redirect_http.https_port", "%d is not a port; expected 1 to 65535, or 0 for the port of listen", r.HTTPSPort))
	}
}

// samePort reports whether two host:port addresses name the same port.
func samePort(a, b string) bool {
	_, pa, err1 := net.SplitHostPort(a)
	_, pb, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && pa == pb
}

// RestartChanges lists the top-level keys and tables ("limits", "sites")
// whose values differ between c and next, leaving out where certificates
// come from (tls cert, key and acme of sites and of [reverse_proxy]):
// what a reload (SIGHUP) cannot apply to a running server.
func (c *Config) RestartChanges(next *Config) []string {
	a, b := c.certsBlanked(), next.certsBlanked()
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	var out []string
	for i := 0; i < va.NumField(); i++ {
		f := va.Type().Field(i)
		name := strings.Split(f.Tag.Get("toml"), ",")[0]
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	return out
}

// certsBlanked returns a copy of c without the certificate sources.
func (c *Config) certsBlanked() *Config {
	x := *c
	x.Sites = append([]Site(nil), c.Sites...)
	for i := range x.Sites {
		t := &x.Sites[i].TLS
		t.Cert, t.Key, t.ACME = "", "", false
	}
	x.ReverseProxy.TLS.Cert, x.ReverseProxy.TLS.Key, x.ReverseProxy.TLS.ACME = "", "", false
	return &x
}
