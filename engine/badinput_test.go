package engine_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmuggling sends the request smuggling vectors RFC 9112 tells a
// server to refuse. Each must be answered with an error and a closed
// connection; the bytes after it must never be served as a request.
func TestSmuggling(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	smuggled := "GET /alpha.txt HTTP/1.1\r\nHost: x\r\n\r\n"
	vectors := []struct {
		name   string
		req    string
		status int
	}{
		{"CL.TE", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"TE.CL", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 400},
		{"TE obfuscated", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n", 501},
		{"TE space before colon", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n", 400},
		{"TE obs-fold", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", 400},
		{"TE twice", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n", 400},
		{"TE in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"CL twice", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", 400},
		{"CL conflicting", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\n", 400},
		{"CL list", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0, 5\r\n\r\n", 400},
		{"CL plus", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +0\r\n\r\n", 400},
		{"bare CR", "GET / HTTP/1.1\r\nHost: x\r\nX: a\rTransfer-Encoding: chunked\r\n\r\n", 400},
		{"bare LF", "GET / HTTP/1.1\nHost: x\n\n", 400},
		{"NUL in header", "GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n", 400},
		{"bad name", "GET / HTTP/1.1\r\nHost: x\r\nX@Y: 1\r\n\r\n", 400},
		{"two hosts", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
		{"no host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"HTTP/2.0 line", "GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400},
	}
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			c := dial(t, ts.addr)
			c.send(v.req + smuggled)
			resp, _ := c.response("GET")
			if resp.StatusCode != v.status {
				t.Errorf("status %d, want %d", resp.StatusCode, v.status)
			}
			if !resp.Close {
				t.Error("error response without Connection: close")
			}
			if !c.closed(scale(3 * time.Second)) {
				t.Error("connection still open: the smuggled request could be read next")
			}
		})
	}

	// Chunked bodies with bad chunk sizes: the request is answered (405),
	// then the framing error closes the connection before the next request.
	for _, body := range []string{"zz\r\n", "-1\r\n", "5\r\nabcdefg\r\n", "1000000000000000000\r\n", "5\nabcde\r\n0\r\n\r\n"} {
		c := dial(t, ts.addr)
		c.send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body + smuggled)
		resp, _ := c.response("POST")
		if resp.StatusCode != 405 {
			t.Errorf("chunked %q: status %d", body, resp.StatusCode)
		}
		if !c.closed(scale(3 * time.Second)) {
			t.Errorf("chunked %q: connection open after bad chunk framing", body)
		}
	}
	if st := ts.Stats(); st.BadRequests < int64(len(vectors)) {
		t.Errorf("BadRequests = %d, want >= %d", st.BadRequests, len(vectors))
	}
}

func TestLimits(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n[limits]\nmax_header_bytes = \"2KiB\"\nmax_headers = 10\nmax_uri_bytes = \"512B\"\n", root))
	runExchanges(t, ts.addr, []exchange{
		{name: "414", req: get("/" + strings.Repeat("a", 600)), status: 414, closed: true},
		{name: "431 size", req: get("/", "X: "+strings.Repeat("b", 2100)+"\r\n"), status: 431, closed: true},
		{name: "431 count", req: get("/", strings.Repeat("X: 1\r\n", 11)), status: 431, closed: true},
		{name: "at limit", req: get("/alpha.txt", strings.Repeat("X: 1\r\n", 9)), status: 200},
	})
}

func TestTraversal(t *testing.T) {
	root := siteRoot(t)
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret.txt"), "secret")
	os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "out.txt"))
	os.Symlink(outside, filepath.Join(root, "outdir"))
	os.Symlink("alpha.txt", filepath.Join(root, "in.txt"))
	writeFile(t, filepath.Join(root, "locked.txt"), "locked")
	os.Chmod(filepath.Join(root, "locked.txt"), 0)
	fifoErr := mkfifo(filepath.Join(root, "fifo"))
	if fifoErr != nil && !errors.Is(fifoErr, errors.ErrUnsupported) {
		t.Fatal(fifoErr)
	}

	ts := start(t, fmt.Sprintf("root = %q\n", root))
	tests := []exchange{
		{name: "dotdot", req: get("/../etc/passwd"), status: 400, closed: false},
		{name: "dotdot inside", req: get("/docs/../alpha.txt"), status: 400},
		{name: "encoded dotdot", req: get("/%2e%2e/etc/passwd"), status: 400},
		{name: "mixed encoded", req: get("/.%2E/etc/passwd"), status: 400},
		{name: "encoded slash dotdot", req: get("/docs%2F..%2Falpha.txt"), status: 400},
		{name: "double encoded", req: get("/%252e%252e/etc/passwd"), status: 404},
		{name: "NUL", req: get("/alpha.txt%00.html"), status: 400},
		{name: "backslash", req: get("/docs%5C..%5Calpha.txt"), status: 400},
		{name: "bad escape", req: get("/a%zz"), status: 400},
		{name: "symlink out", req: get("/out.txt"), status: 403},
		{name: "symlink dir out", req: get("/outdir/secret.txt"), status: 403},
		{name: "symlink in", req: get("/in.txt"), status: 200, body: "abcdefghijklmnopqrstuvwxyz"},
		{name: "dot segment", req: get("/./alpha.txt"), status: 200},
		{name: "asterisk", req: "GET * HTTP/1.1\r\nHost: x\r\n\r\n", status: 400, closed: true},
	}
	if fifoErr == nil { // no named pipes on Windows
		tests = append(tests, exchange{name: "fifo", req: get("/fifo"), status: 403})
	}
	if os.Geteuid() != 0 { // root reads anything
		tests = append(tests, exchange{name: "unreadable", req: get("/locked.txt"), status: 403})
	}
	runExchanges(t, ts.addr, tests)

	// A site may allow symlinks that leave its root.
	ts2 := start(t, fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\nfollow_symlinks_outside_root = true\n", root))
	runExchanges(t, ts2.addr, []exchange{
		{name: "allowed out", req: get("/out.txt"), status: 200, body: "secret"},
		{name: "still no dotdot", req: get("/../etc/passwd"), status: 400},
	})
}

func TestSlowloris(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n[limits]\nheader_timeout = \"1s\"\nidle_timeout = \"1s\"\n", root))

	// A head trickled a byte at a time is cut off at the header timeout,
	// however steadily the bytes come.
	c := dial(t, ts.addr)
	req := get("/alpha.txt", strings.Repeat("X-Pad: slow\r\n", 50))
	start := time.Now()
	closed := false
	for i := 0; i < len(req) && time.Since(start) < scale(10*time.Second); i++ {
		if _, err := c.Write([]byte{req[i]}); err != nil {
			closed = true
			break
		}
		time.Sleep(50 * time.Millisecond)
		if i%5 == 0 && c.closed(time.Millisecond) {
			closed = true
			break
		}
	}
	if !closed {
		t.Fatal("slow head was served forever")
	}

	// An idle keep-alive connection is closed after idle_timeout.
	c = dial(t, ts.addr)
	c.send(get("/alpha.txt"))
	c.response("GET")
	if !c.closed(scale(5 * time.Second)) {
		t.Error("idle connection not closed")
	}
	// Other connections are served meanwhile.
	c = dial(t, ts.addr)
	c.send(get("/alpha.txt"))
	if resp, _ := c.response("GET"); resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	if ts.Stats().Timeouts < 2 {
		t.Errorf("Timeouts = %d, want >= 2", ts.Stats().Timeouts)
	}
}

// TestMaxConnections: at max_connections a new client is admitted by
// closing a connection that only waits for its client (keep-alive idle,
// no request yet), the one nearest its deadline; connections with a
// response in progress are never closed for it, and when all are busy
// the new connection is refused.
func TestMaxConnections(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts := start(t, fmt.Sprintf("root = %q\nworkers = 1\n[limits]\nmax_connections = 2\n", root))
	a, b := dial(t, ts.addr), dial(t, ts.addr)
	a.send(get("/alpha.txt"))
	a.response("GET")
	b.send(get("/alpha.txt"))
	b.response("GET")
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt"))
	if resp, _ := c.response("GET"); resp.StatusCode != 200 {
		t.Errorf("new client at max_connections with idle ones: %d", resp.StatusCode)
	}
	if !a.closed(scale(3 * time.Second)) {
		t.Error("the idle connection nearest its deadline was not closed for the new client")
	}
	if b.closed(100 * time.Millisecond) {
		t.Error("a second idle connection was closed too")
	}
	if st := ts.Stats(); st.Reclaimed != 1 || st.Open != 2 {
		t.Errorf("Reclaimed %d Open %d, want 1 and 2", st.Reclaimed, st.Open)
	}

	// Both slots busy sending (clients not reading): a new client is
	// refused, and the downloads go on. Both responses are under way
	// (queued) before it comes.
	queued := ts.Stats().Requests
	b.send(get("/big.bin"))
	c.send(get("/big.bin"))
	if !waitFor(scale(10*time.Second), func() bool { return ts.Stats().Requests == queued+2 }) {
		t.Fatalf("%d of 2 downloads under way", ts.Stats().Requests-queued)
	}
	d := dial(t, ts.addr)
	if !d.closed(scale(3 * time.Second)) {
		t.Error("a connection with a response in progress was closed for a new client")
	}
	if ts.Stats().Rejected < 1 {
		t.Error("Rejected not counted")
	}
	for _, x := range []*rawConn{b, c} {
		x.SetReadDeadline(time.Now().Add(scale(20 * time.Second)))
		resp := x.head("GET")
		if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != 100<<20 {
			t.Errorf("download beside the refusal: %d bytes, %v", n, err)
		}
	}
}

// TestHalfClose: a client that sends its request and shuts down its write
// side still gets the whole answer.
func TestHalfClose(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt"))
	c.Conn.(*net.TCPConn).CloseWrite()
	resp, body := c.response("GET")
	if resp.StatusCode != 200 || string(body) != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("half-closed client got %d %q", resp.StatusCode, body)
	}
}

// TestBadInputIsLogged: refusals leave a log line that says why, without
// the client seeing anything but the status.
func TestBadInputIsLogged(t *testing.T) {
	root := siteRoot(t)
	var logs syncBuffer
	ts := startLog(t, fmt.Sprintf("root = %q\n", root), &logs)
	for _, req := range []string{
		get("/../etc/passwd"),
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
	} {
		c := dial(t, ts.addr)
		c.send(req)
		_, body := c.response("GET")
		if strings.Contains(string(body), "Content-Length") || strings.Contains(string(body), "files:") {
			t.Errorf("internal reason leaked to the client: %s", body)
		}
	}
	for _, want := range []string{`msg="refused path" loop=`, `path=/../etc/passwd`, `msg="bad request"`, `reason="repeated Content-Length"`} {
		if !waitFor(scale(2*time.Second), func() bool { return strings.Contains(logs.String(), want) }) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}
