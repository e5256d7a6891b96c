package engine

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/engine/edgecache"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/proxy"
)

// The edge cache in the request's way: decide looks a cached route's
// GET or HEAD up in the store (edgeLookup) and answers a fresh object as
// a file of the cache's own site, by the same path as any file
// (sendfile, kernel TLS, ranges, conditional requests, every protocol).
// A miss's exchange takes its response from the object's fill
// (edgePrepare, edgeRead): one fetch per object (edgeFetch, on a
// goroutine of its own, never a loop), whose bytes every request
// waiting for the object streams as they land, each at its own pace.

// edgeKey is the cache key of a request: its normalized host, path and
// query (GET and HEAD share it).
func edgeKey(host, path, query []byte) string {
	k := make([]byte, 0, len(host)+len(path)+len(query)+6)
	k = append(append(append(k, "GET "...), host...), path...)
	if query != nil {
		k = append(append(k, '?'), query...)
	}
	return string(k)
}

// edgeLookup judges a request a cached route allowed (its policy passed):
// a fresh object makes d a file answer of the cache's site, and so does
// a stale one within its stale-while-revalidate (while one fetch asks
// the origin again); otherwise d keeps its route, with what its
// exchange needs to read the object's fill (edgePrepare).
func (s *Server) edgeLookup(f *reqFacts, d *decision, host []byte) {
	m := string(f.method)
	s3 := d.route.Cfg.Origin == "s3"
	d.edgePass = s3 // an S3 origin is asked through the cache, whatever the request
	if m != "GET" && m != "HEAD" {
		d.cacheMiss = "engine; fwd=method"
		return
	}
	if f.hdr != nil && f.hdr.Get("authorization") != nil {
		// A shared cache neither stores nor serves a response to a
		// request with credentials (RFC 9111 §3.5).
		d.cacheMiss = "engine; fwd=bypass; detail=authorization"
		return
	}
	key := edgeKey(host, f.path, f.query)
	now := f.now
	if now.IsZero() {
		now = time.Now()
	}
	store := s.sites.edge
	o := store.Lookup(key)
	fresh := o != nil && now.Before(o.Meta.Until)
	if o != nil && !fresh && now.Before(o.Meta.Until.Add(o.Meta.StaleWhileRevalidate)) {
		// Served stale, once more, while one fetch revalidates it.
		s.edgeBegin(d, key, host, f.path, f.query)
		d.pr.CacheStatus, d.edgeStale = withDetail("engine; hit", "stale-while-revalidate", unverified(o)), true
	} else if !fresh {
		d.cacheMiss = "engine; fwd=uri-miss"
		if o != nil {
			d.cacheMiss = "engine; fwd=stale"
		}
		if m == "GET" && !store.Passing(key, now) {
			d.cacheKey = key // a HEAD's answer has no body to store
			d.edgeQ = edgeReq{key: key, host: string(host), path: string(f.path)}
			if f.query != nil {
				q := string(f.query)
				d.edgeQ.query = &q
			}
		}
		return
	} else {
		d.pr.CacheStatus = withDetail("engine; hit", unverified(o))
	}
	store.Touch(o)
	d.route, d.site = nil, s.sites.edgeSite
	if e := o.Meta.ETag; strings.HasPrefix(e, `"`) {
		d.edgeETag = e
	}
	d.filePath = []byte("/" + o.Rel())
	d.pr.Hit = true
	d.pr.StoredType = ""
	d.pr.Stored = d.pr.Stored[:0]
	for _, h := range o.Meta.Header {
		if strings.EqualFold(h[0], "content-type") {
			d.pr.StoredType = h[1]
			continue
		}
		d.pr.Stored = append(d.pr.Stored, [3]string{strings.ToLower(h[0]), h[0], h[1]})
	}
	age := max(int64(now.Sub(o.Meta.StoredAt)/time.Second), 0)
	d.pr.Stored = append(d.pr.Stored, [3]string{"age", "Age", strconv.FormatInt(age, 10)})
	d.pr.Name = nil // the object's file name is no name of the client's
}

// unverified is the Cache-Status detail of an object whose origin stated
// no digest to check its bytes against, "" for one that was checked.
func unverified(o *edgecache.Object) string {
	if o.Meta.Verified == "" {
		return "unverified"
	}
	return ""
}

// withDetail is Cache-Status cs with its details (RFC 9211 §2.8), the
// empty ones left out: one as a token, several as a string.
func withDetail(cs string, details ...string) string {
	var ds []string
	for _, d := range details {
		if d != "" {
			ds = append(ds, d)
		}
	}
	switch len(ds) {
	case 0:
		return cs
	case 1:
		return cs + "; detail=" + ds[0]
	}
	return cs + `; detail="` + strings.Join(ds, " ") + `"`
}

// fileAnswer notes a file response of site s: the digest store learns
// the file is served (its digest is computed when missing), and an edge
// cache hit's body counts among the bytes the cache gave its clients.
func (s *Server) fileAnswer(site *site, resp *files.Response) {
	s.digests.Needs(site.files.Root, resp)
	if site == s.sites.edgeSite && !resp.NoBody {
		s.stats.EdgeClientBytes.Add(resp.ContentLength)
	}
}

// edgeBegin starts the fetch of key in the background, unless one is
// under way (stale-while-revalidate: no request waits for it).
func (s *Server) edgeBegin(d *decision, key string, host, path, query []byte) {
	f, leader := s.sites.edge.Begin(key)
	if f == nil {
		return // max_fills under way: served stale, revalidated later
	}
	if !leader {
		f.Release(false)
		return
	}
	q := edgeReq{key: key, host: string(host), path: string(path)}
	if query != nil {
		qs := string(query)
		q.query = &qs
	}
	o := s.edgeOrigin(d.route)
	s.edgeGo(func() { s.edgeFetch(o, f, q, nil, nil) })
}

// edgePrepare readies the exchange of a cached route's request that the
// cache did not answer (nil for any other decision): a GET reads the
// object's fill, begun here when none is under way (its fetch is the
// origin's one request for every request that reads it); any other
// request of an S3 origin is relayed by the cache's client, which signs
// it; the rest go to the upstream as on any route, with their
// Cache-Status.
func (s *Server) edgePrepare(d *decision) func(*proxy.Exchange) {
	if d.route == nil || !d.route.Cfg.Cache || s.sites.edge == nil {
		return nil
	}
	s.stats.EdgeMisses.Add(1) // once per exchange (decide may run twice for one request)
	if d.cacheKey == "" && !d.edgePass {
		d.pr.CacheStatus = d.cacheMiss
		return nil
	}
	o, q, cs := s.edgeOrigin(d.route), d.edgeQ, d.cacheMiss
	return func(ex *proxy.Exchange) {
		var f *edgecache.Fill
		var lead *edgeReq
		if q.key != "" {
			var leader bool
			f, leader = s.sites.edge.Begin(q.key)
			switch {
			case f == nil:
				// max_fills under way: relayed, not stored.
				s.stats.EdgeFillsBusy.Add(1)
				cs = withDetail(cs, "fills-busy")
			case leader:
				f.Hold() // the reader's; the fetch it starts takes the leader's
				lead = &q
			default:
				s.stats.EdgeCollapsed.Add(1)
				cs += "; collapsed"
			}
		}
		ex.SetSource(proxy.PipeSource(func(side *net.UnixConn) {
			s.edge.enter()
			defer s.edge.exit()
			s.edgeRead(o, f, lead, cs, side)
		}))
	}
}

// purgeHandler is the admin listener's POST /cache/purge, or nil without
// an edge cache. url names the object as a client asks for it
// (scheme://host/path?query; the scheme is not part of the key);
// prefix=true purges every object whose URL starts with it. The answer
// says how many objects went. A request with an Origin field (a browser
// sent it, perhaps on another site's behalf) is refused.
func (s *Server) purgeHandler() http.Handler {
	if s.sites.edge == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Origin") != "" {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintln(w, `{"error":"requests from browsers (an Origin field) are refused"}`)
			return
		}
		raw := r.URL.Query().Get("url")
		u, err := url.Parse(raw)
		if raw == "" || err != nil || u.Host == "" || !strings.HasPrefix(u.EscapedPath(), "/") && u.EscapedPath() != "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintln(w, `{"error":"url= must be an absolute URL such as https://models.example.com/llama/"}`)
			return
		}
		prefix := r.URL.Query().Get("prefix")
		if prefix != "" && prefix != "true" && prefix != "false" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintln(w, `{"error":"prefix= is true or false"}`)
			return
		}
		path := u.EscapedPath()
		if path == "" {
			path = "/"
		}
		var query []byte
		if u.RawQuery != "" || u.ForceQuery {
			query = []byte(u.RawQuery)
		}
		key := edgeKey(normHost([]byte(u.Host), nil), []byte(path), query)
		n, fills := s.sites.edge.Purge(key, prefix == "true")
		s.log.Info("edge cache: purged", "url", raw, "prefix", prefix == "true", "objects", n, "fetches", fills)
		fmt.Fprintf(w, "{\"purged\":%d,\"fetches\":%d}\n", n, fills)
	})
}
