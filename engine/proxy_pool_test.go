package engine_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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

// TestProxyEarlyResponse: an upstream that answers a POST before reading
// its body, and then reads the body as a request of its own (answered
// once the next request on that connection has come, so that it would
// land on the next client), never has that request, nor its answer, on a
// connection another client takes. The answer's head comes before the
// body has gone up; the body then arrives at the proxy (an HTTP/2 PING
// behind it says the proxy has read it) before the answer ends. No more
// of the body goes up, and the connection closes after the answer: the
// next client's request goes on a new connection and gets its own
// response.
func TestProxyEarlyResponse(t *testing.T) {
	const injected = "GET /injected HTTP/1.1\r\nHost: up\r\n\r\n"
	type seen struct {
		conn int
		path string // "EOF" when the proxy closed the connection
	}
	var conns atomic.Int32
	events := make(chan seen, 16) // each request the upstream reads, with its connection
	finish := make(chan struct{}) // the early answer may end
	up := rawBackend(t, func(c net.Conn) {
		n := int(conns.Add(1))
		br := bufio.NewReader(c)
		var owed []string // requests read from a body, answered with the next one
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				events <- seen{n, "EOF"}
				return
			}
			path := req.URL.Path
			events <- seen{n, path}
			switch path {
			case "/early":
				// Half the answer at once, its body unread; the rest
				// when the test says.
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\nearly reply")
				select {
				case <-finish:
				case <-time.After(scale(10 * time.Second)):
					return
				}
				io.WriteString(c, "-complete")
			case "/injected":
				owed = append(owed, path)
			default:
				for _, p := range append(owed, path) {
					body := "reply to " + p
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				}
				owed = nil
			}
		}
	})
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, fmt.Sprintf("workers = 1\n[[sites]]\ndomain = \"localhost\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n[kernel]\nktls = \"auto\"\n"+
		"[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"localhost\"\nupstreams = [%q]\n",
		t.TempDir(), pki.certFile, pki.keyFile, up))

	// The attacker: a POST whose head goes first, its body (a request)
	// only once the answer has begun.
	r := dialH2(t, ts.addr, pki)
	r.mu.Lock()
	r.eb.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", "/early"}, {":authority", "localhost"},
		{"content-length", fmt.Sprint(len(injected))}} {
		r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: r.eb.Bytes(), EndHeaders: true})
	r.mu.Unlock()
	var got []byte
	ended := false
	collect := func(f http2.Frame) {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
			got = append(got, d.Data()...)
			ended = d.StreamEnded()
		}
	}
	r.until(scale(10*time.Second), func(f http2.Frame) bool {
		collect(f)
		h, ok := f.(*http2.HeadersFrame)
		return ok && h.StreamID == 1
	})
	r.fr.WriteData(1, true, []byte(injected))
	r.fr.WritePing(false, [8]byte{'b', 'o', 'd', 'y', 'r', 'e', 'a', 'd'})
	r.until(scale(10*time.Second), func(f http2.Frame) bool {
		collect(f)
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck()
	})
	close(finish)
	if !ended {
		r.until(scale(10*time.Second), func(f http2.Frame) bool { collect(f); return ended })
	}
	if string(got) != "early reply-complete" {
		t.Fatalf("the early answer: %q, want %q", got, "early reply-complete")
	}

	// The next client.
	c := &http.Client{Timeout: scale(10 * time.Second), Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}
	resp, err := c.Get("https://localhost:" + portOf(ts.addr) + "/victim")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "reply to /victim" {
		t.Errorf("the next client got %q, want %q", body, "reply to /victim")
	}

	// What the upstream read on each connection after the early answer.
	after := map[int][]string{}
	for after[1] == nil || len(after[2]) == 0 && !slices.Contains(after[1], "/victim") {
		select {
		case e := <-events:
			if e.path != "/early" {
				after[e.conn] = append(after[e.conn], e.path)
			}
		case <-time.After(scale(10 * time.Second)):
			t.Fatalf("the upstream's connections read %v after the early answer, and nothing more", after)
		}
	}
	if want := []string{"EOF"}; !slices.Equal(after[1], want) {
		t.Errorf("the early answer's connection then read %q, want %q (none of the body, and its close)", after[1], want)
	}
	if want := []string{"/victim"}; !slices.Equal(after[2], want) {
		t.Errorf("a second connection read %q, want %q (the next client's request on a new connection)", after[2], want)
	}
}

// TestProxyEarlyResponseUploadStops: a client whose upload stops once
// the upstream has answered it early (RFC 9112 §9.5 lets it) gets the
// whole answer, however long the answer takes: the rest of its body is
// no longer awaited, so body_timeout does not cut the response.
func TestProxyEarlyResponseUploadStops(t *testing.T) {
	const bodyTimeout = time.Second
	up := rawBackend(t, func(c net.Conn) {
		readHead(c) // the body is never read
		io.WriteString(c, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 8\r\n\r\ntoo ")
		// The rest once the client's body_timeout would have closed it
		// (checked every 250 ms) had it still been waiting for the body.
		time.Sleep(2*bodyTimeout + scale(500*time.Millisecond))
		io.WriteString(c, "big!")
		// Closed once the proxy has closed it: a close with the body
		// unread would be a reset, which may overtake the last bytes.
		io.Copy(io.Discard, c)
	})
	ts := start(t, "workers = 1\n"+proxyConfig(t, "/", "", up)+fmt.Sprintf("[limits]\nbody_timeout = %q\n", bodyTimeout))
	c := dial(t, ts.addr)
	c.send("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nfirst part of the body, and then nothing more")
	resp, body := c.response("POST")
	if resp.StatusCode != 413 || string(body) != "too big!" {
		t.Errorf("the early answer to an upload that stopped: %d %q, want 413 %q", resp.StatusCode, body, "too big!")
	}
	if !resp.Close {
		t.Error("the early answer keeps the connection open, with the rest of the body unread")
	}
}

// TestProxyDrainBounded: the response of a client that left is drained
// for at most about a second in all, however slowly its upstream sends
// the last bytes (one a second here): the upstream connection closes,
// and no departed client holds a share of max_conns.
func TestProxyDrainBounded(t *testing.T) {
	closed := make(chan time.Duration, 4)
	up := rawBackend(t, func(c net.Conn) {
		readHead(c)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nx")
		began := time.Now()
		for range 99 {
			time.Sleep(200 * time.Millisecond)
			if _, err := c.Write([]byte("x")); err != nil {
				break
			}
		}
		closed <- time.Since(began)
	})
	ts := start(t, "workers = 1\n"+proxyConfig(t, "/", "max_conns = 1\nread_timeout = \"30s\"\n", up))
	c := dial(t, ts.addr)
	c.send("GET /drip HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c.Conn)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("head: %q %v", line, err)
	}
	c.Close()
	select {
	case d := <-closed:
		if d > scale(10*time.Second) {
			t.Errorf("the drain held the upstream connection %v", d)
		}
	case <-time.After(scale(15 * time.Second)):
		t.Fatal("the drain of a client that left still holds the upstream connection after 15 s")
	}
}
