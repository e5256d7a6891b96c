package admin

import "testing"

// TestAdminHosts: which Host values each kind of admin listen address
// answers (TestAdminHost sends them over a real listener on 127.0.0.1).
func TestAdminHosts(t *testing.T) {
	for _, tc := range []struct {
		listen, bound string
		host          string
		want          bool
	}{
		{"127.0.0.1:9100", "127.0.0.1:9100", "127.0.0.1:9100", true},
		{"127.0.0.1:9100", "127.0.0.1:9100", "localhost:1", true},
		{"127.0.0.1:9100", "127.0.0.1:9100", "[::ffff:127.0.0.1]:9100", true},
		{"127.0.0.1:9100", "127.0.0.1:9100", "[fe80::1%25lo]:9100", false},
		{"127.0.0.1:9100", "127.0.0.1:9100", "::1", true},
		{"127.0.0.1:9100", "127.0.0.1:9100", "localhost.:9100", false},
		{"127.0.0.1:9100", "127.0.0.1:9100", "10.0.0.5:9100", false},
		{"127.0.0.1:9100", "127.0.0.1:9100", "localhost:9100@evil.example", false},
		{"127.0.0.1:9100", "127.0.0.1:9100", "", false},
		{"localhost:9100", "127.0.0.1:9100", "localhost:9100", true},
		{"[::1]:0", "[::1]:41234", "[::1]:41234", true},
		// allow_remote on one address: that address, with or without
		// the port; not another one, not a name.
		{"10.0.0.5:9100", "10.0.0.5:9100", "10.0.0.5:9100", true},
		{"10.0.0.5:9100", "10.0.0.5:9100", "10.0.0.5", true},
		{"10.0.0.5:9100", "10.0.0.5:9100", "10.0.0.6:9100", false},
		{"10.0.0.5:9100", "10.0.0.5:9100", "metrics.example:9100", false},
		{"[2001:db8::5]:9100", "[2001:db8::5]:9100", "[2001:DB8::5]", true},
		{"[2001:db8::5]:9100", "[2001:db8::5]:9100", "[2001:db8::6]:9100", false},
		// On every address: any IP literal (a browser sends one only to
		// the address it names), still no name.
		{"0.0.0.0:9100", "0.0.0.0:9100", "10.0.0.6:9100", true},
		{":9100", "[::]:9100", "[2001:db8::6]:9100", true},
		{"0.0.0.0:9100", "0.0.0.0:9100", "evil.example:9100", false},
		{"0.0.0.0:9100", "0.0.0.0:9100", "", false},
	} {
		if got := newHosts(tc.listen, tc.bound).allowed(tc.host); got != tc.want {
			t.Errorf("listen %s (bound %s): allowed(%q) = %v, want %v", tc.listen, tc.bound, tc.host, got, tc.want)
		}
	}
}
