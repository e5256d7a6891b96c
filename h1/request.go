package h1

import (
	"bytes"
	"errors"
	"github.com/mediaship/engine/internal/httpsyntax"
)

// ErrIncomplete means the buffer does not yet hold a whole request head.
// Read more and call Parse again with the longer buffer.
var ErrIncomplete = errors.New("h1: incomplete request head")

// Error is a request the server must refuse. Status is the response code to
// answer with; the connection is closed after the answer.
type Error struct {
	Status int
	Reason string // for logs; never sent to the client
}

func (e *Error) Error() string { return "h1: " + e.Reason }

func fail(status int, reason string) *Error { return &Error{Status: status, Reason: reason} }

// Limits bounds what a request head may use. The zero value of a field
// means its default.
type Limits struct {
	// MaxHeadBytes bounds the request line plus all header lines.
	// Zero means 16 KiB. A larger head is answered with 431 (or 414 when
	// the request line alone is too long).
	MaxHeadBytes int
	// MaxHeaders bounds the number of header lines. Zero means 100.
	MaxHeaders int
	// MaxTargetBytes bounds the request-target. Zero means 8 KiB.
	// A longer target is answered with 414.
	MaxTargetBytes int
}

func (l Limits) withDefaults() Limits {
	if l.MaxHeadBytes <= 0 {
		l.MaxHeadBytes = 16 << 10
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = 100
	}
	if l.MaxTargetBytes <= 0 {
		l.MaxTargetBytes = 8 << 10
	}
	return l
}

// Header is one field line. Name and Value alias the parsed buffer; Value
// has its surrounding whitespace removed.
type Header struct {
	Name, Value []byte
}

// Request is a parsed request head. All byte slices alias the buffer given
// to Parse.
type Request struct {
	Method []byte
	Target []byte // as sent: origin-form, absolute-form, asterisk or authority
	Path   []byte // the path of Target, still percent-encoded ("/" for "*")
	Query  []byte // after '?', without it; nil when absent
	Minor  int    // HTTP/1.Minor: 0 or 1

	// Host is the authority the request is for: the one in an
	// absolute-form target, else the Host header. Nil for HTTP/1.0
	// requests without one.
	Host []byte

	Headers []Header

	// ContentLength is the body length from Content-Length, or -1 when
	// the request has no Content-Length.
	ContentLength int64
	Chunked       bool // Transfer-Encoding: chunked
	Close         bool // the connection must close after this response
}

// HasBody reports whether a body follows the head.
func (r *Request) HasBody() bool { return r.Chunked || r.ContentLength > 0 }

// Get returns the value of the first header named name (ASCII
// case-insensitive), or nil.
func (r *Request) Get(name string) []byte {
	for i := range r.Headers {
		if equalFold(r.Headers[i].Name, name) {
			return r.Headers[i].Value
		}
	}
	return nil
}

// Values appends the values of every header named name (ASCII
// case-insensitive), in their order, to dst.
func (r *Request) Values(name string, dst [][]byte) [][]byte {
	for i := range r.Headers {
		if equalFold(r.Headers[i].Name, name) {
			dst = append(dst, r.Headers[i].Value)
		}
	}
	return dst
}

// Parser parses request heads. Its header storage is reused between
// requests, so parsing allocates nothing once the first request has been
// seen. A Parser is owned by one connection.
type Parser struct {
	limits  Limits
	headers []Header
}

// NewParser returns a parser that enforces l.
func NewParser(l Limits) *Parser {
	l = l.withDefaults()
	return &Parser{limits: l, headers: make([]Header, 0, min(l.MaxHeaders, 32))}
}

// Limits returns the limits in force, defaults filled in.
func (p *Parser) Limits() Limits { return p.limits }

// Parse parses one request head from the start of buf into r. It returns
// the number of bytes the head used (the body, if any, starts there), or
// ErrIncomplete, or an *Error.
func (p *Parser) Parse(buf []byte, r *Request) (int, error) {
	*r = Request{ContentLength: -1, Headers: p.headers[:0]}
	lim := p.limits

	// RFC 9112 §2.2: "a server that is expecting to receive and parse a
	// request-line SHOULD ignore at least one empty line (CRLF) received
	// prior to the request-line."
	start := 0
	for start+1 < len(buf) && buf[start] == '\r' && buf[start+1] == '\n' && start < 8 {
		start += 2
	}

	line, next, err := nextLine(buf, start)
	if err != nil {
		if err == ErrIncomplete && len(buf)-start > lim.MaxTargetBytes+32 {
			return 0, fail(414, "request line too long")
		}
		if err == ErrIncomplete && len(buf) >= lim.MaxHeadBytes {
			return 0, fail(431, "request head too large")
		}
		return 0, err
	}
	if err := parseRequestLine(line, r, lim); err != nil {
		return 0, err
	}

	sawCL, sawTE, sawHost := false, false, false
	for {
		line, n, err := nextLine(buf, next)
		if err != nil {
			if err == ErrIncomplete && len(buf) >= lim.MaxHeadBytes {
				return 0, fail(431, "request head too large")
			}
			return 0, err
		}
		if n > lim.MaxHeadBytes {
			return 0, fail(431, "request head too large")
		}
		next = n
		if len(line) == 0 {
			break
		}
		// RFC 9112 §5.2: "A server that receives an obs-fold in a request
		// message ... MUST either reject the message by sending a 400 (Bad
		// Request) ..." We reject. A line starting with whitespace right
		// after the request line is refused for the same reason (§2.2).
		if line[0] == ' ' || line[0] == '\t' {
			return 0, fail(400, "obs-fold or leading whitespace in field line")
		}
		if next < len(buf) && (buf[next] == ' ' || buf[next] == '\t') {
			return 0, fail(400, "obs-fold in field line")
		}
		if len(r.Headers) >= lim.MaxHeaders {
			return 0, fail(431, "too many header fields")
		}
		h, err := parseFieldLine(line)
		if err != nil {
			return 0, err
		}
		r.Headers = append(r.Headers, h)

		switch {
		case equalFold(h.Name, "content-length"):
			// RFC 9110 §8.6 allows a list of identical values to be
			// collapsed; we refuse any repetition or list instead, since
			// intermediaries disagree on how to read them.
			if sawCL {
				return 0, fail(400, "repeated Content-Length")
			}
			sawCL = true
			cl, ok := parseContentLength(h.Value)
			if !ok {
				return 0, fail(400, "invalid Content-Length")
			}
			r.ContentLength = cl
		case equalFold(h.Name, "transfer-encoding"):
			if sawTE {
				return 0, fail(400, "repeated Transfer-Encoding")
			}
			sawTE = true
			if !equalFold(h.Value, "chunked") {
				// Only "chunked" alone is understood. RFC 9112 §6.1: "A
				// server that receives a request message with a transfer
				// coding it does not understand SHOULD respond with 501".
				return 0, fail(501, "unsupported transfer coding")
			}
			r.Chunked = true
		case equalFold(h.Name, "host"):
			// RFC 9112 §3.2: a server MUST respond 400 to a request "that
			// contains more than one Host header field line or a Host
			// header field with an invalid field value". An authority in
			// an absolute-form target wins over Host (§3.2.2).
			if sawHost {
				return 0, fail(400, "repeated Host")
			}
			sawHost = true
			if !httpsyntax.ValidHost(h.Value) {
				return 0, fail(400, "invalid Host")
			}
			if r.Host == nil {
				r.Host = h.Value
			}
		case equalFold(h.Name, "connection"):
			if tokenListHas(h.Value, "close") {
				r.Close = true
			}
		}
	}

	if sawTE && sawCL {
		// RFC 9112 §6.1: "A server MAY reject a request that contains both
		// Content-Length and Transfer-Encoding or process such a request
		// in accordance with the Transfer-Encoding alone." We reject.
		return 0, fail(400, "Transfer-Encoding with Content-Length")
	}
	if sawTE && r.Minor == 0 {
		// RFC 9112 §6.1: a server that receives an HTTP/1.0 message with
		// Transfer-Encoding "MUST treat the message as if the framing is
		// faulty".
		return 0, fail(400, "Transfer-Encoding in HTTP/1.0 request")
	}
	if r.Minor == 1 && !sawHost {
		// RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request)
		// status code to any HTTP/1.1 request message that lacks a Host
		// header field".
		return 0, fail(400, "missing Host")
	}
	if r.Minor == 0 {
		// HTTP/1.0 closes unless the client asked to keep the connection.
		r.Close = r.Close || !tokenListHas(r.Get("connection"), "keep-alive")
	}
	return next, nil
}

// nextLine returns the line starting at buf[from:] without its CRLF, and
// the offset after the CRLF.
func nextLine(buf []byte, from int) ([]byte, int, error) {
	i := bytes.IndexByte(buf[from:], '\n')
	if i < 0 {
		if bytes.IndexByte(buf[from:], '\r') >= 0 && buf[len(buf)-1] != '\r' {
			return nil, 0, fail(400, "bare CR")
		}
		return nil, 0, ErrIncomplete
	}
	end := from + i
	if end == from || buf[end-1] != '\r' {
		return nil, 0, fail(400, "bare LF")
	}
	line := buf[from : end-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, 0, fail(400, "bare CR")
	}
	return line, end + 1, nil
}

func parseRequestLine(line []byte, r *Request, lim Limits) error {
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return fail(400, "malformed request line")
	}
	r.Method = line[:sp1]
	if !isToken(r.Method) {
		return fail(400, "invalid method")
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 < 0 {
		if len(rest) > lim.MaxTargetBytes {
			return fail(414, "request target too long")
		}
		return fail(400, "malformed request line")
	}
	r.Target = rest[:sp2]
	if len(r.Target) > lim.MaxTargetBytes {
		return fail(414, "request target too long")
	}
	if len(r.Target) == 0 {
		return fail(400, "empty request target")
	}
	for _, c := range r.Target {
		if c <= ' ' || c >= 0x7f {
			return fail(400, "invalid character in request target")
		}
	}
	v := rest[sp2+1:]
	if len(v) != 8 || string(v[:5]) != "HTTP/" || v[6] != '.' || !isDigit(v[5]) || !isDigit(v[7]) {
		return fail(400, "malformed HTTP version")
	}
	if v[5] != '1' || (v[7] != '0' && v[7] != '1') {
		return fail(505, "unsupported HTTP version")
	}
	r.Minor = int(v[7] - '0')
	return splitTarget(r)
}

// splitTarget fills Path, Query and (for absolute-form) Host.
func splitTarget(r *Request) error {
	t := r.Target
	switch {
	case t[0] == '/':
	case len(t) == 1 && t[0] == '*':
		r.Path = t
		return nil
	case hasPrefixFold(t, "http://") || hasPrefixFold(t, "https://"):
		// RFC 9112 §3.2.2: "a server MUST accept the use of the
		// absolute-form in requests"; the authority in it wins over Host.
		rest := t[bytes.IndexByte(t, ':')+3:]
		end := bytes.IndexAny(rest, "/?")
		auth := rest
		if end >= 0 {
			auth, t = rest[:end], rest[end:]
		} else {
			t = nil
		}
		if len(auth) == 0 || !httpsyntax.ValidHost(auth) {
			return fail(400, "invalid authority in request target")
		}
		r.Host = auth
		if len(t) == 0 || t[0] == '?' {
			r.Path = []byte("/")
			if len(t) > 0 {
				r.Query = t[1:]
			}
			return nil
		}
	default:
		// authority-form is only for CONNECT, which the method check
		// answers; anything else here is malformed.
		r.Path = nil
		return nil
	}
	if q := bytes.IndexByte(t, '?'); q >= 0 {
		r.Path, r.Query = t[:q], t[q+1:]
	} else {
		r.Path = t
	}
	if f := bytes.IndexByte(r.Path, '#'); f >= 0 {
		return fail(400, "fragment in request target")
	}
	return nil
}

func parseFieldLine(line []byte) (Header, error) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return Header{}, fail(400, "malformed field line")
	}
	name := line[:colon]
	// RFC 9112 §5.1: "No whitespace is allowed between the field name and
	// colon. ... A server MUST reject ... with a response status code of
	// 400 (Bad Request)." isToken refuses whitespace.
	if !isToken(name) {
		return Header{}, fail(400, "invalid field name")
	}
	v := line[colon+1:]
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	for _, c := range v {
		// field-vchar = VCHAR / obs-text, plus SP and HTAB inside.
		if (c < ' ' && c != '\t') || c == 0x7f {
			return Header{}, fail(400, "invalid character in field value")
		}
	}
	return Header{Name: name, Value: v}, nil
}

func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// tokenListHas reports whether the comma-separated list v contains tok
// (case-insensitive).
func tokenListHas(v []byte, tok string) bool {
	for len(v) > 0 {
		i := bytes.IndexByte(v, ',')
		var part []byte
		if i < 0 {
			part, v = v, nil
		} else {
			part, v = v[:i], v[i+1:]
		}
		part = bytes.Trim(part, " \t")
		if equalFold(part, tok) {
			return true
		}
	}
	return false
}

// tokenChars marks tchar (RFC 9110 §5.6.2).
var tokenChars = [256]bool{
	'!': true, '#': true, '$': true, '%': true, '&': true, '\'': true, '*': true,
	'+': true, '-': true, '.': true, '^': true, '_': true, '`': true, '|': true, '~': true,
	'0': true, '1': true, '2': true, '3': true, '4': true, '5': true, '6': true, '7': true, '8': true, '9': true,
	'A': true, 'B': true, 'C': true, 'D': true, 'E': true, 'F': true, 'G': true, 'H': true, 'I': true,
	'J': true, 'K': true, 'L': true, 'M': true, 'N': true, 'O': true, 'P': true, 'Q': true, 'R': true,
	'S': true, 'T': true, 'U': true, 'V': true, 'W': true, 'X': true, 'Y': true, 'Z': true,
	'a': true, 'b': true, 'c': true, 'd': true, 'e': true, 'f': true, 'g': true, 'h': true, 'i': true,
	'j': true, 'k': true, 'l': true, 'm': true, 'n': true, 'o': true, 'p': true, 'q': true, 'r': true,
	's': true, 't': true, 'u': true, 'v': true, 'w': true, 'x': true, 'y': true, 'z': true,
}

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenChars[c] {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isHex(c byte) bool   { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }
func isAlnum(c byte) bool { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z') }

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// equalFold compares b with the lowercase ASCII string s, ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// EqualFold reports whether b equals the lowercase ASCII string s, ignoring
// ASCII case.
func EqualFold(b []byte, s string) bool { return equalFold(b, s) }

func hasPrefixFold(b []byte, s string) bool {
	return len(b) >= len(s) && equalFold(b[:len(s)], s)
}
