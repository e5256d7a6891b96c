package httpsyntax

import "bytes"

// ValidHost checks the uri-host [ ":" port ] grammar loosely: reg-name or
// IPv4 characters, or a bracketed IPv6 literal, and a numeric port.
func ValidHost(h []byte) bool {
	if len(h) == 0 || len(h) > 255 {
		return len(h) == 0 // an empty Host is allowed (RFC 9112 §3.2)
	}
	host := h
	if h[0] == '[' {
		end := bytes.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		for _, c := range h[1:end] {
			if !(isHex(c) || c == ':' || c == '.') {
				return false
			}
		}
		host = nil
		h = h[end+1:]
		if len(h) > 0 && h[0] != ':' {
			return false
		}
	} else if c := bytes.LastIndexByte(h, ':'); c >= 0 {
		host, h = h[:c], h[c:]
	} else {
		h = nil
	}
	for _, c := range host {
		if !(isAlnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '%') {
			return false
		}
	}
	if len(h) > 0 { // ":port"
		if len(h) > 6 {
			return false
		}
		port := 0
		for _, c := range h[1:] {
			if !isDigit(c) {
				return false
			}
			port = port*10 + int(c-'0')
		}
		if port > 65535 {
			return false
		}
	}
	return true
}

// ValidPath reports whether p can be the path and query of an
// origin-form request target (RFC 9112 §3.2.1): it starts with "/" and
// holds no whitespace, control character, byte past ASCII or fragment.
func ValidPath(p []byte) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	for _, c := range p {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isHex(c byte) bool   { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }
func isAlnum(c byte) bool { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z') }
