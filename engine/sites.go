package engine

import (
	"fmt"
	"os"
	"strings"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/edgecache"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/engine/routing"
)

var getenv = os.Getenv

// site is a configured virtual host, ready to serve.
type site struct {
	// Immutable after construction.
	name       string // as configured; "" for the top-level root
	idx        int    // in siteTable.all: the metrics' site index
	files      files.Site
	limitRate  uint64
	h1, h2, h3 bool
	h2c        bool // HTTP/2 with prior knowledge on the plain listener
	tickets    bool // TLS session tickets (resumption) allowed
	// policy is the site's [[sites.paths]]: auth, address rules and
	// response fields by path prefix.
	policy *policy.Table
	// altSvc advertises HTTP/3 on this site's TLS responses; empty when
	// the site or the server does not serve it. Set before serving.
	altSvc string
}

// label names the site in metrics and the access log: its domain, or
// "default" for the top-level root's.
func (s *site) label() string {
	if s.name == "" {
		return "default"
	}
	return s.name
}

// siteTable chooses a site by Host.
type siteTable struct {
	// Immutable after construction.
	domains routing.Table[*site] // by domain: exact, "*.example.com", "*"
	def     *site
	// defNamed: the default takes names nothing names by configuration
	// (the top-level root, or a site marked default), as a "*" site
	// would: it ranks with a "*" route (routing.RankAny), where a first
	// site that is the default by its place ranks below every route.
	defNamed bool
	all      []*site
	h2c      bool // some site accepts HTTP/2 with prior knowledge
	roots    []*files.Root
	emptyDir string // the default site's directory when only proxy routes serve; removed at close
	// The edge cache's objects, and the site that serves them as files;
	// nil when no route caches.
	edge     *edgecache.Store
	edgeSite *site
	// normalize has lookup return the normalized host even with one site:
	// misdirected judges it on TLS, and refuses names passthrough routes
	// relay.
	normalize bool
}

func newSiteTable(cfg *config.Config) (*siteTable, error) {
	t := &siteTable{normalize: cfg.Passthrough() || cfg.HasTLS()}
	roots := map[string]*files.Root{}
	root := func(dir string, follow bool) (*files.Root, error) {
		key := fmt.Sprintf("%v\x00%s", follow, dir)
		if r := roots[key]; r != nil {
			return r, nil
		}
		r, err := files.NewRoot(dir, follow)
		if err != nil {
			return nil, fmt.Errorf("engine: open root %s: %w", dir, err)
		}
		roots[key] = r
		t.roots = append(t.roots, r)
		return r, nil
	}
	dir := cfg.Root
	if dir == "" && len(cfg.Sites) == 0 {
		// Routes only: what no route matches is answered 404 from a
		// default site with nothing in it.
		empty, err := os.MkdirTemp("", "engine-routes-only-")
		if err != nil {
			return nil, fmt.Errorf("engine: make the empty default site: %w", err)
		}
		t.emptyDir, dir = empty, empty
	}
	t.defNamed = cfg.Root != ""
	if dir != "" {
		r, err := root(dir, false)
		if err != nil {
			return nil, err
		}
		t.def = &site{files: files.Site{Root: r, Index: []string{"index.html"}, Precompressed: true,
			RequireDigest: cfg.Integrity.Mode == "require"}, h1: true, h2: true, h3: true, tickets: true,
			policy: policy.NewTable(nil, "", "engine")}
		t.all = append(t.all, t.def)
	}
	for i := range cfg.Sites {
		sc := &cfg.Sites[i]
		dir := sc.Root
		if dir == "" {
			dir = cfg.Root
		}
		r, err := root(dir, sc.FollowSymlinksOutsideRoot)
		if err != nil {
			t.close()
			return nil, err
		}
		idx := sc.Index
		if idx == nil {
			idx = []string{"index.html"}
		}
		s := &site{
			idx:  len(t.all),
			name: sc.Domain,
			files: files.Site{Root: r, Index: idx, Listing: sc.DirectoryListing,
				Precompressed: config.On(sc.Precompressed), RequireDigest: sc.Integrity.Mode == "require",
				HideDotfiles: sc.HiddenFiles == "deny"},
			limitRate: uint64(sc.LimitRate),
			h1:        config.On(sc.Protocols.H1),
			h2:        config.On(sc.Protocols.H2),
			h3:        config.On(sc.Protocols.H3),
			h2c:       sc.Protocols.H2C != nil && *sc.Protocols.H2C,
			tickets:   config.On(sc.TLS.SessionTickets),
			policy:    policy.NewTable(sc.Paths, sc.HSTS, sc.Domain),
		}
		t.all = append(t.all, s)
		t.domains.Add(sc.Domain, s) // config refuses a domain given twice
		if sc.Default {
			t.def, t.defNamed = s, true
		}
	}
	if t.def == nil {
		t.def = t.all[0]
	}
	if cfg.CacheOn() {
		store, err := edgecache.Open(edgecache.Config{Dir: cfg.Cache.Path, MaxSize: int64(cfg.Cache.MaxSize), MinFree: int64(cfg.Cache.MinFree), MaxFills: cfg.Cache.MaxFills})
		if err != nil {
			t.close()
			return nil, fmt.Errorf("engine: [cache] path %s: %w", cfg.Cache.Path, err)
		}
		r, err := root(store.ObjectsDir(), false)
		if err != nil {
			t.close()
			return nil, err
		}
		t.edge = store
		t.edgeSite = &site{idx: len(t.all), name: "cache", files: files.Site{Root: r}, h1: true, h2: true, h3: true, tickets: true,
			policy: policy.NewTable(nil, "", "cache")}
		t.all = append(t.all, t.edgeSite)
	}
	for _, s := range t.all {
		t.h2c = t.h2c || s.h2c
	}
	return t, nil
}

// lookup returns the site for a Host value (any case, with or without a
// port). buf is scratch space.
func (t *siteTable) lookup(host []byte, buf []byte) (*site, []byte) {
	if len(t.all) == 1 && !t.normalize {
		return t.def, buf
	}
	buf = normHost(host, buf)
	return t.byName(buf), buf
}

// byName chooses the site for a normalized host: exact, longest
// wildcard, "*", the default.
func (t *siteTable) byName(name []byte) *site {
	s, _ := t.match(name)
	return s
}

// match is byName with the rank the site's domain names the host by
// (RankNone for the default).
func (t *siteTable) match(name []byte) (*site, routing.Rank) {
	if s, r := t.domains.Match(name); r != routing.RankNone {
		return s, r
	}
	if t.defNamed {
		return t.def, routing.RankAny
	}
	return t.def, routing.RankNone
}

// tlsHost is the name a request on a TLS connection is routed and judged
// by, normalized into buf: its Host (or :authority), or, when that names
// no host (HTTP/1.0 without one, an empty or port-only Host), the name
// its handshake was for (SNI). "" when neither names one: the request
// goes to the default, whose certificate, version and key exchanges the
// handshake that named nothing was given. A request never falls to the
// default site past the facts its connection was given.
func tlsHost(host []byte, sni string, buf []byte) []byte {
	buf = normHost(host, buf)
	if len(buf) == 0 {
		buf = append(buf, serverName(sni)...)
	}
	return buf
}

// rank is how specifically a site's domain names host (normalized).
func (t *siteTable) rank(host string) routing.Rank {
	_, r := t.domains.MatchString(host)
	return r
}

// names reports whether a site is configured for host (normalized:
// lowercase, no port): by exact name or wildcard, not as the default.
func (t *siteTable) names(host string) bool { return t.domains.Names(host) }

// normHost writes host without its port, lowercased and without a
// trailing dot, into buf.
func normHost(host, buf []byte) []byte { return routing.AppendHost(buf, host) }

func (t *siteTable) describe() string {
	var names []string
	for _, s := range t.all {
		n := s.name
		if n == "" {
			n = "(default)"
		}
		names = append(names, n+"="+s.files.Root.Dir)
	}
	return strings.Join(names, " ")
}

func (t *siteTable) close() {
	for _, r := range t.roots {
		r.Close()
	}
	if t.emptyDir != "" {
		os.Remove(t.emptyDir)
	}
}
