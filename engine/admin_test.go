package engine_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestAdminHost: the admin listener answers only requests whose Host is
// a loopback literal, localhost or its own address; a name a web page
// could have pointed at 127.0.0.1 (DNS rebinding), or no Host at all,
// gets 403 with a short plain body, on every path.
func TestAdminHost(t *testing.T) {
	ts := start(t, fmt.Sprintf("root = %q\n[admin]\nlisten = \"127.0.0.1:0\"\npprof = true\n", siteRoot(t)))
	addr := ts.AdminAddr()
	_, port, _ := net.SplitHostPort(addr)
	for _, tc := range []struct {
		head string // request line and Host field
		want int
	}{
		{"GET /metrics HTTP/1.1\r\nHost: localhost", 200},
		{"GET /metrics HTTP/1.1\r\nHost: localhost:" + port, 200},
		{"GET /metrics HTTP/1.1\r\nHost: LocalHost:" + port, 200},
		{"GET /metrics HTTP/1.1\r\nHost: " + addr, 200},
		{"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1", 200},
		{"GET /metrics HTTP/1.1\r\nHost: 127.0.0.2:8080", 200},
		{"GET /metrics HTTP/1.1\r\nHost: [::1]:" + port, 200},
		{"GET /metrics HTTP/1.1\r\nHost: [::1]", 200},
		{"GET /healthz HTTP/1.1\r\nHost: localhost:" + port, 200},
		{"GET /debug/pprof/ HTTP/1.1\r\nHost: [::1]:" + port, 200},

		{"GET /metrics HTTP/1.1\r\nHost: evil.example:" + port, 403},
		{"GET /metrics HTTP/1.1\r\nHost: evil.example", 403},
		{"GET /debug/pprof/cmdline HTTP/1.1\r\nHost: evil.example:" + port, 403},
		{"GET /healthz HTTP/1.1\r\nHost: evil.example:" + port, 403},
		{"GET /metrics HTTP/1.1\r\nHost: localhost.evil.example:" + port, 403},
		{"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1.nip.io:" + port, 403},
		{"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:" + port, 403},
		{"GET /metrics HTTP/1.1\r\nHost: ", 403},
		{"GET /metrics HTTP/1.0", 403},
		// The authority of an absolute-form target is the request's Host.
		{"GET http://evil.example/metrics HTTP/1.1\r\nHost: localhost", 403},
	} {
		c := dial(t, addr)
		c.send(tc.head + "\r\nConnection: close\r\n\r\n")
		resp, body := c.response("GET")
		c.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%q: %d, want %d", tc.head, resp.StatusCode, tc.want)
			continue
		}
		if tc.want != 403 {
			continue
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") || len(body) > 100 ||
			strings.Contains(string(body), "engine_") || strings.Contains(string(body), "pprof") {
			t.Errorf("%q: refused with %s %q; want a short plain body", tc.head, ct, body)
		}
	}
}
