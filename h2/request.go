package h2

import (
	"errors"
	"strings"

	"github.com/mediaship/engine/internal/httpsyntax"
)

// Request is a stream's request head. Byte slices stay valid until the
// stream is done.
type Request struct {
	Method, Scheme, Authority, Path []byte
	// Fields are the regular fields, names in lowercase, in order.
	Fields []Field
	// ContentLength is -1 when the request has none.
	ContentLength int64
}

// Field is a header field.
type Field struct {
	Name, Value []byte
}

// Get returns the first value of the field name (lowercase), or nil. For
// "host" it falls back to :authority.
func (r *Request) Get(name string) []byte {
	if v := r.field(name); v != nil || name != "host" {
		return v
	}
	return r.Authority
}

// Values appends the values of every field name (lowercase), in their
// order, to dst.
func (r *Request) Values(name string, dst [][]byte) [][]byte {
	for i := range r.Fields {
		if string(r.Fields[i].Name) == name {
			dst = append(dst, r.Fields[i].Value)
		}
	}
	return dst
}

func (r *Request) field(name string) []byte {
	for i := range r.Fields {
		if string(r.Fields[i].Name) == name {
			return r.Fields[i].Value
		}
	}
	return nil
}

// validate applies RFC 9113 §8.3.1 to the pseudo-headers.
func (r *Request) validate() error {
	if r.Method == nil {
		return errors.New("no :method")
	}
	if string(r.Method) == "CONNECT" {
		// §8.5: CONNECT carries :authority and neither :scheme nor :path.
		if r.Scheme != nil || r.Path != nil || len(r.Authority) == 0 {
			return errors.New("malformed CONNECT")
		}
		return nil
	}
	if len(r.Scheme) == 0 || len(r.Path) == 0 {
		return errors.New("no :scheme or :path")
	}
	// The same syntax HTTP/1.1 requires of a request line and Host: a
	// path without whitespace, controls or fragment (or "*" for
	// OPTIONS), an authority without userinfo (§8.3.1), and a scheme this
	// origin server serves.
	for _, c := range r.Method {
		if !isTchar(c) {
			return errors.New("invalid :method")
		}
	}
	if s := string(r.Scheme); s != "https" && s != "http" {
		return errors.New(":scheme is neither https nor http")
	}
	if !httpsyntax.ValidPath(r.Path) && !(string(r.Path) == "*" && string(r.Method) == "OPTIONS") {
		return errors.New("invalid :path")
	}
	if !httpsyntax.ValidHost(r.Authority) {
		return errors.New("invalid :authority")
	}
	// At most one Host field, as HTTP/1.1 requires (RFC 9112 §3.2):
	// with two, servers and proxies could each route by another.
	var host []byte
	for i := range r.Fields {
		if string(r.Fields[i].Name) != "host" {
			continue
		}
		if host != nil {
			return errors.New("repeated host")
		}
		host = r.Fields[i].Value
	}
	if host != nil && !httpsyntax.ValidHost(host) {
		return errors.New("invalid host")
	}
	if len(r.Authority) > 0 && host != nil && !strings.EqualFold(string(host), string(r.Authority)) {
		return errors.New("host differs from :authority")
	}
	return nil
}

// checkField applies RFC 9113 §8.2.1: lowercase token names (or a known
// pseudo-header), values without NUL, CR, LF or surrounding whitespace.
func checkField(name, value string) error {
	if name == "" {
		return errors.New("empty field name")
	}
	start := 0
	if name[0] == ':' {
		start = 1
		if len(name) == 1 {
			return errors.New("empty pseudo-header name")
		}
	}
	for i := start; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' || !isTchar(c) {
			return errors.New("invalid field name")
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c == 0 || c == '\r' || c == '\n' {
			return errors.New("invalid field value")
		}
	}
	if n := len(value); n > 0 && (isWS(value[0]) || isWS(value[n-1])) {
		return errors.New("field value with surrounding whitespace")
	}
	return nil
}

func isWS(c byte) bool { return c == ' ' || c == '\t' }

// isTchar: RFC 9110 token characters.
func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}
