package reframe

import "testing"

func TestUnsafePath(t *testing.T) {
	for in, want := range map[string]bool{
		"/": false, "/api/x": false, "/api/a%20b": false, "/api/%41": false, "/a.b/c..d/.e": false,
		"/api/..": true, "/api/../x": true, "/api/.": true, "/api/..;/x": true, "/api/%2e%2E/x": true,
		"/api%2fx": true, "/api%5cx": true, "/a\\b": true, "/api/%c0%ae": true, "/api/%C1%9C": true,
		"/api/%u002e": true, "/api/%": true, "/api/%4": true, "/api/%zz": true,
	} {
		if got := UnsafePath([]byte(in)); got != want {
			t.Errorf("UnsafePath(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestAppendRequestTrailers(t *testing.T) {
	raw := []byte("X-Checksum: abc\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nVia: 1.1 evil\r\nCookie: s=1\r\nX_Forwarded_For: 6.6.6.6\r\nContent-Length: 5\r\n")
	if got := string(AppendRequestTrailers(nil, raw)); got != "X-Checksum: abc\r\n" {
		t.Errorf("request trailers passed on: %q", got)
	}
}
