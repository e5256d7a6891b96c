package reframe

import (
	"bytes"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"

	"github.com/mediaship/engine/h1"
)

// IdempotentMethods may be retried on a fresh connection when a reused
// one was closed under them (RFC 9110 §9.2.2), if they carry no body.
var IdempotentMethods = map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PUT": true, "DELETE": true}

func Clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// hopByHop are the fields a proxy never forwards (RFC 9110 §7.6.1), with
// the framing fields it writes itself. (Trailer, which announces
// trailers, is end-to-end: it goes on.)
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "te": true, "transfer-encoding": true,
	"upgrade": true, "proxy-connection": true, "proxy-authenticate": true, "proxy-authorization": true,
	"content-length": true, "expect": true,
}

// DropField reports whether a field of a message with the given
// Connection header value must not be forwarded.
func DropField(name, connection []byte) bool {
	var buf [64]byte
	low := buf[:0]
	if len(name) > len(buf) {
		low = make([]byte, 0, len(name))
	}
	for _, ch := range name {
		if ch >= 'A' && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		low = append(low, ch)
	}
	if hopByHop[string(low)] || len(low) > 6 && string(low[:6]) == "proxy-" {
		return true
	}
	return connection != nil && tokenListHasLower(connection, low)
}

// tokenListHasLower reports whether the comma-separated list v names
// tok, which is lowercase (v is compared ASCII case-insensitively).
func tokenListHasLower(v, tok []byte) bool {
	for len(v) > 0 {
		i := 0
		for i < len(v) && v[i] != ',' {
			i++
		}
		item := v[:i]
		for len(item) > 0 && (item[0] == ' ' || item[0] == '\t') {
			item = item[1:]
		}
		for len(item) > 0 && (item[len(item)-1] == ' ' || item[len(item)-1] == '\t') {
			item = item[:len(item)-1]
		}
		if h1.EqualFold(item, string(tok)) {
			return true
		}
		if i == len(v) {
			break
		}
		v = v[i+1:]
	}
	return false
}

// Request is what the request for the upstream is made of,
// whichever protocol the client spoke.
type Request struct {
	Method, Path, Query, Host []byte
	Fields                    []h1.Header
	Connection                []byte // the client's Connection value (HTTP/1.x)
	Via                       string // the client's protocol version: "1.1", "2", "3"
	Peer                      netip.Addr
	Upstream                  string // host:port of the upstream: the Host of a request without one
	TLS                       bool
	ContentLength             int64 // -1: none given
	Chunked                   bool  // the body goes chunked
}

// Head writes the HTTP/1.1 request head for the upstream: the
// client's method, path and fields, minus hop-by-hop fields and the
// forwarding fields of clients not among trusted, plus X-Forwarded-For,
// X-Forwarded-Proto, X-Forwarded-Host, Forwarded and Via.
func Head(u *Request, trustedProxies []netip.Prefix) []byte {
	peer := u.Peer.Unmap()
	trusted := false
	for _, p := range trustedProxies {
		if p.Contains(peer) {
			trusted = true
			break
		}
	}
	proto := "http"
	if u.TLS {
		proto = "https"
	}
	b := make([]byte, 0, 512)
	b = append(b, u.Method...)
	b = append(b, ' ')
	b = append(b, u.Path...)
	if u.Query != nil {
		b = append(b, '?')
		b = append(b, u.Query...)
	}
	b = append(b, " HTTP/1.1\r\n"...)
	var xff, xfp, xfh, fwd, cookie []byte
	// Host is the authority the request was routed by (an absolute-form
	// target's wins over the Host field, RFC 9112 §3.2.2), so the upstream
	// never sees a host the route did not match; a request with none
	// (HTTP/1.0) names the upstream.
	// (So does one whose Host names no host: ".", a port alone.)
	if namesNoHost(u.Host) {
		u.Host = nil
	}
	host := u.Host
	if len(host) == 0 {
		host = []byte(u.Upstream)
	}
	b = append(append(append(b, "Host: "...), host...), "\r\n"...)
	for _, f := range u.Fields {
		if DropField(f.Name, u.Connection) {
			continue
		}
		switch {
		case h1.EqualFold(f.Name, "host"):
			continue
		case !trusted && untrustedForward(f.Name):
			// Forwarding fields a client made up, and names with "_"
			// that CGI-style backends read as their "-" twins
			// (X_Forwarded_For): dropped, as nginx drops underscored names.
			continue
		case h1.EqualFold(f.Name, "x-forwarded-for"):
			xff = appendList(xff, f.Value, trusted)
			continue
		case h1.EqualFold(f.Name, "x-forwarded-proto"):
			xfp = appendList(xfp, f.Value, trusted)
			continue
		case h1.EqualFold(f.Name, "x-forwarded-host"):
			xfh = appendList(xfh, f.Value, trusted)
			continue
		case h1.EqualFold(f.Name, "forwarded"):
			fwd = appendList(fwd, f.Value, trusted)
			continue
		case h1.EqualFold(f.Name, "cookie") && u.Via != "1.1" && u.Via != "1.0":
			// HTTP/2 and HTTP/3 may split cookies over fields; HTTP/1.1
			// has one Cookie line (RFC 9113 §8.2.3).
			if cookie != nil {
				cookie = append(cookie, "; "...)
			}
			cookie = append(cookie, f.Value...)
			continue
		}
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	if cookie != nil {
		b = append(append(append(b, "Cookie: "...), cookie...), "\r\n"...)
	}
	if xff != nil {
		xff = append(xff, ", "...)
	}
	xff = peer.AppendTo(xff)
	b = append(append(append(b, "X-Forwarded-For: "...), xff...), "\r\n"...)
	if xfp == nil {
		xfp = []byte(proto)
	}
	b = append(append(append(b, "X-Forwarded-Proto: "...), xfp...), "\r\n"...)
	if xfh == nil {
		xfh = u.Host
	}
	if len(xfh) == 0 {
		xfh = nil
	}
	if xfh != nil {
		b = append(append(append(b, "X-Forwarded-Host: "...), xfh...), "\r\n"...)
	}
	// Forwarded (RFC 7239): for= the client, host=, proto=; an IPv6
	// address is a quoted, bracketed string.
	b = append(b, "Forwarded: "...)
	if fwd != nil {
		b = append(append(b, fwd...), ", "...)
	}
	b = append(b, "for="...)
	if peer.Is6() {
		b = append(peer.AppendTo(append(b, "\"["...)), "]\""...)
	} else {
		b = peer.AppendTo(b)
	}
	switch {
	case u.Host == nil:
	case httpToken(u.Host):
		b = append(append(b, ";host="...), u.Host...)
	case quotable(u.Host): // a port, an IPv6 literal
		b = append(append(append(b, ";host=\""...), u.Host...), '"')
	}
	b = append(append(append(b, ";proto="...), proto...), "\r\n"...)
	b = append(append(append(b, "Via: "...), u.Via...), " engine\r\n"...)
	switch {
	case u.Chunked:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case u.ContentLength >= 0:
		b = strconv.AppendInt(append(b, "Content-Length: "...), u.ContentLength, 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// namesNoHost reports whether a Host value names no host: empty, ".",
// or a port alone (what normHost makes "").
func namesNoHost(h []byte) bool {
	if len(h) > 0 && h[0] == '[' {
		return false // an IPv6 literal
	}
	if i := bytes.IndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	return len(h) == 0 || len(h) == 1 && h[0] == '.'
}

// quotable reports whether v can be written as a quoted-string without
// escapes (RFC 9110 §5.6.4): no '"', '\\' or control character.
func quotable(v []byte) bool {
	for _, c := range v {
		if c == '"' || c == '\\' || c < ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// untrustedForward reports whether a field from a client that is not a
// trusted proxy is dropped: X-Forwarded-* (the ones the proxy writes are
// written anew), X-Real-IP, and any name with an underscore.
func untrustedForward(name []byte) bool {
	if len(name) >= 12 && h1.EqualFold(name[:12], "x-forwarded-") || h1.EqualFold(name, "x-real-ip") {
		return true
	}
	for _, c := range name {
		if c == '_' {
			return true
		}
	}
	return false
}

// ValidFieldValue reports whether v can be an HTTP/1.1 field value:
// no control character but HTAB (RFC 9110 §5.5).
func ValidFieldValue(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// AppendTrailers appends the trailer lines of raw (field lines, each
// ending in CRLF, as h1.BodyReader keeps them) that may be passed on:
// not framing, routing or hop-by-hop fields.
func AppendTrailers(dst, raw []byte) []byte {
	EachTrailer(raw, func(line, _, _ []byte) { dst = append(dst, line...) })
	return dst
}

// AppendRequestTrailers is AppendTrailers for a request's trailers on
// their way to the upstream: forwarding fields (X-Forwarded-*,
// Forwarded, X-Real-IP, Via, underscored names) and Cookie are dropped
// too, from any client, so that an upstream that merges trailers into
// its header fields never takes them for the proxy's. (nginx passes no
// request trailers at all.)
func AppendRequestTrailers(dst, raw []byte) []byte {
	EachTrailer(raw, func(line, name, _ []byte) {
		if untrustedForward(name) || h1.EqualFold(name, "forwarded") || h1.EqualFold(name, "via") || h1.EqualFold(name, "cookie") {
			return
		}
		dst = append(dst, line...)
	})
	return dst
}

// TrailerFields are the trailers of raw that may be passed on, as
// HTTP/2 and HTTP/3 carry them: lower-case names, values trimmed.
func TrailerFields(raw []byte) []hpack.HeaderField {
	var out []hpack.HeaderField
	EachTrailer(raw, func(_, name, value []byte) {
		out = append(out, hpack.HeaderField{Name: strings.ToLower(string(name)), Value: string(value)})
	})
	return out
}

// notTrailers are fields that must not arrive after the content, beyond
// httpguts.ValidTrailerHeader's list: response control data (RFC 9110
// §6.5.1) and state a client would take for a header's.
var notTrailers = map[string]bool{"Host": true, "Set-Cookie": true, "Location": true, "Date": true, "Age": true, "Expires": true,
	"Retry-After": true, "Vary": true, "Strict-Transport-Security": true, "Alt-Svc": true, "Content-Disposition": true, "Content-Location": true}

// EachTrailer calls f with each trailer line of raw that may be passed
// on, its name and its value (without surrounding whitespace).
func EachTrailer(raw []byte, f func(line, name, value []byte)) {
	for len(raw) > 0 {
		end := bytes.Index(raw, []byte("\r\n"))
		if end < 0 {
			break
		}
		line := raw[:end+2]
		raw = raw[end+2:]
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue
		}
		name := line[:colon]
		if canon := textproto.CanonicalMIMEHeaderKey(string(name)); DropField(name, nil) || !httpguts.ValidTrailerHeader(canon) || notTrailers[canon] {
			continue // framing, routing, hop-by-hop, or a field RFC 9110 §6.5.1 keeps out of trailers
		}
		f(line, name, bytes.Trim(line[colon+1:end], " \t"))
	}
}

// appendList adds v to a comma-separated list, if keep is set (the
// client is a trusted proxy).
func appendList(list, v []byte, keep bool) []byte {
	if !keep {
		return list
	}
	if list != nil {
		list = append(list, ", "...)
	}
	return append(list, v...)
}

// httpToken reports whether v can be a Forwarded parameter value without
// quoting (a host, possibly with a port).
func httpToken(v []byte) bool {
	for _, ch := range v {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '.' || ch == '_') {
			return false
		}
	}
	return len(v) > 0
}

// UnsafePath reports whether a request path would mean something
// else to an upstream than to the route that matched it: dot segments,
// an encoded slash, dot or backslash (a path that "/api/../admin"
// would reach the upstream's /admin through the route for /api/), or a
// "%" that starts no escape (servers decode "%u002e" and the like
// their own ways).
func UnsafePath(p []byte) bool {
	// segEnd: what may follow a dot segment for some server to read it as
	// one: the end, "/", or ";" (Tomcat and Jetty read "..;x" as "..").
	segEnd := func(i int) bool { return i == len(p) || p[i] == '/' || p[i] == ';' }
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			return true
		case '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return true
			}
			// %2e %2f %5c, and %c0 %c1 (overlong UTF-8 for "." and "/",
			// never valid).
			a, b := p[i+1]|0x20, p[i+2]|0x20
			if a == '2' && (b == 'e' || b == 'f') || a == '5' && b == 'c' || a == 'c' && (b == '0' || b == '1') {
				return true
			}
		case '.':
			if p[i-1] == '/' && (segEnd(i+1) || p[i+1] == '.' && segEnd(i+2)) {
				return true
			}
		}
	}
	return false
}

// CopyRespField reports whether a response field goes to the client:
// not hop-by-hop nor named by the upstream's Connection (conn), and not
// Content-Length, which the proxy writes itself, except on a response
// without a body where it describes the representation (HEAD, 304).
func CopyRespField(name, conn []byte, status int, hasBody bool) bool {
	if h1.EqualFold(name, "content-length") {
		return !hasBody && status != 204 && status >= 200
	}
	return !DropField(name, conn)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f'
}
