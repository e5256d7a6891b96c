package config

import (
	"fmt"
	"mime"
	"net/netip"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"
)

// Policy is what the engine does with the requests of one path prefix of
// a site ([[sites.paths]]) or of one proxy route: who may have them, and
// what their responses say. Every key is optional.
type Policy struct {
	// Auth is who may have the responses: "none" (the zero value),
	// "signed" (an expiring URL signed with a [signing] key), "bearer"
	// (Authorization: Bearer, a token listed in Credentials), "basic"
	// (Authorization: Basic, a user and password listed in Credentials)
	// or "forward" (an HTTP endpoint, ForwardAuth, answers for each).
	Auth string `toml:"auth"`
	// Realm names the protected space in WWW-Authenticate (basic and
	// bearer). Zero means the site's domain, or "engine".
	Realm string `toml:"realm"`
	// Credentials is the file of users or tokens for basic and bearer,
	// read at start and again on SIGHUP (engine reload). Basic: one
	// "user:hash" a line, the hash bcrypt ($2a$, $2b$, $2y$, as
	// htpasswd -B writes it) or argon2id ($argon2id$v=19$...). Bearer:
	// one "name:sha256:HEX" a line, HEX the SHA-256 of the token, so the
	// file holds no token itself. "#" starts a comment.
	Credentials string `toml:"credentials"`
	// ForwardAuth is the endpoint asked, for auth = "forward".
	ForwardAuth ForwardAuth `toml:"forward_auth"`
	// Allow and Deny are client addresses or prefixes ("10.0.0.0/8",
	// "2001:db8::/32", "192.0.2.7"). With Allow, an address outside
	// every entry is refused (403); an address in Deny is refused
	// whatever Allow says. The address is the connection's peer, or,
	// when the peer is in [reverse_proxy] trusted_proxies, the last
	// address of X-Forwarded-For that is not.
	Allow []string `toml:"allow"`
	Deny  []string `toml:"deny"`
	// SetHeaders sets response fields, replacing the engine's own value
	// of the same name when it has one (Cache-Control, Content-Type,
	// Server, ...); AddHeaders adds a field line; RemoveHeaders drops
	// fields (Server, say). Fields that tell the client how to read the
	// body or whether it is whole (Content-Length, Content-Range,
	// Content-Encoding, Transfer-Encoding, ETag, Repr-Digest, Vary,
	// Last-Modified, Accept-Ranges, Date, and the connection's own
	// fields) are the engine's: naming one is a configuration error.
	SetHeaders    map[string]string `toml:"set_headers"`
	AddHeaders    map[string]string `toml:"add_headers"`
	RemoveHeaders []string          `toml:"remove_headers"`
	// HeadersOnErrors applies SetHeaders and AddHeaders to the engine's
	// own error responses (4xx, 5xx) too. Zero (false): as nginx's
	// add_header without "always", only to 2xx and 3xx responses.
	HeadersOnErrors bool `toml:"headers_on_errors"`
	// CacheControl is the Cache-Control of file responses (200, 206,
	// 304, listings). Zero means "no-cache" (any cache may keep a file,
	// and asks again before each use: a 304 against the digest ETag), or
	// "private, no-cache" when Auth is not "none" or addresses are
	// ruled. "off" sends none. Content-addressed paths, whose bytes never
	// change under a name, want "public, max-age=31536000, immutable".
	CacheControl string `toml:"cache_control"`
	// CORSOrigins are the origins ("https://app.example.com") whose
	// pages may read these responses; "*" is any. A request whose Origin
	// is one of them gets Access-Control-Allow-Origin, and a preflight
	// (OPTIONS with Access-Control-Request-Method) is answered 204.
	CORSOrigins []string `toml:"cors_origins"`
	// CORSMethods are the methods preflights allow. Zero means GET and
	// HEAD (a file site's), or GET, HEAD, POST, PUT, PATCH and DELETE on
	// a proxy route.
	CORSMethods []string `toml:"cors_methods"`
	// CORSHeaders are the request fields preflights allow, besides the
	// ones every download needs (Range, If-None-Match, If-Match,
	// If-Modified-Since, If-Range, Want-Repr-Digest, Authorization).
	CORSHeaders []string `toml:"cors_headers"`
	// CORSExposeHeaders are the response fields a page may read besides
	// the safelisted ones. Zero means Content-Length, Content-Range,
	// Accept-Ranges, ETag, Repr-Digest and Link, so a page can check a
	// download against its digest.
	CORSExposeHeaders []string `toml:"cors_expose_headers"`
	// CORSCredentials lets pages send cookies and Authorization
	// (Access-Control-Allow-Credentials); it cannot go with "*".
	CORSCredentials bool `toml:"cors_credentials"`
	// CORSMaxAge is how long a browser may keep a preflight's answer.
	// Zero means 10m.
	CORSMaxAge Duration `toml:"cors_max_age"`
	// ContentDisposition maps file name patterns ("*.safetensors",
	// path.Match syntax, against the file's name) to "attachment" or
	// "inline"; the engine adds the file name (filename and filename*).
	ContentDisposition map[string]string `toml:"content_disposition"`
	// Types maps file name extensions (".safetensors") to the media
	// type their files are served as, over the engine's own table.
	Types map[string]string `toml:"types"`

	// AllowNets and DenyNets are Allow and Deny parsed; Types' keys
	// lowercased. Not from TOML.
	AllowNets []netip.Prefix `toml:"-"`
	DenyNets  []netip.Prefix `toml:"-"`
}

// PathPolicy is a Policy for the requests of a site whose path starts
// with Prefix; of a site's paths, the longest prefix that matches wins
// whole (nothing is merged from shorter ones).
type PathPolicy struct {
	// Prefix is matched against the path as the site reads it:
	// percent-decoded, without "." and ".." segments or repeated slashes.
	// It starts with "/"; "/" is every path of the site.
	Prefix string `toml:"prefix"`
	Policy
}

// ForwardAuth asks an HTTP endpoint whether a request may pass (nginx's
// auth_request, Caddy's forward_auth). The endpoint gets a GET with the
// request's Authorization, Cookie, and X-Forwarded-Method, -Proto, -Host,
// -Uri and -For; a 2xx lets the request pass, 401 (with its
// WWW-Authenticate) and 403 are passed on to the client, and so is a
// redirect (301, 302, 303, 307, 308, with its Location: a login page);
// anything else, or no answer within Timeout, is 503.
type ForwardAuth struct {
	// URL is the endpoint: "http://127.0.0.1:9000/auth" (http or https).
	URL string `toml:"url"`
	// Timeout bounds one answer. Zero means 5s.
	Timeout Duration `toml:"timeout"`
	// Cache keeps each answer this long, keyed by the credentials the
	// request carried (Authorization and Cookie) and its host and path
	// prefix. Zero means 10s; "0s" asks for every request.
	Cache *Duration `toml:"cache"`
}

// Signing holds the keys that sign and check expiring URLs (auth =
// "signed"). `engine sign` prints such URLs; the README gives the format.
type Signing struct {
	// Keys maps a key id (letters, digits, "-", "_", ".") to the file
	// that holds its secret: at least 32 bytes, read at start and again
	// on SIGHUP, not readable by other users. Several at once let keys
	// rotate: sign with the new one while URLs signed with the old one
	// still run out.
	Keys map[string]string `toml:"keys"`
}

// Gated reports whether p restricts who may have the responses.
func (p *Policy) Gated() bool {
	return p.Auth != "" && p.Auth != "none" || len(p.AllowNets) > 0 || len(p.DenyNets) > 0
}

// ownedFields are the response fields the engine alone writes: they say
// how to read the body and whether it is whole, or belong to the
// connection. A policy that set them could make a response lie.
var ownedFields = map[string]bool{
	"content-length": true, "content-range": true, "content-encoding": true,
	"transfer-encoding": true, "etag": true, "repr-digest": true, "content-digest": true,
	"vary": true, "last-modified": true, "accept-ranges": true, "date": true,
	"connection": true, "keep-alive": true, "upgrade": true, "te": true, "trailer": true,
	"proxy-connection": true, "alt-svc": true,
}

// OwnedField reports whether the engine alone writes the field (any
// case).
func OwnedField(name string) bool { return ownedFields[strings.ToLower(name)] }

func (c *Config) validateSigning(errs *Errors) {
	ids := make([]string, 0, len(c.Signing.Keys))
	for id := range c.Signing.Keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		key := "signing.keys." + id
		if !validKeyID(id) {
			errs.add(c.errAt(key, "%q is not a key id; expected 1 to 64 letters, digits, \"-\", \"_\" or \".\"", id))
			continue
		}
		p := c.resolvePath(key, c.Signing.Keys[id])
		c.Signing.Keys[id] = p
		if _, err := ReadSecret(p); err != nil {
			errs.add(c.errAt(key, "%v", err))
		}
	}
}

// MinSecret is the shortest signing secret accepted, in bytes.
const MinSecret = 32

// ReadSecret reads a signing key's file: its bytes without surrounding
// white space, at least MinSecret of them, from a regular file other
// users cannot read.
func ReadSecret(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read %q: %v; expected a file holding the secret (make one with: head -c 32 /dev/urandom | base64 > %s; chmod 600 %s)", name, unwrapPathError(err), name, name)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%q is not a regular file", name)
	}
	if st.Mode().Perm()&0o004 != 0 {
		return nil, fmt.Errorf("%q is readable by every user (mode %04o): anyone on the machine could sign URLs; chmod 600 %s", name, st.Mode().Perm(), name)
	}
	if st.Size() > 4096 {
		return nil, fmt.Errorf("%q is %d bytes; a secret is expected (32 to 4096 bytes)", name, st.Size())
	}
	b := make([]byte, st.Size())
	n, _ := f.Read(b)
	b = []byte(strings.TrimSpace(string(b[:n])))
	if len(b) < MinSecret {
		return nil, fmt.Errorf("%q holds %d bytes; a secret needs at least %d (make one with: head -c 32 /dev/urandom | base64 > %s)", name, len(b), MinSecret, name)
	}
	return b, nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// validatePaths checks a site's [[sites.paths]]; key is the site's
// ("sites[0]").
func (c *Config) validatePaths(key string, paths []PathPolicy, errs *Errors) {
	seen := map[string]int{}
	for i := range paths {
		p := &paths[i]
		k := fmt.Sprintf("%s.paths[%d]", key, i)
		switch {
		case p.Prefix == "":
			errs.add(c.errAt(k, "prefix is missing; expected a path such as \"/gated/\""))
		case !NormalPath(p.Prefix):
			errs.add(c.errAt(k+".prefix", "%q is not a path as the site reads it; expected one starting with \"/\", without \"%%\", \"//\", or \".\" and \"..\" segments", p.Prefix))
		default:
			if j, dup := seen[p.Prefix]; dup {
				errs.add(c.errAt(k+".prefix", "%q is already the prefix of %s.paths[%d]; each prefix may appear once a site", p.Prefix, key, j))
			}
			seen[p.Prefix] = i
		}
		c.validatePolicy(k, &p.Policy, false, errs)
	}
}

// NormalPath reports whether p is a path in the form a site matches and
// signs: starting with "/", no percent-encoding, no empty, "." or ".."
// segments (a trailing "/" is allowed).
func NormalPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "%?#\x00") {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "." || s == ".." || s == "" && i != len(segs)-1 {
			return false
		}
	}
	return true
}

// validatePolicy checks one Policy at key ("sites[0].paths[1]" or
// "reverse_proxy.routes[2]"); proxied says it is a proxy route's.
func (c *Config) validatePolicy(key string, p *Policy, proxied bool, errs *Errors) {
	switch p.Auth {
	case "", "none":
		p.Auth = "none"
	case "signed":
		if len(c.Signing.Keys) == 0 {
			errs.add(c.errAt(key+".auth", "\"signed\" needs a key to check signatures with; add [signing] keys = { k1 = \"/etc/engine/keys/k1\" }"))
		}
	case "basic", "bearer":
		if p.Credentials == "" {
			errs.add(c.errAt(key+".auth", "%q needs credentials = \"FILE\" (the users or tokens it accepts)", p.Auth))
		}
	case "forward":
		if p.ForwardAuth.URL == "" {
			errs.add(c.errAt(key+".auth", "\"forward\" needs forward_auth = { url = \"http://127.0.0.1:9000/auth\" }"))
		}
	default:
		errs.add(c.errAt(key+".auth", "%q is not a choice; expected \"none\", \"signed\", \"bearer\", \"basic\" or \"forward\"", p.Auth))
	}
	if p.Credentials != "" {
		if p.Auth != "basic" && p.Auth != "bearer" {
			errs.add(c.errAt(key+".credentials", "is read only with auth = \"basic\" or \"bearer\""))
		}
		p.Credentials = c.resolvePath(key+".credentials", p.Credentials)
		if _, err := os.Stat(p.Credentials); err != nil {
			errs.add(c.errAt(key+".credentials", "cannot read %q: %v", p.Credentials, unwrapPathError(err)))
		}
	}
	if fa := &p.ForwardAuth; fa.URL != "" {
		if p.Auth != "forward" {
			errs.add(c.errAt(key+".forward_auth", "is asked only with auth = \"forward\""))
		}
		u, err := url.Parse(fa.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs.add(c.errAt(key+".forward_auth.url", "%q is not an http or https URL; expected one such as \"http://127.0.0.1:9000/auth\"", fa.URL))
		}
		if fa.Timeout == 0 {
			fa.Timeout = Duration(5e9)
		}
		if fa.Cache == nil {
			d := Duration(10e9)
			fa.Cache = &d
		}
	}
	p.AllowNets = c.parseNets(key+".allow", p.Allow, errs)
	p.DenyNets = c.parseNets(key+".deny", p.Deny, errs)
	for _, m := range []struct {
		name   string
		fields map[string]string
	}{{"set_headers", p.SetHeaders}, {"add_headers", p.AddHeaders}} {
		for name, v := range m.fields {
			c.checkField(key+"."+m.name+"."+name, name, errs)
			if strings.ContainsAny(v, "\r\n\x00") {
				errs.add(c.errAt(key+"."+m.name+"."+name, "the value holds a line break or NUL; a field value is one line"))
			}
		}
	}
	for _, name := range p.RemoveHeaders {
		c.checkField(key+".remove_headers", name, errs)
	}
	if strings.ContainsAny(p.CacheControl, "\r\n\x00") {
		errs.add(c.errAt(key+".cache_control", "the value holds a line break or NUL"))
	}
	any := false
	for _, o := range p.CORSOrigins {
		if o == "*" {
			any = true
			continue
		}
		if !validOrigin(o) {
			errs.add(c.errAt(key+".cors_origins", "%q is not an origin; expected \"*\" or one such as \"https://app.example.com\" (scheme, host and port; no path)", o))
		}
	}
	if any && p.CORSCredentials {
		errs.add(c.errAt(key+".cors_credentials", "browsers refuse credentials with the origin \"*\"; list the origins"))
	}
	if len(p.CORSMethods) == 0 {
		p.CORSMethods = []string{"GET", "HEAD"}
		if proxied {
			p.CORSMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
		}
	}
	for _, list := range []struct {
		name string
		v    []string
	}{{"cors_methods", p.CORSMethods}, {"cors_headers", p.CORSHeaders}, {"cors_expose_headers", p.CORSExposeHeaders}} {
		for _, t := range list.v {
			if !validToken(t) {
				errs.add(c.errAt(key+"."+list.name, "%q is not a method or field name", t))
			}
		}
	}
	if p.CORSMaxAge == 0 {
		p.CORSMaxAge = Duration(600e9)
	}
	for pat, v := range p.ContentDisposition {
		if _, err := path.Match(pat, ""); err != nil || strings.Contains(pat, "/") {
			errs.add(c.errAt(key+".content_disposition."+pat, "%q is not a file name pattern; expected one such as \"*.safetensors\"", pat))
		}
		if v != "attachment" && v != "inline" {
			errs.add(c.errAt(key+".content_disposition."+pat, "%q is not a disposition; expected \"attachment\" or \"inline\"", v))
		}
	}
	if len(p.Types) > 0 {
		types := make(map[string]string, len(p.Types))
		for ext, t := range p.Types {
			if !strings.HasPrefix(ext, ".") || len(ext) < 2 || strings.ContainsAny(ext, "/ ") {
				errs.add(c.errAt(key+".types."+ext, "%q is not an extension; expected one such as \".safetensors\"", ext))
			}
			if _, _, err := mime.ParseMediaType(t); err != nil || strings.ContainsAny(t, "\r\n") {
				errs.add(c.errAt(key+".types."+ext, "%q is not a media type; expected one such as \"application/octet-stream\"", t))
			}
			types[strings.ToLower(ext)] = t
		}
		p.Types = types
	}
}

// checkField refuses a field name a policy may not set or remove.
func (c *Config) checkField(key, name string, errs *Errors) {
	switch {
	case !validToken(name):
		errs.add(c.errAt(key, "%q is not a field name", name))
	case OwnedField(name):
		errs.add(c.errAt(key, "%s is the engine's own field: it says how to read the body or whether it is whole, and a policy may not change it", name))
	case strings.HasPrefix(strings.ToLower(name), "access-control-"):
		errs.add(c.errAt(key, "%s is written by the CORS keys (cors_origins, cors_methods, ...); use those", name))
	}
}

func (c *Config) parseNets(key string, list []string, errs *Errors) []netip.Prefix {
	var nets []netip.Prefix
	for i, s := range list {
		p, err := ParsePrefix(s)
		if err != nil {
			errs.add(c.errAt(key, "entry %d (%q) is not an address or prefix; expected one such as \"10.0.0.0/8\", \"2001:db8::/32\" or \"192.0.2.7\"", i, s))
			continue
		}
		nets = append(nets, p)
	}
	return nets
}

// ParsePrefix reads an address ("192.0.2.7", a /32) or a prefix
// ("10.0.0.0/8"), IPv4-mapped IPv6 as IPv4.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return p, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func validOrigin(o string) bool {
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil && o == u.Scheme+"://"+u.Host
}

// validToken reports whether s is an HTTP token (a field name or method).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b <= ' ' || b >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", b) >= 0 {
			return false
		}
	}
	return true
}
