package engine_test

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/nginxtest"
)

// nginxBackend is Debian's nginx serving files on loopback, as an
// upstream: its stub_status counts the connections it accepted.
type nginxBackend struct {
	addr string // host:port
	root string
}

// startNginxBackend runs nginx with one worker on a free loopback port,
// serving root, with the given keep-alive timeout, until the test ends.
func startNginxBackend(t *testing.T, root string, keepalive time.Duration) *nginxBackend {
	t.Helper()
	addr := nginxtest.Start(t, fmt.Sprintf(`
    sendfile on;
    keepalive_timeout %dms;
    keepalive_requests 1000000;
    server {
        listen %%[2]s;
        root %s;
        location = /_status { stub_status; }
    }`, keepalive.Milliseconds(), root))
	b := &nginxBackend{addr: addr, root: root}
	if _, err := b.accepts(); err != nil {
		t.Fatal(err)
	}
	return b
}

// tlsProxyConfig is a TLS server whose one route sends every path of
// "localhost" to upstream, with extra (tables) before [reverse_proxy].
// shutdown_grace: quic-go's client may leave a connection open after a
// reset stream, which the server then waits for at the end of the test.
func tlsProxyConfig(pki *testPKI, upstream, extra string) string {
	return fmt.Sprintf(`
shutdown_grace = "2s"
[kernel]
ktls = "auto"
%s
[reverse_proxy]
enabled = true
[reverse_proxy.tls]
cert = %q
key = %q
[[reverse_proxy.routes]]
domain = "localhost"
upstreams = [%q]
`, extra, pki.certFile, pki.keyFile, upstream)
}

var nginxAccepts = regexp.MustCompile(`server accepts handled requests\s+(\d+) `)

// accepts is the connections nginx has accepted so far (its status
// request's own included).
func (b *nginxBackend) accepts() (int64, error) {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + b.addr + "/_status")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := nginxAccepts.FindSubmatch(body)
	if m == nil {
		return 0, fmt.Errorf("stub_status: %q", body)
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

// TestProxyNginxBackend: the engine in front of a real file server.
// A 100 MiB file arrives byte-exact over HTTP/1.1 (plain and TLS),
// HTTP/2 and HTTP/3; 2,000 small requests from 16 client connections
// open at most 16 connections to nginx; and nginx closing idle pooled
// connections (its keep-alive timeout, 1 s, is shorter than the pool's)
// is never seen by a client.
func TestProxyNginxBackend(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	_, sum := linkBig(t, root, "big.bin")
	writeFile(t, root+"/small.txt", "small file from nginx")
	ngx := startNginxBackend(t, root, time.Second)

	plain := start(t, proxyConfig(t, "/", "", ngx.addr))
	pki := newPKI(t, t.TempDir(), "localhost")
	secure := start(t, tlsProxyConfig(pki, ngx.addr, ""))
	tlsURL := "https://localhost:" + portOf(secure.addr)
	dialSecure := func(network string) func(string, string) (net.Conn, error) {
		return func(string, string) (net.Conn, error) { return net.Dial(network, secure.addr) }
	}
	h1TLS := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool},
		Dial: dialSecure("tcp")}}
	h2 := h2Client(pki)
	h3, _ := h3Client(t, pki)

	check := func(name string, c *http.Client, url string, wantProto int) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != wantProto || hex.EncodeToString(h.Sum(nil)) != sum {
			t.Fatalf("%s: status %d, HTTP/%d, %d bytes, err %v, digest match %v", name, resp.StatusCode, resp.ProtoMajor, n, err, hex.EncodeToString(h.Sum(nil)) == sum)
		}
	}
	check("h1 plain", http.DefaultClient, plain.url+"/big.bin", 1)
	check("h1 TLS", h1TLS, tlsURL+"/big.bin", 1)
	check("h2", h2, tlsURL+"/big.bin", 2)
	check("h3", h3, tlsURL+"/big.bin", 3)
	if sp := plain.Stats().BytesSplice; sp < 50<<20 {
		t.Errorf("the plain HTTP/1.1 download moved %d bytes by splice; want most of 100 MiB", sp)
	}

	// Reuse: 2,000 requests on 16 client connections.
	before, err := ngx.accepts()
	if err != nil {
		t.Fatal(err)
	}
	const clients, each = 16, 125
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for range each {
				resp, err := c.Get(plain.url + "/small.txt")
				if err != nil {
					bad.Add(1)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != "small file from nginx" {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	after, err := ngx.accepts()
	if err != nil {
		t.Fatal(err)
	}
	// One of the new accepts is the second status request.
	opened := after - before - 1
	t.Logf("%d requests on %d client connections: nginx accepted %d connections", clients*each, clients, opened)
	if bad.Load() != 0 || opened > clients {
		t.Errorf("%d requests failed; nginx accepted %d connections for %d client connections", bad.Load(), opened, clients)
	}

	// nginx closes the pooled connections after 1 s idle; the next
	// requests, on every protocol, must not notice.
	time.Sleep(1500 * time.Millisecond)
	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
	}{{"h1 plain", http.DefaultClient, plain.url}, {"h1 TLS", h1TLS, tlsURL}, {"h2", h2, tlsURL}, {"h3", h3, tlsURL}} {
		for i := range 3 {
			resp, err := tc.c.Get(tc.url + "/small.txt")
			if err != nil {
				t.Fatalf("%s after nginx's keep-alive timeout, request %d: %v", tc.name, i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "small file from nginx" {
				t.Errorf("%s after nginx's keep-alive timeout, request %d: %d %q", tc.name, i, resp.StatusCode, strings.TrimSpace(string(body)))
			}
		}
	}
}

// TestProxyLargeUpload: a 1 GiB upload, with a Content-Length and
// chunked, streams through to the upstream whole while the process's
// resident memory stays bounded (the client, the proxy and the upstream
// all live in this test process, so the bound covers all three).
func TestProxyLargeUpload(t *testing.T) {
	const size = 1 << 30
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := crc32.NewIEEE()
		n, err := io.Copy(h, r.Body)
		fmt.Fprintf(w, "%d %08x %v", n, h.Sum32(), err)
	}))
	ts := start(t, proxyConfig(t, "/", "", b.hostPort()))
	want := crc32.NewIEEE()
	io.Copy(want, io.LimitReader(&pattern{}, size))

	for _, chunked := range []bool{false, true} {
		debug.FreeOSMemory()
		base := residentBytes(t)
		var peak atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if r := residentBytes(t); r > peak.Load() {
					peak.Store(r)
				}
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		var body io.Reader = io.LimitReader(&pattern{}, size)
		if chunked {
			body = io.MultiReader(body) // length unknown: sent chunked
		}
		req, _ := http.NewRequest("POST", ts.url+"/upload", body)
		if !chunked {
			req.ContentLength = size
		}
		resp, err := http.DefaultClient.Do(req)
		close(stop)
		<-sampled
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if w := fmt.Sprintf("%d %08x <nil>", size, want.Sum32()); resp.StatusCode != 200 || string(got) != w {
			t.Fatalf("1 GiB upload (chunked %v): %d %q, want %q", chunked, resp.StatusCode, got, w)
		}
		grew := peak.Load() - base
		t.Logf("1 GiB upload (chunked %v): resident memory grew by at most %d MiB", chunked, grew>>20)
		if grew > 128<<20 {
			t.Errorf("1 GiB upload (chunked %v): resident memory grew by %d MiB; the body is being buffered", chunked, grew>>20)
		}
	}
}

// pattern is an endless reader of a byte pattern that depends on the
// offset only, however the reads are sized: patternTable over and over
// (its length is prime, so the pattern does not line up with buffers).
type pattern struct{ off int }

var patternTable = func() []byte {
	b := make([]byte, 65521)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}()

func (r *pattern) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], patternTable[r.off:])
		n += c
		r.off = (r.off + c) % len(patternTable)
	}
	return n, nil
}

// residentBytes is this process's resident set size (VmRSS).
func residentBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// TestProxyTrailers: an upstream's response trailers reach HTTP/2 and
// HTTP/3 clients (a HEADERS frame after the body), with hop-by-hop and
// framing fields left out; a response without trailers ends as before.
func TestProxyTrailers(t *testing.T) {
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/plain":
			io.WriteString(w, "no trailers")
			return
		case "/req":
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "request trailer: "+r.Trailer.Get("X-Req-Sum")+" "+r.Trailer.Get("Content-Type"))
			return
		}
		w.Header().Set("Trailer", "X-Checksum, Grpc-Status, Connection, Set-Cookie")
		io.WriteString(w, strings.Repeat("body ", 10000))
		w.(http.Flusher).Flush()
		w.Header().Set("X-Checksum", "abc123")
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("Connection", "close") // hop-by-hop: not passed on
		w.Header().Set("Set-Cookie", "sid=1") // not allowed in trailers (RFC 9110 §6.5.1)
	}))
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, tlsProxyConfig(pki, b.hostPort(), ""))
	url := "https://localhost:" + portOf(ts.addr)
	h3, _ := h3Client(t, pki)
	for _, tc := range []struct {
		name  string
		c     *http.Client
		proto int
	}{{"h2", h2Client(pki), 2}, {"h3", h3, 3}} {
		resp, err := tc.c.Get(url + "/trailers")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.ProtoMajor != tc.proto || len(body) != 50000 {
			t.Fatalf("%s: HTTP/%d, %d bytes, %v", tc.name, resp.ProtoMajor, len(body), err)
		}
		if resp.Trailer.Get("X-Checksum") != "abc123" || resp.Trailer.Get("Grpc-Status") != "0" || resp.Trailer.Get("Connection") != "" || resp.Trailer.Get("Set-Cookie") != "" {
			t.Errorf("%s: trailers %v; want X-Checksum and Grpc-Status, no Connection or Set-Cookie", tc.name, resp.Trailer)
		}
		// Request trailers go up too (the body re-framed chunked), minus
		// those that may not be trailers.
		req, _ := http.NewRequest("POST", url+"/req", io.MultiReader(strings.NewReader("payload")))
		req.Trailer = http.Header{"X-Req-Sum": {"r42"}, "Content-Type": {"text/evil"}}
		if resp, err := tc.c.Do(req); err != nil {
			t.Errorf("%s: request with trailers: %v", tc.name, err)
		} else {
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(got) != "request trailer: r42 " {
				t.Errorf("%s: the upstream saw %q; want the X-Req-Sum trailer only", tc.name, got)
			}
		}
		resp, err = tc.c.Get(url + "/plain")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "no trailers" || len(resp.Trailer) != 0 {
			t.Errorf("%s without trailers: %q, trailers %v", tc.name, body, resp.Trailer)
		}
	}
}

// TestProxyDrainOnClientAbort: a client that closes with its request in
// flight does not cost the upstream connection when the response is
// short (it is read and dropped, and the connection reused), while an
// upstream still working on the request learns of the close within
// about a second (drainWait), as nginx's upstream would at once. The
// upstream answers only when the test has seen the proxy take the
// client's close, so nothing rests on timing.
func TestProxyDrainOnClientAbort(t *testing.T) {
	canceled := make(chan time.Duration, 1)
	arrived := make(chan string, 1)
	answer := make(chan struct{})
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/quick":
			arrived <- r.URL.Path
			select {
			case <-answer: // the client is gone by now
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "short answer")
		case "/slow":
			t0 := time.Now()
			arrived <- r.URL.Path
			select {
			case <-r.Context().Done():
				canceled <- time.Since(t0)
			case <-time.After(10 * time.Second):
				canceled <- -1
			}
		default:
			io.WriteString(w, "ok")
		}
	}))
	// One reactor: pools are per reactor, and the clients must share one.
	// max_conns = 1: a request that comes before the drained connection
	// is back in the pool waits for it rather than opening another, so
	// only a connection the drain lost makes a second one.
	// trusted_proxies: every client is 127.0.0.1, which would otherwise
	// be held to half of max_conns (TestProxyFairShare).
	ts := start(t, fmt.Sprintf("workers = 1\nroot = %q\n[reverse_proxy]\nenabled = true\ntrusted_proxies = [\"127.0.0.1/32\"]\n"+
		"[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [%q]\nmax_conns = 1\n", t.TempDir(), b.hostPort()))
	get := func() {
		t.Helper()
		resp, err := http.Get(ts.url + "/ok")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("a request after a drained response: %d %q", resp.StatusCode, body)
		}
	}
	// sent sends a request, waits until the upstream has it and closes
	// the client.
	sent := func(path string) {
		t.Helper()
		c := dial(t, ts.addr)
		c.send("GET " + path + " HTTP/1.1\r\nHost: a\r\n\r\n")
		select {
		case <-arrived:
		case <-time.After(scale(10 * time.Second)):
			t.Fatalf("%s did not reach the upstream", path)
		}
		c.Close()
	}
	get()
	for i := range int64(5) {
		sent("/quick")
		if !waitFor(scale(10*time.Second), func() bool { return ts.Stats().ProxyDrained == i+1 }) {
			t.Fatalf("client %d of 5 left; ProxyDrained = %d, want %d", i+1, ts.Stats().ProxyDrained, i+1)
		}
		answer <- struct{}{}
		get()
	}
	if n := b.conns.Load(); n != 1 {
		t.Errorf("5 clients that left before their short responses cost %d upstream connections; want the first one only", n)
	}

	sent("/slow")
	if d := <-canceled; d < 0 || d > scale(3*time.Second) {
		t.Errorf("the upstream learned of the client's close after %v; want about 1 s", d)
	}
}

// TestProxyMaxConns: past max_conns requests wait for a connection
// instead of opening more (an HTTP/2 client with 128 streams must not
// open 128 upstream connections) and go on as connections come back; one
// that waits response_timeout gets 503. The upstream holds every request
// until the test lets it go, and the test waits for events (requests
// arriving upstream, requests queued, responses), never for time.
func TestProxyMaxConns(t *testing.T) {
	// trusted_proxies: every request here comes from 127.0.0.1, which
	// would otherwise be held to half of max_conns (TestProxyFairShare).
	server := func(t *testing.T, h *holdBackend, responseTimeout string) *testServer {
		ts := start(t, fmt.Sprintf("workers = 1\nroot = %q\n[reverse_proxy]\nenabled = true\ntrusted_proxies = [\"127.0.0.1/32\"]\n"+
			"[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [%q]\nmax_conns = 2\nresponse_timeout = %q\n",
			t.TempDir(), h.hostPort(), responseTimeout))
		// Before the server stops (cleanups run last first): a test that
		// failed midway leaves no request held.
		t.Cleanup(func() { close(h.gone) })
		return ts
	}

	t.Run("requests wait for a connection", func(t *testing.T) {
		h := newHoldBackend(t)
		ts := server(t, h, "60s")
		results := h.get(ts, 8)
		// Every request is accounted for: at the upstream, or queued.
		if !waitFor(scale(10*time.Second), func() bool { return h.arrived.Load()+ts.Stats().ProxyQueued == 8 }) {
			t.Fatalf("8 requests: %d arrived upstream, %d queued", h.arrived.Load(), ts.Stats().ProxyQueued)
		}
		if a, q, c := h.arrived.Load(), ts.Stats().ProxyQueued, h.conns.Load(); a != 2 || q != 6 || c != 2 {
			t.Fatalf("8 requests over max_conns 2: %d at the upstream on %d connections, %d queued; want 2 on 2, 6 queued", a, c, q)
		}
		// Let them go one at a time: each one done frees a connection
		// for the next in the queue.
		for i := range 8 {
			h.release <- struct{}{}
			if r := <-results; r.status != 200 || r.body != "ok" {
				t.Errorf("request %d of 8: %d %q", i+1, r.status, r.body)
			}
			if want := int64(min(i+3, 8)); !waitFor(scale(10*time.Second), func() bool { return h.arrived.Load() == want }) {
				t.Fatalf("after %d responses %d requests arrived upstream, want %d", i+1, h.arrived.Load(), want)
			}
		}
		if c := h.conns.Load(); c != 2 {
			t.Errorf("max_conns 2: the upstream saw %d connections", c)
		}
	})

	t.Run("response_timeout", func(t *testing.T) {
		const timeout = time.Second
		h := newHoldBackend(t)
		ts := server(t, h, timeout.String())
		running := h.get(ts, 2)
		if !waitFor(scale(10*time.Second), func() bool { return h.arrived.Load() == 2 }) {
			t.Fatalf("%d of 2 requests arrived upstream", h.arrived.Load())
		}
		// The two connections stay busy until every queued request has
		// its answer: each waits longer than response_timeout, for sure.
		queued := h.get(ts, 4)
		for range 4 {
			select {
			case r := <-queued:
				if r.status != 503 || r.took < timeout {
					t.Errorf("a request queued behind 2 held ones: %d after %v; want 503, after response_timeout (%v)", r.status, r.took, timeout)
				}
			case <-time.After(scale(10 * time.Second)):
				t.Fatalf("requests queued behind 2 held ones got no answer in 10s; response_timeout is %v", timeout)
			}
		}
		if a, q := h.arrived.Load(), ts.Stats().ProxyQueued; a != 2 || q != 4 {
			t.Errorf("%d requests arrived upstream and %d were queued; want 2 and 4", a, q)
		}
		h.release <- struct{}{}
		h.release <- struct{}{}
		for range 2 {
			if r := <-running; r.status != 200 || r.body != "ok" {
				t.Errorf("a held request, let go: %d %q", r.status, r.body)
			}
		}
	})
}

// holdBackend is an upstream that sends each response's head at once and
// its body ("ok") only when the test sends on release, or closes gone.
type holdBackend struct {
	*backend
	arrived atomic.Int64
	release chan struct{}
	gone    chan struct{}
}

func newHoldBackend(t *testing.T) *holdBackend {
	h := &holdBackend{release: make(chan struct{}, 8), gone: make(chan struct{})}
	h.backend = newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.arrived.Add(1)
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select {
		case <-h.release:
		case <-h.gone:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "ok")
	}))
	return h
}

// holdResult is one response through the proxy.
type holdResult struct {
	status int
	body   string
	took   time.Duration // from the request's start to its whole body
}

// get sends n requests at once, each on its own connection, and delivers
// their results as they come.
func (h *holdBackend) get(ts *testServer, n int) <-chan holdResult {
	out := make(chan holdResult, n)
	c := &http.Client{Timeout: scale(30 * time.Second), Transport: &http.Transport{DisableKeepAlives: true}}
	for range n {
		go func() {
			start := time.Now()
			r := holdResult{}
			if resp, err := c.Get(ts.url + "/"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				r.status, r.body = resp.StatusCode, string(b)
			}
			r.took = time.Since(start)
			out <- r
		}()
	}
	return out
}

// TestProxyFairShare: one client address holds at most half of
// max_conns; a client that stops reading (here: requests the upstream
// holds) on many streams leaves connections for the others.
func TestProxyFairShare(t *testing.T) {
	release := make(chan struct{})
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	defer close(release)
	ts := start(t, "workers = 1\n"+proxyConfig(t, "/", "max_conns = 4\nresponse_timeout = \"5s\"\n", b.hostPort()))
	// Six held requests from 127.0.0.1: two connections at most.
	for range 6 {
		c := dial(t, ts.addr)
		c.send("GET /hold HTTP/1.1\r\nHost: a\r\n\r\n")
	}
	if !waitFor(scale(5*time.Second), func() bool { return b.conns.Load() >= 2 }) {
		t.Fatalf("the held requests opened %d upstream connections", b.conns.Load())
	}
	time.Sleep(200 * time.Millisecond)
	if n := b.conns.Load(); n != 2 {
		t.Errorf("one client address with 6 requests holds %d of max_conns 4; want 2", n)
	}
	// Another address is served at once.
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	resp, err := client.Get(ts.url + "/quick")
	if err != nil {
		t.Fatalf("a second client address waited behind the first: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Errorf("second client: %d %q", resp.StatusCode, body)
	}
}
