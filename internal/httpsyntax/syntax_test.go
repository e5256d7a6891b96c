package httpsyntax

import (
	"strings"
	"testing"
)

func TestValidHost(t *testing.T) {
	for in, want := range map[string]bool{
		"": true, "a.test": true, "a.test:443": true, "[::1]:8080": true, "127.0.0.1": true, "xn--caf-dma.test": true,
		"a b": false, "x@a.test": false, "a,b": false, "a.test:abc": false, "[::1": false, "[::1]x": false, "a.test:1234567": false, "a.test:65535": true, "a.test:65536": false, "a.test:99999": false,
		".": true, "a.test.": true, "a.test.:443": true, ".:443": true, "[2001:db8::1]": true,
		".a.test": false, "a..test": false, "a.test..": false, "..": false, "evil.com%2fa.test": false, "a.test%": false,
		"[]": false, "[:]": false, "[1.2.3.4]": false, "[::1%25eth0]": false,
	} {
		if got := ValidHost([]byte(in)); got != want {
			t.Errorf("ValidHost(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestValidPath(t *testing.T) {
	for in, want := range map[string]bool{
		"/": true, "/a/b?c=d&e": true, "/%20": true,
		"": false, "a": false, "/a b": false, "/x#f": false, "/\x7f": false, "/caf\xc3\xa9": false, "*": false,
	} {
		if got := ValidPath([]byte(in)); got != want {
			t.Errorf("ValidPath(%q) = %v, want %v", in, got, want)
		}
	}
}

// FuzzValidHost: a Host ValidHost takes is one no name lookup or
// upstream can read as more than a name: no empty label, no escape,
// no slash, and at most 255 bytes.
func FuzzValidHost(f *testing.F) {
	for _, s := range []string{"a.test", "a.test.:443", "[::1]:80", ".", "x..y", "%2f", "[]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if !ValidHost([]byte(h)) {
			return
		}
		name := string(AppendHost(nil, []byte(h)))
		if len(h) > 255 || strings.ContainsAny(name, "%/\\ ") || strings.Contains(name, "..") ||
			len(name) > 1 && name[0] == '.' {
			t.Errorf("ValidHost(%q) took it; its name is %q", h, name)
		}
	})
}
