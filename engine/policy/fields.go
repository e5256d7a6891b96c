package policy

import (
	"bytes"
	"net/url"
	"strings"
)

// Writer takes response fields in one protocol's form: the name
// lowercase (HTTP/2 and HTTP/3) and as HTTP/1.1 spells it.
type Writer interface {
	Field(lower, canonical, value string)
}

// Resp is what one response needs of its request's policy.
type Resp struct {
	Path *Path
	// Origin is the request's Origin when the path's CORS allows it.
	Origin string
	// Name is the file's name, for Content-Disposition; nil when the
	// response is no file's.
	Name []byte
	// TLS: the response goes over TLS (HSTS).
	TLS bool
	// Preflight: the response answers a CORS preflight.
	Preflight bool
	// Challenge is the WWW-Authenticate value of a 401.
	Challenge string
	// A response from the edge cache: the Cache-Status field (RFC 9211),
	// the stored fields given again (a name's lowercase form, its name,
	// its value), and the stored Content-Type.
	CacheStatus string
	Stored      [][3]string
	StoredType  string
	// Hit: the response is an edge cache object's file, whose own Link
	// (to its tree, at a path of the cache's that clients are not
	// served) is left out.
	Hit bool
	// SigQuery is a signed request's signature parameters (Verdict's):
	// they go with the Link to the file's outboard tree.
	SigQuery []byte
}

// LinkParts splits the Link field value link where the request's
// signature goes ("</f.obao" + "?" + q + ">; rel=..."): q is nil when the
// link takes none.
func (r *Resp) LinkParts(link []byte) (head, q, tail []byte) {
	if r == nil || len(r.SigQuery) == 0 {
		return link, nil, nil
	}
	q = r.SigQuery
	i := bytes.IndexByte(link, '>')
	if i < 0 || bytes.IndexByte(link[:i], '?') >= 0 {
		return link, nil, nil
	}
	return link[:i], q, link[i:]
}

// Link returns the Link field value link with the request's signature
// added to its URI: "</f.obao?exp=...>; rel=...".
func (r *Resp) Link(link []byte) []byte {
	head, q, tail := r.LinkParts(link)
	if q == nil {
		return link
	}
	out := make([]byte, 0, len(link)+len(q)+1)
	out = append(append(append(out, head...), '?'), q...)
	return append(out, tail...)
}

// Omits reports whether the engine's own field lower (Server,
// Content-Type, ...) is left out of a response of status: the policy
// removes it, or sets it on such a response.
func (r *Resp) Omits(lower string, status int) bool {
	if r == nil {
		return false
	}
	if r.Hit && lower == "link" {
		return true
	}
	if r.Path == nil {
		return false
	}
	p := r.Path
	if b := ownBit(lower); b != 0 {
		return p.removesOwn&b != 0 || p.setsOwn&b != 0 && p.setsOn(status)
	}
	return p.removes[lower] || p.setNames[lower] && p.setsOn(status)
}

// ownBit is the bit of a field the engine writes itself and a policy may
// set or remove (those Omits is asked about), or 0.
func ownBit(lower string) uint8 {
	switch lower {
	case "server":
		return 1
	case "content-type":
		return 2
	case "link":
		return 4
	case "cache-control":
		return 8
	case "strict-transport-security":
		return 16
	case "content-disposition":
		return 32
	}
	return 0
}

// setsOn reports whether set_headers and add_headers apply to a
// response of status.
func (p *Path) setsOn(status int) bool { return status < 400 || p.errorsToo }

// ContentType is the media type the policy gives the file, or "" to keep
// the engine's.
func (r *Resp) ContentType() string {
	if r != nil && r.StoredType != "" {
		return r.StoredType
	}
	if r == nil || r.Path == nil || r.Name == nil {
		return ""
	}
	return r.Path.TypeFor(r.Name)
}

// VaryOrigin reports whether the response varies by Origin: CORS that
// names its origins answers each with its own.
func (r *Resp) VaryOrigin() bool {
	return r != nil && r.Path != nil && r.Path.cors && (!r.Path.anyOrigin || r.Path.credentials)
}

// Write gives w the policy's fields for a response of status; file says
// it is a site's file or listing response (200, 206, 304), whose
// Cache-Control the policy chooses.
func (r *Resp) Write(w Writer, status int, file bool) {
	if r == nil {
		return
	}
	for _, f := range r.Stored {
		if !r.Drops([]byte(f[0]), status) {
			w.Field(f[0], f[1], f[2])
		}
	}
	if r.CacheStatus != "" {
		w.Field("cache-status", "Cache-Status", r.CacheStatus)
	}
	if r.Path == nil {
		return
	}
	p := r.Path
	switch {
	case r.Omits("cache-control", status):
	case file && p.cacheControl != "":
		w.Field("cache-control", "Cache-Control", p.cacheControl)
	case !file && p.gated && !p.proxied && !r.Preflight:
		// A refusal, a redirect (its Location may carry the signature),
		// a 404 or a 416 of a gated path: no cache keeps it.
		w.Field("cache-control", "Cache-Control", "private, no-store")
	}
	if r.TLS && p.hsts != "" && !r.Omits("strict-transport-security", status) {
		w.Field("strict-transport-security", "Strict-Transport-Security", p.hsts)
	}
	if file && r.Name != nil && status != 304 && !r.Omits("content-disposition", status) {
		if kind := p.dispositionFor(r.Name); kind != "" {
			w.Field("content-disposition", "Content-Disposition", Disposition(kind, string(r.Name)))
		}
	}
	if r.Origin != "" {
		if p.anyOrigin && !p.credentials {
			w.Field("access-control-allow-origin", "Access-Control-Allow-Origin", "*")
		} else {
			w.Field("access-control-allow-origin", "Access-Control-Allow-Origin", r.Origin)
		}
		if p.credentials {
			w.Field("access-control-allow-credentials", "Access-Control-Allow-Credentials", "true")
		}
		if r.Preflight {
			w.Field("access-control-allow-methods", "Access-Control-Allow-Methods", p.allowMethod)
			w.Field("access-control-allow-headers", "Access-Control-Allow-Headers", p.allowHeader)
			w.Field("access-control-max-age", "Access-Control-Max-Age", p.maxAge)
		} else {
			w.Field("access-control-expose-headers", "Access-Control-Expose-Headers", p.expose)
		}
	}
	if r.Challenge != "" {
		w.Field("www-authenticate", "WWW-Authenticate", r.Challenge)
	}
	if p.setsOn(status) {
		for _, f := range p.sets {
			w.Field(f.lower, f.name, f.value)
		}
		for _, f := range p.adds {
			w.Field(f.lower, f.name, f.value)
		}
	}
}

// Disposition is a Content-Disposition value for a file name: an ASCII
// filename (quoted, with what cannot be quoted replaced by "_") and,
// when the name is not plain ASCII, filename* (RFC 6266, RFC 8187).
func Disposition(kind, name string) string {
	var b strings.Builder
	b.WriteString(kind)
	b.WriteString(`; filename="`)
	plain := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '%':
			b.WriteByte('_')
			plain = false
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	if !plain {
		b.WriteString("; filename*=UTF-8''")
		b.WriteString(strings.ReplaceAll(url.PathEscape(name), "'", "%27"))
	}
	return b.String()
}

// AllowOrigin returns origin when the path's CORS lets its pages read
// responses, else "".
func (p *Path) AllowOrigin(origin []byte) string {
	if !p.cors || len(origin) == 0 {
		return ""
	}
	if p.origins[string(origin)] {
		return string(origin)
	}
	if p.anyOrigin {
		return string(origin)
	}
	return ""
}

// CORS reports whether the path answers cross-origin requests.
func (p *Path) CORS() bool { return p.cors }

// PreflightOK reports whether a preflight asking for method and the
// comma-separated request fields headers may pass.
func (p *Path) PreflightOK(method, headers []byte) bool {
	if !p.methods[string(method)] {
		return false
	}
	for _, h := range strings.Split(string(headers), ",") {
		h = strings.ToLower(strings.TrimSpace(h))
		if h != "" && !p.headers[h] {
			return false
		}
	}
	return true
}

// Drops reports whether a proxied response's field from the upstream is
// left out: the route's policy sets or removes it, or, with CORS, writes
// the Access-Control fields itself.
func (r *Resp) Drops(name []byte, status int) bool {
	if r == nil || r.Path == nil {
		return false
	}
	p := r.Path
	if len(p.removes)+len(p.setNames) == 0 && !p.cors {
		return false
	}
	var buf [64]byte
	if len(name) > len(buf) {
		return false // no field the policy names is this long
	}
	lower := buf[:len(name)]
	for i, c := range name {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	if p.cors && strings.HasPrefix(string(lower), "access-control-") {
		return true
	}
	return r.Omits(string(lower), status)
}

// WriteProxied gives w the route's fields for a proxied response of
// status, after the upstream's.
func (r *Resp) WriteProxied(w Writer, status int) {
	if r.VaryOrigin() {
		w.Field("vary", "Vary", "Origin")
	}
	r.Write(w, status, status == 200 || status == 206 || status == 304)
}
