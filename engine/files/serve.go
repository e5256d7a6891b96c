package files

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strconv"
)

// Site is what the file layer needs to know about a site.
type Site struct {
	Root          *Root
	Index         []string // file names tried for a directory; empty means none
	Listing       bool     // list directories without an index file
	Precompressed bool     // serve .br/.zst/.gz sidecars to clients that accept them
	// RequireDigest answers 503 (with Retry-After) for a file whose
	// digest is not known yet, instead of serving it without one.
	RequireDigest bool
	// HideDotfiles answers 404 for any path with a segment starting with
	// "." (/.git/config, /.env), except a leading /.well-known/, and
	// leaves such names out of listings.
	HideDotfiles bool
}

// Request is what the file layer needs of a GET or HEAD request.
type Request struct {
	Head   bool   // HEAD: headers only
	Path   []byte // percent-encoded path, starting with "/"
	Query  []byte // raw query, without "?"; nil when absent
	Header Headers
	// AlsoETag is another strong entity-tag of the file's bytes that
	// conditional requests may name ("" for none): an edge cache
	// object's, from its origin, which the clients of its misses got.
	AlsoETag string
}

// Part is a piece of a response body: Mem when non-nil, else Len bytes of
// the response's File from Off.
type Part struct {
	Mem      []byte
	Off, Len int64
}

// Response is the plan for answering a request. Strings and slices alias
// cache entries and Scratch; they stay valid until Scratch.Reset.
type Response struct {
	Status          int
	ContentType     string
	ContentLength   int64 // of the body that a GET would carry
	ContentEncoding string
	ContentRange    []byte // for a single-range 206 or a 416
	ETag            string
	LastModified    string
	Location        []byte // for redirects
	Vary            bool   // Vary: Accept-Encoding
	AcceptRanges    bool
	Allow           bool // Allow: GET, HEAD (with 405)
	NoBody          bool // HEAD, 304: send the head only
	// File is the entry whose descriptor the file parts read from.
	File  *Entry
	Parts []Part
	// Bulk is the number of body bytes read from the file, for the bulk
	// policy (congestion control, kernel TLS promotion).
	Bulk int64
	// Err says why a request was refused (400, 403, 500), for the log.
	// Never sent to the client.
	Err error
	// ReprDigest is the Repr-Digest field value, when the digest of the
	// whole representation is known (and the client did not refuse it).
	ReprDigest string
	// NeedDigest is the entry whose digest is not known yet: the caller
	// queues hashing it, as a file of DigestRoot when that is set (an
	// outboard tree) or of the site's root.
	NeedDigest *Entry
	DigestRoot *Root
	// NeedTree is a file whose digest is known but whose outboard tree
	// is missing: the caller queues hashing it again to write the tree.
	NeedTree *Entry
	// Link is the Link field value: the file's outboard tree.
	Link []byte
	// RetryAfter is the Retry-After value in seconds for a 503.
	RetryAfter int
}

// Scratch is one connection's working memory for the file layer: buffers
// reused across requests, the references the current response holds, and
// the paths a worker must open before the request can be answered.
// Owned by the connection; a worker touches it only while the connection
// waits for it.
type Scratch struct {
	key, rel, tmp, idx []byte
	held               []*Entry
	opened             []opened
	need               []opened // e nil: to be opened by Fetch
	listing            []byte   // a directory listing read by Fetch
	listingRel         string   // the directory it lists
	needListing        bool     // Fetch must list listingRel
	listed             bool     // Fetch listed listingRel (listing nil: it failed)
	ranges             []Range
	parts              []Part
	link               []byte
	mp                 []byte
	Resp               Response
}

type opened struct {
	root *Root
	rel  string
	e    *Entry
}

// Reset releases every reference held for the last request.
func (s *Scratch) Reset() {
	for _, e := range s.held {
		e.Release()
	}
	for _, o := range s.opened {
		o.e.Release()
	}
	clear(s.held)
	s.held = s.held[:0]
	clear(s.opened)
	s.opened = s.opened[:0]
	s.need = s.need[:0]
	s.listing, s.listingRel, s.needListing, s.listed = nil, "", false, false
	s.Resp = Response{}
}

// Pending reports whether Serve stopped because something must be opened.
func (s *Scratch) Pending() bool { return len(s.need) > 0 || s.needListing }

// Fetch does the blocking work Serve asked for: opening files and reading
// a directory. Call it off the reactor, then call Serve again.
func (s *Scratch) Fetch(c *Cache, site *Site) {
	for _, n := range s.need {
		s.opened = append(s.opened, opened{root: n.root, rel: n.rel, e: c.Open(n.root, n.rel)})
	}
	s.need = s.need[:0]
	if s.needListing {
		s.listing = listDirectory(site.Root, s.listingRel, site.HideDotfiles)
		s.needListing, s.listed = false, true
	}
}

// lookup finds rel among the entries opened for this request or in the
// cache; on a miss it records rel in need and returns nil.
func (s *Scratch) lookup(c *Cache, root *Root, rel []byte) *Entry {
	for i := range s.opened {
		if s.opened[i].root == root && s.opened[i].rel == string(rel) {
			return s.opened[i].e
		}
	}
	e, key := c.Lookup(root, rel, s.key)
	s.key = key
	if e == nil {
		s.need = append(s.need, opened{root: root, rel: string(rel)})
		return nil
	}
	s.held = append(s.held, e)
	return e
}

// maxRounds bounds the worker round trips one request may take.
const maxOpened = 12

// Serve plans the answer to req and stores it in s.Resp. It returns false
// when it needs files opened first (s.Pending() is true): run s.Fetch on a
// worker, then call Serve again. It never blocks.
func (c *Cache) Serve(site *Site, req *Request, s *Scratch) bool {
	r := &s.Resp
	*r = Response{}
	rel, dirSlash, err := CleanPath(req.Path, s.rel)
	s.rel = rel[:0]
	if err != nil {
		ErrorResponse(r, 400)
		r.Err = err
		return true
	}
	if site.HideDotfiles && hidden(rel) || isPrecompressTemp(rel) {
		ErrorResponse(r, 404)
		return true
	}
	if len(s.opened) > maxOpened {
		ErrorResponse(r, 500)
		return true
	}
	if c.cfg.Outboards != nil && !dirSlash {
		if base, ok := outboardBase(rel); ok {
			b := s.lookup(c, site.Root, base)
			if b == nil {
				return false
			}
			if b.Kind == KindFile && !(site.HideDotfiles && b.viaHidden) {
				return c.serveOutboard(req, s, b)
			}
		}
	}
	e := s.lookup(c, site.Root, rel)
	if e == nil {
		return false
	}
	if site.HideDotfiles && e.viaHidden {
		ErrorResponse(r, 404)
		return true
	}
	switch e.Kind {
	case KindMissing:
		ErrorResponse(r, 404)
		return true
	case KindForbidden:
		ErrorResponse(r, 403)
		r.Err = e.Err
		return true
	case KindError:
		ErrorResponse(r, 500)
		r.Err = e.Err
		return true
	case KindDir:
		if !dirSlash && len(rel) > 0 {
			// nginx and Caddy redirect "/dir" to "/dir/" so relative links
			// in the index resolve. The location is built from the
			// cleaned path, never from the request's bytes: "//evil.com"
			// must not become "//evil.com/", which a browser follows to
			// another host. rel has no empty segment, so it starts "/x".
			loc := append(s.tmp[:0], '/')
			loc = AppendPathEscaped(loc, string(rel), true)
			loc = append(loc, '/')
			if req.Query != nil {
				loc = append(loc, '?')
				loc = append(loc, req.Query...)
			}
			s.tmp = loc
			ErrorResponse(r, 301)
			r.Location = loc
			return true
		}
		return c.serveDir(site, req, s, rel)
	}
	if dirSlash {
		ErrorResponse(r, 404)
		return true
	}
	return c.serveFile(site, req, s, rel, e)
}

func (c *Cache) serveDir(site *Site, req *Request, s *Scratch, rel []byte) bool {
	r := &s.Resp
	// The first index name that is a file wins; a name not yet known
	// before it means a worker must look first.
	unknown := false
	for _, idx := range site.Index {
		p := append(s.idx[:0], rel...)
		if len(p) > 0 {
			p = append(p, '/')
		}
		p = append(p, idx...)
		s.idx = p
		e := s.lookup(c, site.Root, p)
		if e == nil {
			unknown = true
			continue
		}
		if e.Kind == KindFile && !unknown {
			return c.serveFile(site, req, s, p, e)
		}
	}
	if unknown {
		return false
	}
	if !site.Listing {
		ErrorResponse(r, 404)
		return true
	}
	// The root's rel is "": whether it was listed is its own flag.
	if !s.listed || s.listingRel != string(rel) {
		s.listingRel = string(rel)
		s.needListing, s.listed = true, false
		s.listing = nil
		return false
	}
	if s.listing == nil {
		ErrorResponse(r, 500)
		return true
	}
	r.Status = 200
	r.ContentType = "text/html; charset=utf-8"
	r.ContentLength = int64(len(s.listing))
	r.NoBody = req.Head
	s.parts = append(s.parts[:0], Part{Mem: s.listing})
	r.Parts = s.parts
	return true
}

func (c *Cache) serveFile(site *Site, req *Request, s *Scratch, rel []byte, e *Entry) bool {
	r := &s.Resp
	if site.HideDotfiles && e.viaHidden { // an index file linked to a dotfile
		ErrorResponse(r, 404)
		return true
	}
	sel := e
	coding := ""
	vary := false
	if site.Precompressed {
		// Whether the file has sidecars decides Vary for every response,
		// those without Accept-Encoding too: a shared cache must not hand
		// the identity body it stored to a client that accepts br.
		avail, ok := c.sidecars(site, s, rel, e)
		if !ok {
			return false
		}
		if avail != 0 {
			vary = true
			if ae := req.Header.Get("accept-encoding"); ae != nil {
				best, bestQ := -1, 0
				for i, cd := range Codings {
					if avail&(1<<i) == 0 {
						continue
					}
					if q := acceptQ(ae, cd.Name); q > bestQ {
						best, bestQ = i, q
					}
				}
				if best >= 0 {
					side := s.lookup(c, site.Root, s.sidecarPath(rel, best))
					if side == nil {
						return false
					}
					// The sidecar may have changed since e's memo was made;
					// the entry just looked up is what gets served.
					if usableSidecar(site, e, side) {
						sel, coding = side, Codings[best].Name
					}
				}
			}
		}
	}

	dg := sel.Digest()
	if dg == nil {
		r.NeedDigest = sel
		if site.RequireDigest {
			// An artifact host serves nothing it cannot vouch for.
			ErrorResponse(r, 503)
			r.NeedDigest, r.RetryAfter = sel, retryAfter(sel.Size)
			return true
		}
	} else if dg.Corrupt {
		ErrorResponse(r, 500)
		r.Err = errCorrupt
		return true
	}
	etag := sel.currentETag()
	r.ContentType = e.ContentType
	r.ContentEncoding = coding
	r.Vary = vary
	r.ETag = etag
	r.LastModified = sel.LastModified
	r.AcceptRanges = true
	r.File = sel
	if dg != nil {
		r.ReprDigest = reprDigest(req.Header.Get("want-repr-digest"), dg)
	}
	if c.cfg.Outboards != nil && rel != nil && site != c.outboardSite {
		s.link = appendOutboardLink(s.link[:0], rel)
		r.Link = s.link
	}

	switch evalPreconditions(req.Header, etag, sel.ETag, req.AlsoETag, sel.ModTime) {
	case condNotModified:
		r.Status = 304
		r.NoBody = true
		return true
	case condFailed:
		ErrorResponse(r, 412)
		r.ETag, r.LastModified, r.Vary = etag, sel.LastModified, vary
		return true
	}

	size := sel.Size
	ranges := s.ranges[:0]
	result := rangeIgnore
	if rh := req.Header.Get("range"); rh != nil && !req.Head && ifRangeAllows(req.Header, etag, sel.ETag, req.AlsoETag, sel.LastModified) {
		ranges, result = ParseRange(rh, size, ranges)
		s.ranges = ranges
	}
	r.NoBody = req.Head
	parts := s.parts[:0]
	switch result {
	case rangeUnsatisfiable:
		ErrorResponse(r, 416)
		r.ContentRange = append(append(s.mp[:0], "bytes */"...), strconv.FormatInt(size, 10)...)
		s.mp = r.ContentRange
		r.ETag, r.LastModified, r.AcceptRanges, r.Vary = etag, sel.LastModified, true, vary
		return true
	case rangeOK:
		r.Status = 206
		if len(ranges) == 1 {
			rg := ranges[0]
			r.ContentRange = AppendContentRange(s.mp[:0], rg, size)
			s.mp = r.ContentRange
			r.ContentLength = rg.Len
			parts = append(parts, filePart(sel, rg.Off, rg.Len))
			r.Bulk = rg.Len
			break
		}
		b := newBoundary()
		parts, r.ContentLength = multipart(s, sel, r.ContentType, b, ranges, size, parts)
		r.ContentType = "multipart/byteranges; boundary=" + b
		for _, rg := range ranges {
			r.Bulk += rg.Len
		}
	default:
		r.Status = 200
		r.ContentLength = size
		if size > 0 {
			parts = append(parts, filePart(sel, 0, size))
		}
		r.Bulk = size
	}
	s.parts = parts
	r.Parts = parts
	return true
}

// hidden reports whether a cleaned path names a dotfile or passes
// through a dot directory. "/.well-known/" (RFC 8615) stays visible.
func hidden(rel []byte) bool {
	for i := 0; i < len(rel); i++ {
		if rel[i] != '.' || (i > 0 && rel[i-1] != '/') {
			continue
		}
		if i == 0 && (string(rel) == ".well-known" || bytes.HasPrefix(rel, []byte(".well-known/"))) {
			continue
		}
		return true
	}
	return false
}

var errCorrupt = errors.New("files: content contradicts the manifest (on_mismatch = \"refuse\")")

// retryAfter estimates, in seconds, when a file of size bytes will have
// been hashed (at a conservative 500 MB/s, behind a short queue).
func retryAfter(size int64) int { return 1 + int(size/500_000_000) }

// reprDigest is the Repr-Digest value for a client's Want-Repr-Digest
// (RFC 9530 §4): absent, every digest known; present, those it gives a
// non-zero preference (or "*" does, for one it does not name).
func reprDigest(want []byte, dg *Digest) string {
	if want == nil {
		return dg.Header
	}
	b3, sha := wants(want, "blake3"), dg.HeaderSHA != "" && wants(want, "sha-256")
	switch {
	case b3 && sha:
		return dg.Header
	case b3:
		if dg.HeaderB3 != "" {
			return dg.HeaderB3
		}
		return dg.Header
	case sha:
		return dg.HeaderSHA
	}
	return ""
}

// wants reads a Want-Repr-Digest value for one algorithm.
func wants(v []byte, alg string) bool {
	star := -1
	for _, item := range bytes.Split(v, []byte(",")) {
		k, w, _ := bytes.Cut(trimOWS(item), []byte("="))
		pref := 1
		if n, ok := parseDigits(trimOWS(w)); ok {
			pref = int(n)
		}
		switch string(bytes.ToLower(trimOWS(k))) {
		case alg:
			return pref > 0
		case "*":
			star = pref
		}
	}
	return star > 0
}

// filePart serves from memory when the entry holds the file's content.
func filePart(e *Entry, off, n int64) Part {
	if e.Small != nil {
		return Part{Mem: e.Small[off : off+n]}
	}
	return Part{Off: off, Len: n}
}

// newBoundary returns a fresh multipart/byteranges boundary: 24 hex
// digits from a CSPRNG (math/rand/v2's ChaCha8, randomly seeded). A fixed
// boundary let a file that contains it forge parts of its own (another
// Content-Type, fake ranges) and end the body early in a client's eyes;
// a file cannot guess a boundary chosen per response.
func newBoundary() string {
	const hex = "0123456789abcdef"
	var b [24]byte
	x, y := rand.Uint64(), rand.Uint32()
	for i := 0; i < 16; i++ {
		b[i] = hex[x>>(4*i)&15]
	}
	for i := 0; i < 8; i++ {
		b[16+i] = hex[y>>(4*i)&15]
	}
	return string(b[:])
}

func multipart(s *Scratch, e *Entry, ctype, boundary string, ranges []Range, size int64, parts []Part) ([]Part, int64) {
	// Build all part headers in one buffer first; slices into it are taken
	// after, since appending may move it.
	buf := s.mp[:0]
	offs := make([]int, 0, len(ranges)+1)
	for _, rg := range ranges {
		offs = append(offs, len(buf))
		buf = append(buf, "\r\n--"...)
		buf = append(buf, boundary...)
		buf = append(buf, "\r\nContent-Type: "...)
		buf = append(buf, ctype...)
		buf = append(buf, "\r\nContent-Range: "...)
		buf = AppendContentRange(buf, rg, size)
		buf = append(buf, "\r\n\r\n"...)
	}
	offs = append(offs, len(buf))
	buf = append(buf, "\r\n--"...)
	buf = append(buf, boundary...)
	buf = append(buf, "--\r\n"...)
	s.mp = buf
	var total int64
	for i, rg := range ranges {
		hdr := buf[offs[i]:offs[i+1]]
		parts = append(parts, Part{Mem: hdr}, filePart(e, rg.Off, rg.Len))
		total += int64(len(hdr)) + rg.Len
	}
	tail := buf[offs[len(ranges)]:]
	parts = append(parts, Part{Mem: tail})
	total += int64(len(tail))
	return parts, total
}

// ErrorResponse fills r with a small HTML error page for status.
func ErrorResponse(r *Response, status int) {
	page, ok := errorPages[status]
	if !ok {
		status, page = 500, errorPages[500]
	}
	*r = Response{Status: status, ContentType: "text/html; charset=utf-8",
		ContentLength: page[0].Len, Parts: page}
}

// errorPages holds each error page as a one-part body, built once.
var errorPages = func() map[int][]Part {
	m := map[int][]Part{}
	for code, text := range map[int]string{
		301: "Moved Permanently", 302: "Found", 303: "See Other", 307: "Temporary Redirect", 308: "Permanent Redirect", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
		405: "Method Not Allowed", 408: "Request Timeout", 412: "Precondition Failed",
		414: "URI Too Long", 416: "Range Not Satisfiable", 421: "Misdirected Request",
		413: "Content Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
		500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable",
		504: "Gateway Timeout", 505: "HTTP Version Not Supported",
	} {
		t := strconv.Itoa(code) + " " + text
		body := []byte("<html><head><title>" + t + "</title></head><body><h1>" + t + "</h1></body></html>\n")
		m[code] = []Part{{Mem: body, Len: int64(len(body))}}
	}
	return m
}()
