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
