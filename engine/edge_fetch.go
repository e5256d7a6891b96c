package engine

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mediaship/engine/engine/edgecache"
	"github.com/mediaship/engine/integrity"
)

// edgeReq is what a cached route's miss asks its origin for.
type edgeReq struct {
	key        string
	host, path string
	query      *string // nil: none
}

// edgeHead is a fill's answer while its bytes land: the origin's
// status and fields, less those of framing and the connection.
type edgeHead struct {
	status   int
	fields   [][2]string
	verified bool // the origin stated a digest, which the bytes are checked against
}

// edgeSettled is the answer of a fill that brings no bytes of its own.
type edgeSettled struct {
	obj         *edgecache.Object // serve this object: revalidated, or stale after an origin error
	cacheStatus string            // obj's Cache-Status
	rawHead     *edgeHead         // the origin's whole response (small, not stored), for every reader
	rawBody     []byte
	pass        bool  // each reader asks the origin on its own
	err         error // the origin could not be asked
}

// Fetch limits.
const (
	// edgeRawMax bounds a response that is not stored but given to every
	// request that waited for it (a 404, a redirect).
	edgeRawMax = 64 << 10
	// edgePassFor is how long the requests of a key whose response was
	// for one client (private, Set-Cookie, Vary) go to the origin one by
	// one, rather than waiting for one fetch.
	edgePassFor = time.Minute
	// edgeRoomEvery is the room a fill of unknown length claims at a
	// time, as it grows (max_size, min_free).
	edgeRoomEvery = 64 << 20
)

var edgeBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// edgeFetch is a fill's leader: it asks the origin for q (with fields,
// the first request's, and the stale object's validators, when there is
// one), and stores the response as it lands, hashing it, off every loop.
// Requests read the fill as it grows (edgeRead); the fetch goes on
// whether they stay or not, each origin read within the route's
// read_timeout. A response that is not stored goes to mine, the first
// request's, when that request waits (its own answer, not shared); the
// others ask the origin one by one.
func (s *Server) edgeFetch(o *edgeOrigin, f *edgecache.Fill, q edgeReq, fields http.Header, mine chan<- *http.Response) {
	defer f.Release(true)
	store := s.sites.edge
	stale := store.Peek(q.key)
	h := http.Header{}
	for k, v := range fields {
		h[k] = v
	}
	h["Accept-Encoding"] = []string{"identity"}
	if _, ok := h["Via"]; !ok {
		h["Via"] = []string{"1.1 engine"}
	}
	if stale != nil {
		if stale.Meta.ETag != "" {
			h["If-None-Match"] = []string{stale.Meta.ETag}
		}
		if stale.Meta.LastModified != "" {
			h["If-Modified-Since"] = []string{stale.Meta.LastModified}
		}
	}
	// The server's context, not one of the fetch's own: a response not
	// stored is read on by the request it is handed to.
	ctx := s.edge.ctx
	resp, err := o.do(ctx, "GET", q.path, q.query, q.host, h)
	if err == nil && resp.StatusCode == http.StatusNotModified && stale != nil && !sameStrongETag(stale.Meta.ETag, resp.Header.Get("ETag")) {
		// A 304 that names another object than the stored one updates
		// nothing (RFC 9111 §4.3.4): the object is asked for whole.
		resp.Body.Close()
		s.log.Warn("edge cache: the origin answered 304 with another ETag than the stored object's; asked for it whole", "route", o.r.Key, "key", q.key,
			"stored", stale.Meta.ETag, "answered", resp.Header.Get("ETag"))
		h.Del("If-None-Match")
		h.Del("If-Modified-Since")
		stale = nil
		resp, err = o.do(ctx, "GET", q.path, q.query, q.host, h)
	}
	now := time.Now()
	if err != nil || resp.StatusCode >= 500 {
		fwd := "; fwd-status=502"
		if err == nil {
			fwd = "; fwd-status=" + strconv.Itoa(resp.StatusCode)
		}
		if stale != nil && now.Before(stale.Meta.Until.Add(stale.Meta.StaleIfError)) {
			if resp != nil {
				resp.Body.Close()
			}
			s.stats.EdgeStale.Add(1)
			s.log.Warn("edge cache: the origin failed; serving the stale object (stale-if-error)", "route", o.r.Key, "key", q.key, "status", fwd[len("; fwd-status="):], "err", err)
			f.Settle(&edgeSettled{obj: stale, cacheStatus: withDetail("engine; fwd=stale"+fwd, "stale-if-error", unverified(stale))})
			return
		}
	}
	if err != nil {
		if !errors.Is(err, errNotObject) {
			s.log.Warn("edge cache: the origin could not be asked", "route", o.r.Key, "key", q.key, "err", err)
		}
		f.Settle(&edgeSettled{err: err})
		return
	}
	handed := false
	defer func() {
		if !handed {
			resp.Body.Close()
		}
	}()
	// pass settles the fill as not stored: the first request takes resp.
	pass := func() {
		if mine != nil {
			mine <- resp
			handed = true
		}
		f.Settle(&edgeSettled{pass: true})
	}
	def := s.cfg.Cache.DefaultTTL.D()
	if resp.StatusCode == http.StatusNotModified && stale != nil {
		s.edgeRevalidated(f, stale, resp, now, def)
		return
	}
	fr := edgeFreshness(resp.StatusCode, resp.Header, now, def)
	if !fr.store {
		if fr.private {
			store.MarkPass(q.key, now.Add(edgePassFor))
		}
		if !fr.private && resp.ContentLength >= 0 && resp.ContentLength <= edgeRawMax {
			body, err := io.ReadAll(io.LimitReader(resp.Body, edgeRawMax+1))
			if err == nil && int64(len(body)) == resp.ContentLength {
				f.Settle(&edgeSettled{rawHead: &edgeHead{status: resp.StatusCode, fields: originFields(resp.Header)}, rawBody: body})
				return
			}
			f.Settle(&edgeSettled{pass: true}) // its body is spent
			return
		}
		pass()
		return
	}
	size := resp.ContentLength
	if size >= 0 && !f.Reserve(size) {
		s.log.Info("edge cache: no room for an object within max_size and min_free; its requests are proxied, not stored", "key", q.key, "size", size)
		pass()
		return
	}
	if err := f.Open(); err != nil {
		s.log.Warn("edge cache: cannot start storing an object; its requests are proxied", "key", q.key, "err", err)
		pass()
		return
	}
	stated := originDigests(resp.Header)
	if p, err := url.PathUnescape(q.path); err == nil && o.manifest != nil {
		if d, ok := o.manifest[strings.TrimPrefix(p, "/")]; ok {
			stated = append(stated, statedDigest{"blake3", d[:]})
		}
	}
	for _, d := range stated {
		f.Expect(d.alg, d.sum)
	}
	if s.digests.WantsSHA256() {
		f.AlsoSHA256()
	}
	f.SetHead(&edgeHead{status: resp.StatusCode, fields: originFields(resp.Header), verified: len(stated) > 0}, size)
	bp := edgeBufs.Get().(*[]byte)
	defer edgeBufs.Put(bp)
	buf := *bp
	for checked := int64(0); ; {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			s.stats.EdgeOriginBytes.Add(int64(n))
			if _, err := f.Write(buf[:n]); err != nil {
				s.log.Warn("edge cache: writing an object failed; it is not stored, and the requests reading it take the rest from the origin", "key", q.key, "err", err)
				f.Abort(fmt.Errorf("%w: %v", errFillStorage, err))
				return
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil && ctx.Err() != nil {
			s.log.Info("edge cache: a fetch was stopped with the server; not stored", "key", q.key)
			f.Abort(rerr)
			return
		}
		if rerr != nil {
			s.log.Warn("edge cache: the origin's response ended early; not stored, and the requests reading it are cut", "route", o.r.Key, "key", q.key, "err", rerr)
			f.Abort(rerr)
			return
		}
		if w := f.Written(); size < 0 && w >= checked {
			checked += edgeRoomEvery
			if !f.Reserve(edgeRoomEvery) {
				s.log.Warn("edge cache: an object of unstated length outgrew max_size or min_free; not stored, and the requests reading it are cut", "key", q.key, "bytes", w)
				f.Abort(fmt.Errorf("%w: %w", errFillStorage, edgecache.ErrNoRoom))
				return
			}
		}
	}
	meta := edgecache.Meta{Status: resp.StatusCode, StoredAt: now, Until: fr.until, ETag: resp.Header.Get("ETag"),
		LastModified: resp.Header.Get("Last-Modified"), StaleWhileRevalidate: fr.swr, StaleIfError: fr.sie, Header: keptFields(resp.Header)}
	if lm, err := http.ParseTime(meta.LastModified); err == nil {
		meta.Mtime = lm // its Last-Modified as a file is the origin's
	}
	obj, err := f.Commit(meta)
	switch {
	case err == nil:
		s.stats.EdgeStored.Add(1)
		s.edgeLearn(obj)
	case errors.Is(err, edgecache.ErrDigestMismatch):
		s.stats.EdgeIntegrityFailures.Add(1)
		s.log.Warn("edge cache: the origin's bytes do not match the digest it stated; not stored, and the requests that read them are reset", "route", o.r.Key, "key", q.key, "err", err)
	case errors.Is(err, edgecache.ErrNoRoom):
		s.log.Info("edge cache: no room for an object within max_size and min_free; it was proxied, not stored", "key", q.key)
	case errors.Is(err, edgecache.ErrPurged):
		s.log.Info("edge cache: an object purged while it was fetched was given to its requests, not stored", "key", q.key)
	default:
		s.log.Warn("edge cache: an object was not stored", "key", q.key, "err", err)
	}
}

// sameStrongETag reports whether a 304's ETag does not contradict the
// stored one: none given, or the same, where the stored one is strong.
func sameStrongETag(stored, answered string) bool {
	return answered == "" || !strings.HasPrefix(stored, `"`) || answered == stored
}

// edgeLearn gives the digest store the digests the fill computed, so
// that the object's first hit carries its Repr-Digest and digest ETag
// without reading it again.
func (s *Server) edgeLearn(obj *edgecache.Object) {
	var b3 integrity.Digest
	var sha *integrity.SHA256
	b, err := hex.DecodeString(obj.Meta.BLAKE3)
	if err != nil || len(b) != len(b3) {
		return
	}
	copy(b3[:], b)
	if b, err := hex.DecodeString(obj.Meta.SHA256); err == nil && len(b) == len(integrity.SHA256{}) {
		sha = new(integrity.SHA256)
		copy(sha[:], b)
	}
	if err := s.digests.Learn(obj.Path, b3, sha); err != nil {
		s.log.Debug("edge cache: an object's digests are hashed again when first served", "key", obj.Meta.Key, "err", err)
	}
}

// edgeRevalidated ends a fill whose origin answered 304 to the stale
// object's validators: the object is fresh again, with the fields of
// the 304 in place of its stored ones (RFC 9111 §4.3.4), and its
// readers are served it.
func (s *Server) edgeRevalidated(f *edgecache.Fill, stale *edgecache.Object, resp *http.Response, now time.Time, def time.Duration) {
	h := http.Header{}
	for _, kv := range stale.Meta.Header {
		h.Add(kv[0], kv[1])
	}
	for _, k := range storedFields {
		if v := resp.Header.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	for _, k := range []string{"Date", "ETag", "Last-Modified", "Vary", "Set-Cookie"} {
		if v := resp.Header.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	fr := edgeFreshness(http.StatusOK, h, now, def)
	meta := stale.Meta
	meta.Header, meta.StoredAt = keptFields(h), now
	meta.Until, meta.StaleWhileRevalidate, meta.StaleIfError = fr.until, fr.swr, fr.sie
	if v := h.Get("ETag"); v != "" {
		meta.ETag = v
	}
	if v := h.Get("Last-Modified"); v != "" {
		meta.LastModified = v
	}
	if !fr.store {
		meta.Until = now // served to the requests that asked, then asked again
	}
	obj := stale
	if fresh, err := s.sites.edge.Refresh(stale, meta); err == nil {
		obj = fresh
	} else {
		s.log.Warn("edge cache: a revalidated object's metadata was not updated", "key", stale.Meta.Key, "err", err)
	}
	s.stats.EdgeRevalidated.Add(1) // once the object is fresh again
	f.Settle(&edgeSettled{obj: obj, cacheStatus: withDetail("engine; fwd=stale; fwd-status=304", unverified(obj))})
}

// storedFields are the response fields an object keeps and gives again.
var storedFields = []string{"Content-Type", "Cache-Control", "Expires", "Content-Disposition", "Content-Language", "Link"}

// keptFields is h's storedFields, in that order.
func keptFields(h http.Header) [][2]string {
	var out [][2]string
	for _, name := range storedFields {
		for _, v := range h.Values(name) {
			out = append(out, [2]string{name, v})
		}
	}
	return out
}

// originFields is the origin's fields for the requests reading a fill,
// less those of framing and the connection, in a stable order.
func originFields(h http.Header) [][2]string {
	names := make([]string, 0, len(h))
	for k := range h {
		switch strings.ToLower(k) {
		case "connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "te", "trailer", "upgrade":
			continue
		}
		names = append(names, k)
	}
	sort.Strings(names)
	var out [][2]string
	for _, k := range names {
		for _, v := range h[k] {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}

// maxDelta is the largest delta-seconds a cache takes (RFC 9111 §1.2.2).
const maxDelta = 1 << 31

// edgeFresh is how a shared cache may keep a response (RFC 9111 §3,
// §4.2.1; RFC 5861).
type edgeFresh struct {
	until    time.Time     // served without asking until then
	swr, sie time.Duration // stale-while-revalidate, stale-if-error past until
	store    bool          // it may be stored
	private  bool          // it is for its request alone: not shared, not waited for by others
}

// edgeFreshness judges a response of status with fields h at now; def
// is the lifetime of a response that states none. Stored: a 200 without
// no-store, private, Set-Cookie, a Vary on other fields than
// Accept-Encoding and Origin (the fetch asks for identity, which every
// client accepts, and sends no Origin: the cached route's own cors_*
// keys answer browsers, as on a site) or a Content-Encoding; fresh for s-maxage, max-age, or Expires less Date,
// or def; no-cache, or a lifetime of 0 with a validator to revalidate
// it by, is stored stale (asked again on every use).
func edgeFreshness(status int, h http.Header, now time.Time, def time.Duration) edgeFresh {
	var fr edgeFresh
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" && !strings.EqualFold(f, "accept-encoding") && !strings.EqualFold(f, "origin") {
				fr.private = true
			}
		}
	}
	if len(h.Values("Set-Cookie")) > 0 {
		fr.private = true
	}
	maxAge, sMaxAge := int64(-1), int64(-1)
	noCache, revalidate := false, false
	for _, line := range h.Values("Cache-Control") {
		for _, d := range strings.Split(line, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(d), "=")
			n, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64)
			switch {
			case errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(val, "-"), err == nil && n > maxDelta:
				n = maxDelta // RFC 9111 §1.2.2: past 2^31, 2^31
			case err != nil || n < 0:
				n = -1
			}
			switch strings.ToLower(name) {
			case "no-store", "private":
				fr.private = true
			case "no-cache":
				noCache = true
			case "must-revalidate", "proxy-revalidate":
				revalidate = true
			case "max-age":
				maxAge = n
			case "s-maxage":
				sMaxAge = n
			case "stale-while-revalidate":
				fr.swr = time.Duration(max(n, 0)) * time.Second
			case "stale-if-error":
				fr.sie = time.Duration(max(n, 0)) * time.Second
			}
		}
	}
	if fr.private || status != http.StatusOK {
		return fr
	}
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return fr
	}
	if revalidate {
		fr.swr, fr.sie = 0, 0 // never served stale (RFC 9111 §5.2.2.2)
	}
	life, known := time.Duration(0), true
	switch {
	case sMaxAge >= 0:
		life = time.Duration(sMaxAge) * time.Second
	case maxAge >= 0:
		life = time.Duration(maxAge) * time.Second
	case h.Get("Expires") != "":
		exp, err := http.ParseTime(h.Get("Expires"))
		if err == nil { // an invalid Expires is already stale (§5.3)
			base := now
			if date, err := http.ParseTime(h.Get("Date")); err == nil {
				base = date
			}
			life = max(exp.Sub(base), 0)
		}
	case def > 0:
		life = def
	default:
		known = false
	}
	if noCache {
		life = 0
	}
	fr.until = now.Add(life)
	validator := h.Get("ETag") != "" || h.Get("Last-Modified") != ""
	fr.store = known && life > 0 || (noCache || known) && validator
	return fr
}

// statedDigest is a digest an origin stated for the whole object; sum is
// nil for one it stated in a form that cannot be read (never matched).
type statedDigest struct {
	alg string
	sum []byte
}

// originDigests are the digests the origin states for the whole object,
// every one of them (each must match): Repr-Digest (RFC 9530) sha-256
// and blake3 members, on every line; Content-Digest's, which are the
// same for a 200 without a content coding (the only response stored);
// and x-amz-checksum-sha256. A member of a known algorithm that is not
// 32 bytes of base64 is stated but unreadable: it matches nothing.
func originDigests(h http.Header) []statedDigest {
	var out []statedDigest
	for _, field := range []string{"Repr-Digest", "Content-Digest"} {
		for _, v := range h.Values(field) {
			for _, item := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(strings.TrimSpace(item), "=")
				alg := strings.ToLower(strings.TrimSpace(name))
				if alg != "sha-256" && alg != "blake3" {
					continue
				}
				var sum []byte
				if len(val) >= 2 && val[0] == ':' && val[len(val)-1] == ':' {
					if b, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1]); err == nil && len(b) == 32 {
						sum = b
					}
				}
				out = append(out, statedDigest{alg, sum})
			}
		}
	}
	for _, v := range h.Values("X-Amz-Checksum-Sha256") {
		var sum []byte
		if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v)); err == nil && len(b) == 32 {
			sum = b
		}
		out = append(out, statedDigest{"sha-256", sum})
	}
	return out
}
