// Package policy decides who may have a response and what its header
// says beyond what the engine itself writes: the [[sites.paths]] and
// proxy-route keys of the configuration (auth, address rules, response
// fields, CORS), compiled once, matched per request by the longest path
// prefix, and checked before any file is opened.
//
// What needs a secret (signing keys, credentials) is read from files at
// start and again on reload, and swapped in whole; a request sees one
// set or the other.
package policy

import (
	"bytes"
	"net/netip"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/mediaship/engine/engine/config"
)

// Auth is how a path's requests prove they may have it.
type Auth uint8

const (
	AuthNone Auth = iota
	AuthSigned
	AuthBearer
	AuthBasic
	AuthForward
)

var authNames = map[string]Auth{"none": AuthNone, "signed": AuthSigned, "bearer": AuthBearer, "basic": AuthBasic, "forward": AuthForward}

// Path is the compiled policy of one prefix (or of a proxy route).
// Immutable once built.
type Path struct {
	Prefix string
	Auth   Auth
	Realm  string
	// The credentials of basic and bearer, read from credFile by
	// Secrets (and again on reload).
	credFile string
	creds    atomic.Pointer[Credentials]
	fwd      *forwarder // auth = "forward"
	allow    []netip.Prefix
	deny     []netip.Prefix

	// Response fields.
	proxied      bool // a proxy route's: the upstream's fields pass through it
	gated        bool
	cacheControl string // "" for none
	sets         []field
	adds         []field
	removes      map[string]bool // lowercase names of remove_headers
	setNames     map[string]bool // lowercase names of set_headers
	// The same for the fields the engine writes itself (ownBit), as
	// bits: Omits runs for each of them on every response.
	removesOwn, setsOwn uint8
	errorsToo           bool
	disposition         []dispRule
	types               map[string]string
	hsts                string

	// CORS; cors false when no origin is allowed.
	cors        bool
	anyOrigin   bool
	origins     map[string]bool
	credentials bool
	allowMethod string // Access-Control-Allow-Methods
	allowHeader string
	expose      string
	maxAge      string
	methods     map[string]bool
	headers     map[string]bool // lowercase
}

type field struct{ lower, name, value string }

type dispRule struct{ pattern, kind string }

// defaultCORSHeaders are the request fields a download from a page needs.
var defaultCORSHeaders = []string{"Range", "If-Range", "If-None-Match", "If-Match", "If-Modified-Since", "Want-Repr-Digest", "Authorization"}

var defaultExpose = []string{"Content-Length", "Content-Range", "Accept-Ranges", "ETag", "Repr-Digest", "Link"}

// Compile builds the Path of p for prefix; hsts is the site's value (""
// for none or a proxy route), realm the default realm.
func Compile(prefix string, p *config.Policy, hsts, realm string) *Path {
	c := &Path{Prefix: prefix, Auth: authNames[p.Auth], Realm: p.Realm, allow: p.AllowNets, deny: p.DenyNets,
		gated: p.Gated(), errorsToo: p.HeadersOnErrors, types: p.Types, hsts: hsts}
	switch c.Auth {
	case AuthBasic, AuthBearer:
		c.credFile = p.Credentials
	case AuthForward:
		c.fwd = newForwarder(&p.ForwardAuth)
	}
	if c.Realm == "" {
		c.Realm = realm
	}
	switch cc := p.CacheControl; {
	case cc == "off":
	case cc != "":
		c.cacheControl = cc
	case c.gated:
		c.cacheControl = "private, no-cache"
	default:
		c.cacheControl = "no-cache"
	}
	c.removes, c.setNames = map[string]bool{}, map[string]bool{}
	c.sets = fieldsOf(p.SetHeaders)
	c.adds = fieldsOf(p.AddHeaders)
	for _, f := range c.sets {
		c.setNames[f.lower] = true
		c.setsOwn |= ownBit(f.lower)
	}
	for _, n := range p.RemoveHeaders {
		c.removes[strings.ToLower(n)] = true
		c.removesOwn |= ownBit(strings.ToLower(n))
	}
	pats := make([]string, 0, len(p.ContentDisposition))
	for pat := range p.ContentDisposition {
		pats = append(pats, pat)
	}
	sort.Strings(pats)
	for _, pat := range pats {
		c.disposition = append(c.disposition, dispRule{pat, p.ContentDisposition[pat]})
	}
	if len(p.CORSOrigins) > 0 {
		c.cors = true
		c.origins = map[string]bool{}
		for _, o := range p.CORSOrigins {
			if o == "*" {
				c.anyOrigin = true
			}
			c.origins[o] = true
		}
		c.credentials = p.CORSCredentials
		c.methods = map[string]bool{}
		for _, m := range p.CORSMethods {
			c.methods[m] = true
		}
		c.allowMethod = strings.Join(p.CORSMethods, ", ")
		hs := append(append([]string(nil), defaultCORSHeaders...), p.CORSHeaders...)
		c.headers = map[string]bool{}
		for _, h := range hs {
			c.headers[strings.ToLower(h)] = true
		}
		c.allowHeader = strings.Join(hs, ", ")
		ex := p.CORSExposeHeaders
		if len(ex) == 0 {
			ex = defaultExpose
		}
		c.expose = strings.Join(ex, ", ")
		c.maxAge = strconv.FormatInt(int64(p.CORSMaxAge.D().Seconds()), 10)
	}
	return c
}

// CompileRoute builds the Path of a proxy route: its fields apply to
// the upstream's responses, and it chooses no Cache-Control (the
// upstream's is passed on) unless it sets one.
func CompileRoute(prefix string, p *config.Policy, domain string) *Path {
	c := Compile(prefix, p, "", domain)
	c.proxied = true
	if p.CacheControl == "" {
		c.cacheControl = ""
	}
	return c
}

func fieldsOf(m map[string]string) []field {
	fs := make([]field, 0, len(m))
	for n, v := range m {
		fs = append(fs, field{strings.ToLower(n), canonical(n), v})
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].lower < fs[j].lower })
	return fs
}

// canonical spells a field name as HTTP/1.1 usually does
// ("cache-control" -> "Cache-Control").
func canonical(n string) string {
	b := []byte(strings.ToLower(n))
	up := true
	for i, c := range b {
		if up && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		up = c == '-'
	}
	return string(b)
}

// HasDisposition reports whether the path names Content-Disposition
// patterns (a response then needs its file's name).
func (p *Path) HasDisposition() bool { return len(p.disposition) > 0 }

// Checks reports whether requests for the path need Secrets.Check:
// address rules, auth or CORS. Without, the policy only adds fields.
func (p *Path) Checks() bool { return p.gated || p.cors }

// Gated reports whether the path restricts who may have its responses.
func (p *Path) Gated() bool { return p.gated }

// Admits reports whether the address rules let addr have the path's
// responses.
func (p *Path) Admits(addr netip.Addr) bool {
	if len(p.allow) == 0 && len(p.deny) == 0 {
		return true
	}
	if !addr.IsValid() {
		return false // a forwarded address that could not be read
	}
	addr = addr.Unmap()
	for _, n := range p.deny {
		if n.Contains(addr) {
			return false
		}
	}
	if len(p.allow) == 0 {
		return true
	}
	for _, n := range p.allow {
		if n.Contains(addr) {
			return true
		}
	}
	return false
}

// Table chooses a site's Path by the longest prefix.
type Table struct {
	paths []*Path // longest prefix first
	// Root is the policy of a path no prefix takes: the defaults.
	Root *Path
}

// NewTable compiles a site's paths; hsts is the site's HSTS value and
// realm the default realm (its domain).
func NewTable(paths []config.PathPolicy, hsts, realm string) *Table {
	t := &Table{Root: Compile("/", &config.Policy{}, hsts, realm)}
	for i := range paths {
		t.paths = append(t.paths, Compile(paths[i].Prefix, &paths[i].Policy, hsts, realm))
	}
	sort.SliceStable(t.paths, func(i, j int) bool { return len(t.paths[i].Prefix) > len(t.paths[j].Prefix) })
	return t
}

// Empty reports whether the site has no [[sites.paths]].
func (t *Table) Empty() bool { return len(t.paths) == 0 }

// Paths lists the compiled paths, longest prefix first.
func (t *Table) Paths() []*Path { return t.paths }

// Match returns the policy of clean, a path as the site reads it
// ("/" + files.CleanPath's result, with "/" after a directory's name).
// A prefix ending in "/" also takes the directory itself without its
// slash ("/gated" for "/gated/"), which redirects there.
func (t *Table) Match(clean []byte) *Path {
	for _, p := range t.paths {
		if hasPrefix(clean, p.Prefix) {
			return p
		}
	}
	return t.Root
}

func hasPrefix(clean []byte, prefix string) bool {
	if len(clean) >= len(prefix) && string(clean[:len(prefix)]) == prefix {
		return true
	}
	// "/gated" is the "/gated/" directory's name.
	return len(prefix) > 1 && prefix[len(prefix)-1] == '/' && string(clean) == prefix[:len(prefix)-1]
}

// FileName is the name a file response is saved as: the last segment of
// clean (nil for a directory).
func FileName(clean []byte) []byte {
	if len(clean) == 0 || clean[len(clean)-1] == '/' {
		return nil
	}
	i := bytes.LastIndexByte(clean, '/')
	return clean[i+1:]
}

// disposition returns the Content-Disposition kind for a file name.
func (p *Path) dispositionFor(name []byte) string {
	for _, r := range p.disposition {
		if ok, _ := path.Match(r.pattern, string(name)); ok {
			return r.kind
		}
	}
	return ""
}

// TypeFor returns the media type the path's types give file name, or "".
func (p *Path) TypeFor(name []byte) string {
	if len(p.types) == 0 {
		return ""
	}
	i := strings.LastIndexByte(string(name), '.')
	if i < 0 {
		return ""
	}
	return p.types[strings.ToLower(string(name[i:]))]
}
