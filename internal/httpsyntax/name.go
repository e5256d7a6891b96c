package httpsyntax

import (
	"bytes"
	"strings"
)

// NormalizeName is a host name as configurations and lookups compare it:
// lowercase, without a trailing dot. For SNI values and configured names; a Host goes through
// AppendHost, which drops its port too.
func NormalizeName(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// AppendHost appends host (a Host or :authority value) to buf[:0]
// without its port, lowercased and without a trailing dot: "" for one
// that names no host ("", ".", ":443"). An IPv6 literal keeps its
// brackets.
func AppendHost(buf, host []byte) []byte {
	h := host
	if len(h) > 0 && h[0] == '[' {
		if i := bytes.IndexByte(h, ']'); i >= 0 {
			h = h[:i+1]
		}
	} else if i := bytes.IndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	buf = buf[:0]
	for _, c := range h {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	if n := len(buf); n > 0 && buf[n-1] == '.' {
		buf = buf[:n-1]
	}
	return buf
}
