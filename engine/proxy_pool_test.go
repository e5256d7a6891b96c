package engine_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestProxyUnsolicitedResponse: an upstream that follows each response
// with a second one nobody asked for never has that one handed to the
// next client of the pool. The stray arrives at several moments: in the
// same write as the response; after the connection went back to the pool;
// behind a body long enough to be spliced (so the stray waits unread in
// the socket and only a check when the connection is taken can see it);
// and after a response drained for a client that left. Each time the next
// client gets the answer to its own request.
func TestProxyUnsolicitedResponse(t *testing.T) {
	const stray = "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nUNSOLICITED"
	big := strings.Repeat("b", 512<<10)  // past the splice threshold (256 KiB)
	huge := strings.Repeat("h", 32<<20)  // more than the sockets between the upstream and the client hold
	release := make(chan struct{})       // "after" and "drained": send now
	written := make(chan struct{}, 1)    // "after": the stray is on its way
	t.Cleanup(func() { close(release) }) // a handler still waiting ends
	serve := func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			body := "reply to " + req.URL.Path
			mode := strings.Split(req.URL.Path, "/")[1]
			switch {
			case strings.HasSuffix(req.URL.Path, "/2"):
			case mode == "spliced":
				body += big
			case mode == "pipelined" || mode == "queued":
				body += huge
			}
			resp := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			switch {
			case strings.HasSuffix(req.URL.Path, "/2"):
				io.WriteString(c, resp) // the next client's: answered properly
			case mode == "after":
				io.WriteString(c, resp)
				<-release
				io.WriteString(c, stray)
				written <- struct{}{}
			case mode == "drained":
				<-release
				io.WriteString(c, resp+stray)
			default: // "together", "spliced", "pipelined", "queued"
				io.WriteString(c, resp+stray)
			}
		}
	}
	up, one := rawBackend(t, serve), rawBackend(t, serve)
	// One worker: one pool, which every client's request goes through.
	ts := start(t, fmt.Sprintf("workers = 1\n[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [%q]\n"+
		"[[reverse_proxy.routes]]\ndomain = \"*\"\npath_prefix = \"/queued/\"\nupstreams = [%q]\nmax_conns = 1\n", up, one))

	get := func(path string) (int, string) {
		t.Helper()
		c := dial(t, ts.addr)
		defer c.Close()
		c.send("GET " + path + " HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, body := c.response("GET")
		return resp.StatusCode, string(body)
	}
	for _, mode := range []string{"together", "after", "spliced", "drained", "pipelined", "queued"} {
		first, second := "/"+mode+"/1", "/"+mode+"/2"
		switch mode {
		case "drained":
			drained := ts.Stats().ProxyDrained
			c := dial(t, ts.addr)
			c.send("GET " + first + " HTTP/1.1\r\nHost: a\r\n\r\n")
			c.Close()
			// The response comes once the exchange is reading it for
			// nobody.
			if !waitFor(scale(10*time.Second), func() bool { return ts.Stats().ProxyDrained > drained }) {
				t.Fatalf("%s: the exchange of the client that left was not drained", mode)
			}
			release <- struct{}{}
		case "pipelined":
			// The second request waits behind the first on the client's
			// connection: it is taken from the pool as soon as the first
			// response's spliced body has gone out, before the upstream
			// connection's own events are looked at.
			c := dial(t, ts.addr)
			c.send("GET " + first + " HTTP/1.1\r\nHost: a\r\n\r\nGET " + second + " HTTP/1.1\r\nHost: a\r\n\r\n")
			if resp, body := c.response("GET"); resp.StatusCode != 200 || !strings.HasPrefix(string(body), "reply to "+first) {
				t.Fatalf("%s: first request: %d %.40q", mode, resp.StatusCode, body)
			}
			if resp, body := c.response("GET"); resp.StatusCode != 200 || string(body) != "reply to "+second {
				t.Errorf("%s: the request behind it, %s, got %d %q; want its own response (not the unsolicited one)", mode, second, resp.StatusCode, body)
			}
			continue
		case "queued":
			// The next client waits for the one connection its route may
			// open (max_conns = 1) while the first response's spliced
			// body goes out; it takes that connection from the pool
			// before the upstream connection's own events are looked at.
			a := dial(t, ts.addr)
			a.Conn.(*net.TCPConn).SetReadBuffer(64 << 10) // the body waits for it
			a.send("GET " + first + " HTTP/1.1\r\nHost: a\r\n\r\n")
			queued := ts.Stats().ProxyQueued
			b := dial(t, ts.addr)
			b.send("GET " + second + " HTTP/1.1\r\nHost: a\r\n\r\n")
			if !waitFor(scale(10*time.Second), func() bool { return ts.Stats().ProxyQueued > queued }) {
				t.Fatalf("%s: the second client did not wait for the connection", mode)
			}
			if resp, body := a.response("GET"); resp.StatusCode != 200 || !strings.HasPrefix(string(body), "reply to "+first) {
				t.Fatalf("%s: first request: %d %.40q", mode, resp.StatusCode, body)
			}
			if resp, body := b.response("GET"); resp.StatusCode != 200 || string(body) != "reply to "+second {
				t.Errorf("%s: the next client's request %s got %d %q; want its own response (not the unsolicited one)", mode, second, resp.StatusCode, body)
			}
			continue
		default:
			code, body := get(first)
			if code != 200 || !strings.HasPrefix(body, "reply to "+first) {
				t.Fatalf("%s: first request: %d %.40q", mode, code, body)
			}
		}
		if mode == "after" {
			// The connection is back in the pool (the response went
			// out after it was put there): now the stray comes.
			release <- struct{}{}
			<-written
		}
		code, body := get(second)
		if code != 200 || body != "reply to "+second {
			t.Errorf("%s: the next client's request %s got %d %q; want its own response (not the unsolicited one)", mode, second, code, body)
		}
	}
}
