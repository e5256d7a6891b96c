package httpsyntax

import (
	"bytes"
	"net/netip"
)

// ValidHost checks the uri-host [ ":" port ] grammar loosely: a name of
// letters, digits, "-", "_", "~" and dots, without an empty label (a
// single trailing dot and "." alone are allowed), or a bracketed IPv6
// literal; and a numeric port. Percent-encoding, which RFC 3986's
// reg-name allows, is refused: no client sends a name so (names beyond
// ASCII go as punycode), and an upstream could decode "%2f" in the Host
// it is sent into a path.
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
		if a, err := netip.ParseAddr(string(h[1:end])); err != nil || !a.Is6() {
			return false
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
	for i, c := range host {
		switch {
		case c == '.':
			// An empty label: a leading dot or two in a row ("." alone
			// and a trailing dot name the root and a fully qualified name).
			if i == 0 && len(host) > 1 || i > 0 && host[i-1] == '.' {
				return false
			}
		case !(isAlnum(c) || c == '-' || c == '_' || c == '~'):
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
