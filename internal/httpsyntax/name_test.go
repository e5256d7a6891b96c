package httpsyntax

import (
	"bytes"
	"testing"
)

func TestAppendHost(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"A.Example.COM", "a.example.com"},
		{"a.example.com.:8443", "a.example.com"},
		{":443", ""},
		{".", ""},
		{"", ""},
		{"[::1]:80", "[::1]"},
		{"[::1]", "[::1]"},
	} {
		if got := AppendHost([]byte("junk"), []byte(tt.in)); string(got) != tt.want {
			t.Errorf("AppendHost(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzAppendHost: whatever the Host, the name is lowercase, no longer,
// and has no port outside an IPv6 literal's brackets.
func FuzzAppendHost(f *testing.F) {
	for _, s := range []string{"a.test", "A.TEST.:1", "[::1]:2", ":3", ".", "[", "]:", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got := AppendHost(nil, []byte(host))
		if bytes.ContainsAny(got, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Fatalf("%q -> %q: uppercase", host, got)
		}
		if (len(got) == 0 || got[0] != '[') && bytes.IndexByte(got, ':') >= 0 {
			t.Fatalf("%q -> %q: a port", host, got)
		}
		if len(got) > len(host) {
			t.Fatalf("%q -> %q: longer", host, got)
		}
	})
}
