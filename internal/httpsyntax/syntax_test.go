package httpsyntax

import "testing"

func TestValidHost(t *testing.T) {
	for in, want := range map[string]bool{
		"": true, "a.test": true, "a.test:443": true, "[::1]:8080": true, "127.0.0.1": true, "xn--caf-dma.test": true,
		"a b": false, "x@a.test": false, "a,b": false, "a.test:abc": false, "[::1": false, "[::1]x": false, "a.test:1234567": false, "a.test:65535": true, "a.test:65536": false, "a.test:99999": false,
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
