package engine

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/engine/edgecache"
	"github.com/mediaship/engine/engine/proxy"
	"github.com/mediaship/engine/h1"
)

// The edge cache in the request's way: decide looks a cached route's
// GET or HEAD up in the store (edgeLookup) and answers a fresh object as
// a file of the cache's own site, by the same path as any file
// (sendfile, kernel TLS, ranges, conditional requests, every protocol);
// a miss is proxied with an edgeTap on its exchange, which stores the
// response as it streams to the client when its freshness allows.
//
// Not yet: concurrent misses of one object share one origin fetch only
// when they are the same fill's readers (a later miss is proxied on its
// own while a fill runs); a range on a cold object is proxied as such
// and not stored; responses with Vary, Content-Encoding or Set-Cookie
// are not stored; stale objects are fetched again, not revalidated.

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
// a fresh object makes d a file answer of the cache's site; otherwise d
// keeps its route, with the key its response is stored under.
func (s *Server) edgeLookup(f *reqFacts, d *decision, host []byte) {
	m := string(f.method)
	if m != "GET" && m != "HEAD" {
		return
	}
	if f.hdr != nil && f.hdr.Get("authorization") != nil {
		// A shared cache neither stores nor serves a response to a
		// request with credentials (RFC 9111 §3.5).
		d.pr.CacheStatus = "engine; fwd=bypass; detail=authorization"
		return
	}
	key := edgeKey(host, f.path, f.query)
	now := f.now
	if now.IsZero() {
		now = time.Now()
	}
	o := s.sites.edge.Lookup(key)
	if o == nil || !now.Before(o.Meta.Until) {
		if m == "GET" {
			d.cacheKey = key // a HEAD's answer has no body to store
		}
		d.cacheMiss = "engine; fwd=uri-miss"
		if o != nil {
			d.cacheMiss = "engine; fwd=stale"
		}
		return
	}
	s.sites.edge.Touch(o)
	d.route, d.site = nil, s.sites.edgeSite
	d.filePath = []byte("/" + o.Rel())
	d.pr.CacheStatus, d.pr.Hit = "engine; hit", true
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

// edgePrepare readies the exchange of a cached route's miss (nil for
// any other decision): a fill of the object under way is read by the
// exchange instead of asking the origin again (its bytes as they land,
// at the client's pace); otherwise a tap stores what the origin sends.
func (s *Server) edgePrepare(d *decision) func(*proxy.Exchange) {
	if d.cacheMiss == "" || s.sites.edge == nil {
		return nil
	}
	s.stats.EdgeMisses.Add(1) // once per exchange (decide may run twice for one request)
	key, status := d.cacheKey, d.cacheMiss
	if key == "" {
		return nil
	}
	return func(ex *proxy.Exchange) {
		if f := s.sites.edge.Join(key); f != nil {
			s.stats.EdgeCollapsed.Add(1)
			ex.SetSource(proxy.PipeSource(func(side *net.UnixConn) { readFill(f, side) }))
			return
		}
		ex.SetTap(&edgeTap{s: s, key: key, status: status})
	}
}

// readFill answers through side from fill f: the leader's head, then the
// bytes as they land. A fill that fails (its origin went away, or sent
// bytes that do not match its digest) cuts the answer short: the client's
// response is reset, never ended cleanly.
func readFill(f *edgecache.Fill, side *net.UnixConn) {
	defer f.Release(false)
	defer side.Close()
	go io.Copy(io.Discard, side) // the request the exchange writes
	if _, err := side.Write(f.Head()); err != nil {
		return
	}
	buf := make([]byte, 256<<10)
	for off := int64(0); ; {
		// The last byte waits for the fill's end: a fill whose bytes
		// turn out not to match its digest leaves the answer short.
		p := buf
		switch done, err := f.State(); {
		case done && err != nil:
			return // short of its length: the exchange resets the client's response
		case !done:
			p = p[:max(0, min(int64(len(p)), f.Written()-1-off))]
		}
		n, err := f.ReadAt(p, off)
		if n > 0 {
			if _, werr := side.Write(buf[:n]); werr != nil {
				return // the exchange went away
			}
			off += int64(n)
			continue
		}
		switch {
		case err == io.EOF:
			return // whole: the close ends the body after its last byte
		case err != nil:
			return // short of its length: the exchange resets the client's response
		}
		<-f.Wait(off + 1) // the exchange's read_timeout bounds a stalled fill: it closes, and the next Write fails
	}
}

// edgeTap stores a proxied response as it streams to the client. Its
// methods run on the exchange's loop.
type edgeTap struct {
	s      *Server
	key    string
	status string // Cache-Status of a miss, from the lookup
	fill   *edgecache.Fill
	meta   edgecache.Meta
	lm     time.Time // Last-Modified, given to the data file
	failed bool      // a write failed: nothing is stored
}

// storedFields are the response fields an object keeps and gives again.
var storedFields = []string{"Content-Type", "Cache-Control", "Expires", "Content-Disposition", "Content-Language", "Link"}

func (t *edgeTap) Head(r *h1.Response, bodyLen int64) (bool, string) {
	now := time.Now()
	until, ok := edgeFreshness(r, now, t.s.cfg.Cache.DefaultTTL.D())
	if !ok || bodyLen < 0 {
		return false, t.status
	}
	f, leader, err := t.s.sites.edge.Begin(t.key)
	if err != nil {
		t.s.log.Warn("edge cache: cannot start storing an object; proxying it", "key", t.key, "err", err)
		return false, t.status
	}
	if !leader {
		f.Release(false)
		return false, t.status + "; detail=fill-in-progress"
	}
	t.fill = f
	f.SetHead(followerHead(r, bodyLen))
	if alg, sum := originDigest(r); alg != "" {
		f.Expect(alg, sum)
	}
	t.meta = edgecache.Meta{Status: r.Status, StoredAt: now, Until: until}
	for _, name := range storedFields {
		if v := r.Get(strings.ToLower(name)); v != nil {
			t.meta.Header = append(t.meta.Header, [2]string{name, string(v)})
		}
	}
	if lm, err := http.ParseTime(string(r.Get("last-modified"))); err == nil {
		t.lm = lm
	}
	return true, t.status + "; stored"
}

func (t *edgeTap) Body(p []byte) {
	if t.failed {
		return
	}
	t.s.stats.EdgeOriginBytes.Add(int64(len(p)))
	if _, err := t.fill.Write(p); err != nil {
		t.failed = true
		t.s.log.Warn("edge cache: writing an object failed; it is not stored", "key", t.key, "err", err)
		t.fill.Abort(err)
	}
}

func (t *edgeTap) End() error {
	f := t.fill
	if f == nil {
		return nil
	}
	defer f.Release(true)
	if t.failed {
		return nil
	}
	o, err := f.Commit(t.meta)
	switch {
	case err == nil:
		t.s.stats.EdgeStored.Add(1)
		if !t.lm.IsZero() {
			os.Chtimes(o.Path, t.lm, t.lm) // its Last-Modified as a file is the origin's
		}
	case errors.Is(err, edgecache.ErrDigestMismatch):
		t.s.stats.EdgeIntegrityFailures.Add(1)
		t.s.log.Warn("edge cache: the origin's bytes do not match the digest it stated; not stored, and the clients that streamed them are reset", "key", t.key, "err", err)
		return err
	case err == edgecache.ErrNoRoom:
		t.s.log.Info("edge cache: no room for an object within max_size and min_free; it was proxied, not stored", "key", t.key)
	default:
		t.s.log.Warn("edge cache: an object was not stored", "key", t.key, "err", err)
	}
	return nil
}

func (t *edgeTap) Abort() {
	if t.fill != nil {
		t.fill.Abort(nil)
		t.fill.Release(true)
	}
}

// edgeFreshness is how long a shared cache may serve response r without
// asking again (RFC 9111 §4.2.1): s-maxage, max-age, then Expires less
// Date, then def for a response that states none. ok is false for what
// is not stored at all: a status other than 200, no-store, private,
// no-cache (no revalidation yet), Vary, Content-Encoding, Set-Cookie.
func edgeFreshness(r *h1.Response, now time.Time, def time.Duration) (until time.Time, ok bool) {
	if r.Status != 200 || r.Get("vary") != nil || r.Get("content-encoding") != nil || r.Get("set-cookie") != nil {
		return time.Time{}, false
	}
	maxAge, sMaxAge := int64(-1), int64(-1)
	for _, f := range r.Headers {
		if !h1.EqualFold(f.Name, "cache-control") {
			continue
		}
		line := f.Value
		for _, d := range strings.Split(string(line), ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
			switch strings.ToLower(name) {
			case "no-store", "private", "no-cache":
				return time.Time{}, false
			case "max-age":
				if n, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64); err == nil && n >= 0 {
					maxAge = n
				}
			case "s-maxage":
				if n, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64); err == nil && n >= 0 {
					sMaxAge = n
				}
			}
		}
	}
	switch {
	case sMaxAge >= 0:
		return now.Add(time.Duration(sMaxAge) * time.Second), sMaxAge > 0
	case maxAge >= 0:
		return now.Add(time.Duration(maxAge) * time.Second), maxAge > 0
	}
	if e := r.Get("expires"); e != nil {
		exp, err := http.ParseTime(string(e))
		if err != nil {
			return time.Time{}, false // an invalid Expires is already stale (§5.3)
		}
		base := now
		if date, err := http.ParseTime(string(r.Get("date"))); err == nil {
			base = date
		}
		life := exp.Sub(base)
		return now.Add(life), life > 0
	}
	if def > 0 {
		return now.Add(def), true
	}
	return time.Time{}, false
}

// originDigest is the digest the origin states for the whole object:
// Repr-Digest (RFC 9530) sha-256 or blake3, or x-amz-checksum-sha256.
func originDigest(r *h1.Response) (alg string, sum []byte) {
	if v := r.Get("repr-digest"); v != nil {
		for _, item := range strings.Split(string(v), ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok || len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
				continue
			}
			b, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
			if err != nil || len(b) != 32 {
				continue
			}
			switch strings.ToLower(name) {
			case "sha-256", "blake3":
				return strings.ToLower(name), b
			}
		}
	}
	if v := r.Get("x-amz-checksum-sha256"); v != nil {
		if b, err := base64.StdEncoding.DecodeString(string(v)); err == nil && len(b) == 32 {
			return "sha-256", b
		}
	}
	return "", nil
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
		n := s.sites.edge.Purge(key, prefix == "true")
		s.log.Info("edge cache: purged", "url", raw, "prefix", prefix == "true", "objects", n)
		fmt.Fprintf(w, "{\"purged\":%d}\n", n)
	})
}

// followerHead is the head a fill's readers are answered with: the
// origin's status and fields but those of the connection and framing,
// the body's length, and a close after it (the reader's connection is
// its own).
func followerHead(r *h1.Response, bodyLen int64) []byte {
	b := h1.AppendStatusLine(nil, r.Status)
	for _, f := range r.Headers {
		switch strings.ToLower(string(f.Name)) {
		case "connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "te", "trailer", "upgrade":
			continue
		}
		b = append(append(append(append(b, f.Name...), ": "...), f.Value...), "\r\n"...)
	}
	b = append(b, "Cache-Status: engine; fwd=uri-miss; collapsed\r\n"...)
	b = strconv.AppendInt(append(b, "Content-Length: "...), bodyLen, 10)
	return append(b, "\r\nConnection: close\r\n\r\n"...)
}
