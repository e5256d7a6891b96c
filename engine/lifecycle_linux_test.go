package engine_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/engine"
	"github.com/mediaship/engine/engine/config"
	"golang.org/x/sys/unix"
)

// TestSlowReadersBoundedMemory: clients that request a large file and
// read nothing cost their socket buffers, never a copy of the file.
func TestSlowReadersBoundedMemory(t *testing.T) {
	root := t.TempDir()
	linkBig(t, root, "big.bin")
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	before := heapInUse()
	const clients = 32
	conns := make([]*rawConn, clients)
	for i := range conns {
		conns[i] = dial(t, ts.addr)
		// A small receive buffer: the client reads nothing.
		conns[i].Conn.(*net.TCPConn).SetReadBuffer(4096)
		conns[i].send(get("/big.bin"))
	}
	// Let the server fill the sockets and park on EPOLLOUT.
	var last int64
	waitFor(scale(5*time.Second), func() bool {
		time.Sleep(100 * time.Millisecond)
		cur := ts.Stats().BytesFile
		same := cur == last && cur > 0
		last = cur
		return same
	})
	grew := int64(heapInUse()) - int64(before)
	t.Logf("heap grew %d KiB for %d stalled 100 MiB downloads; %d MiB in socket buffers", grew>>10, clients, last>>20)
	if grew > 8<<20 {
		t.Errorf("heap grew %d MiB for %d stalled downloads: file content is being buffered", grew>>20, clients)
	}
	// And a stalled client does not stall others.
	c := dial(t, ts.addr)
	writeFile(t, filepath.Join(root, "small.txt"), "ok")
	c.send(get("/small.txt"))
	if resp, body := c.response("GET"); resp.StatusCode != 200 || string(body) != "ok" {
		t.Errorf("while others stall: %d %q", resp.StatusCode, body)
	}
}

// TestDisconnectStopsSending: a client that goes away mid-transfer stops
// the sendfile loop for its connection at once.
func TestDisconnectStopsSending(t *testing.T) {
	root := t.TempDir()
	linkBig(t, root, "big.bin")
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	c := dial(t, ts.addr)
	c.send(get("/big.bin"))
	if _, err := io.CopyN(io.Discard, c.r, 2<<20); err != nil {
		t.Fatal(err)
	}
	c.Conn.(*net.TCPConn).SetLinger(0)
	c.Close()
	if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().Open == 0 }) {
		t.Fatalf("connection still open on the server after the client left: %+v", ts.Stats())
	}
	sent := ts.Stats().BytesFile
	time.Sleep(300 * time.Millisecond)
	if after := ts.Stats().BytesFile; after != sent {
		t.Errorf("sendfile went on after the client left: %d -> %d bytes", sent, after)
	}
	if sent >= 100<<20 {
		t.Errorf("the whole file was sent (%d bytes) to a client that left after 2 MiB", sent)
	}
}

// TestH2FileShrinksOneStream: on HTTP/2 over TLS, a file truncated under
// one stream's response resets that stream (INTERNAL_ERROR), and another
// stream on the same connection still gets every byte of its file: one
// operator replacing a file must not cut off every download a browser
// has on that connection.
func TestH2FileShrinksOneStream(t *testing.T) {
	root := t.TempDir()
	src, _ := bigFile()
	p := filepath.Join(root, "shrink.bin")
	copyFile(t, src, p)
	other := strings.Repeat("the other stream's file\n", 50_000)
	writeFile(t, filepath.Join(root, "other.txt"), other)
	ts, pki := startTLS(t, root, ktlsAuto)
	c := h2Client(pki)
	url := "https://localhost:" + portOf(ts.addr)
	resp, err := c.Get(url + "/shrink.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
		t.Fatal(err)
	}
	// The client's stream window (4 MiB) runs out and the server waits
	// for it; then the file becomes shorter than what was already sent.
	time.Sleep(scale(300 * time.Millisecond))
	if err := os.Truncate(p, 2<<20); err != nil {
		t.Fatal(err)
	}
	got, _, r2 := getSHA(t, c, url+"/other.txt")
	if want := sha256.Sum256([]byte(other)); got != hex.EncodeToString(want[:]) || r2.ProtoMajor != 2 {
		t.Errorf("the other stream's file: sha256 %s over HTTP/%d", got, r2.ProtoMajor)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if total := n + 1<<20; err == nil || total >= resp.ContentLength {
		t.Errorf("the shrunk file's stream ended with %v after %d of %d bytes; want a reset and a short body", err, total, resp.ContentLength)
	}
	st := ts.Stats()
	if st.H2BodyFailures != 1 || st.Aborted != 0 {
		t.Errorf("H2BodyFailures %d, connections aborted %d; want 1 and 0", st.H2BodyFailures, st.Aborted)
	}
}

// TestFileShrinksDuringTransfer: a file truncated while being sent resets
// the connection; the client never sees a clean end with fewer bytes than
// Content-Length promised.
func TestFileShrinksDuringTransfer(t *testing.T) {
	root := t.TempDir()
	src, _ := bigFile()
	p := filepath.Join(root, "shrink.bin")
	copyFile(t, src, p)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	c := dial(t, ts.addr)
	c.Conn.(*net.TCPConn).SetReadBuffer(64 << 10)
	c.send(get("/shrink.bin"))
	resp := c.head("GET")
	if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 10<<20); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	total := n + 1<<20
	if err == nil {
		t.Fatalf("body ended cleanly after %d of %d bytes", total, resp.ContentLength)
	}
	if total >= resp.ContentLength {
		t.Errorf("got %d bytes and an error %v, want a short body", total, err)
	}
	if !waitFor(scale(3*time.Second), func() bool { return ts.Stats().Aborted >= 1 }) {
		t.Error("abort not counted")
	}
	// The server goes on serving, and serves the new (short) file.
	c2 := dial(t, ts.addr)
	c2.send(get("/shrink.bin", "Range: bytes=0-0\r\n"))
	if r2, _ := c2.response("GET"); r2.Header.Get("Content-Range") != fmt.Sprintf("bytes 0-0/%d", 10<<20) {
		t.Errorf("after truncation: Content-Range %q", r2.Header.Get("Content-Range"))
	}
}

// TestFileReplacedDuringTransfer: a file replaced by rename (how deploys
// publish) keeps serving the old bytes to the download in flight, and new
// requests get the new file at once.
func TestFileReplacedDuringTransfer(t *testing.T) {
	root := t.TempDir()
	p, want := linkBig(t, root, "model.bin")
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	c := dial(t, ts.addr)
	c.send(get("/model.bin"))
	resp := c.head("GET")
	h := sha256.New()
	if _, err := io.CopyN(h, resp.Body, 1<<20); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(root, ".model.bin.tmp")
	writeFile(t, tmp, "new model")
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(h, resp.Body); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("in-flight download changed content: %s, want %s", got, want)
	}
	c.send(get("/model.bin"))
	if _, body := c.response("GET"); string(body) != "new model" {
		t.Errorf("after rename: %q, want the new file", body)
	}
}

// TestCacheInvalidation: edits, creations and deletions are seen by the
// next request (inotify), even for files the cache holds in memory.
func TestCacheInvalidation(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	fetch := func(path string) (int, string, string) {
		c := dial(t, ts.addr)
		c.send(get(path))
		resp, body := c.response("GET")
		return resp.StatusCode, string(body), resp.Header.Get("ETag")
	}
	check := func(step, path string, status int, body string) {
		t.Helper()
		ok := waitFor(scale(2*time.Second), func() bool {
			s, b, _ := fetch(path)
			return s == status && (body == "" || b == body)
		})
		if !ok {
			s, b, _ := fetch(path)
			t.Errorf("%s: %s = %d %q, want %d %q", step, path, s, b, status, body)
		}
	}
	_, _, et1 := fetch("/alpha.txt")
	f, _ := os.OpenFile(filepath.Join(root, "alpha.txt"), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("!")
	f.Close()
	check("append", "/alpha.txt", 200, "abcdefghijklmnopqrstuvwxyz!")
	if _, _, et2 := fetch("/alpha.txt"); et2 == et1 {
		t.Error("ETag unchanged after edit")
	}
	check("missing", "/later.txt", 404, "")
	writeFile(t, filepath.Join(root, "later.txt"), "now here")
	check("create", "/later.txt", 200, "now here")
	os.Remove(filepath.Join(root, "later.txt"))
	check("delete", "/later.txt", 404, "")
	// A sidecar appearing later is picked up too.
	writeSidecar(t, filepath.Join(root, "alpha.txt.gz"), "GZ")
	ok := waitFor(scale(2*time.Second), func() bool {
		c := dial(t, ts.addr)
		c.send(get("/alpha.txt", "Accept-Encoding: gzip\r\n"))
		_, body := c.response("GET")
		return string(body) == "GZ"
	})
	if !ok {
		t.Error("new sidecar not served")
	}
	if ts.Stats().CacheHits == 0 {
		t.Error("no cache hits: the open-file cache is not in use")
	}
}

func TestVirtualHosts(t *testing.T) {
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(a, "who"), "a")
	writeFile(t, filepath.Join(b, "who"), "b")
	writeFile(t, filepath.Join(c, "who"), "default")
	ts := start(t, fmt.Sprintf(`root = %q
[[sites]]
domain = "a.example"
root = %q
[[sites]]
domain = "*.b.example"
root = %q
[[sites]]
domain = "h2only.example"
root = %q
protocols = { h1 = false, h2 = true }
`, c, a, b, a))
	for _, tt := range []struct{ host, want string }{
		{"a.example", "a"}, {"A.Example:8080", "a"}, {"a.example.", "a"},
		{"x.b.example", "b"}, {"deep.x.b.example", "b"}, {"b.example", "default"},
		{"other", "default"}, {"127.0.0.1", "default"},
	} {
		conn := dial(t, ts.addr)
		conn.send("GET /who HTTP/1.1\r\nHost: " + tt.host + "\r\n\r\n")
		if _, body := conn.response("GET"); string(body) != tt.want {
			t.Errorf("Host %q served %q, want %q", tt.host, body, tt.want)
		}
	}
	// A site with HTTP/1.1 turned off refuses it with 421.
	conn0 := dial(t, ts.addr)
	conn0.send("GET /who HTTP/1.1\r\nHost: h2only.example\r\n\r\n")
	if resp, _ := conn0.response("GET"); resp.StatusCode != 421 {
		t.Errorf("h1 disabled: status %d, want 421", resp.StatusCode)
	}
	// HTTP/1.0 without Host gets the default site; absolute-form wins over Host.
	conn := dial(t, ts.addr)
	conn.send("GET /who HTTP/1.0\r\n\r\n")
	if _, body := conn.response("GET"); string(body) != "default" {
		t.Errorf("HTTP/1.0 without Host: %q", body)
	}
	conn = dial(t, ts.addr)
	conn.send("GET http://a.example/who HTTP/1.1\r\nHost: other\r\n\r\n")
	if _, body := conn.response("GET"); string(body) != "a" {
		t.Errorf("absolute-form: %q", body)
	}
}

func TestDirectoryListing(t *testing.T) {
	root := siteRoot(t)
	writeFile(t, filepath.Join(root, "files/b<x>.txt"), "1")
	writeFile(t, filepath.Join(root, "files/a.txt"), "1")
	ts := start(t, fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\ndirectory_listing = true\n", root))
	c := dial(t, ts.addr)
	c.send(get("/files/"))
	resp, body := c.response("GET")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `<a href="./a.txt">a.txt</a>`) ||
		!strings.Contains(string(body), "b&lt;x&gt;.txt") || strings.Contains(string(body), "<x>") {
		t.Errorf("listing %d:\n%s", resp.StatusCode, body)
	}
	// The site's root lists too when it has no index file (its path
	// inside the root is empty, which once looked like "already listed").
	if err := os.Remove(filepath.Join(root, "index.html")); err != nil {
		t.Fatal(err)
	}
	c.send(get("/"))
	resp, body = c.response("GET")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `<a href="./files/">files/</a>`) {
		t.Errorf("root listing %d:\n%s", resp.StatusCode, body)
	}
	// Without the setting there is no listing.
	ts2 := start(t, fmt.Sprintf("root = %q\n", root))
	c = dial(t, ts2.addr)
	c.send(get("/files/"))
	if resp, _ := c.response("GET"); resp.StatusCode != 404 {
		t.Errorf("listing served without directory_listing: %d", resp.StatusCode)
	}
}

// TestGracefulShutdown: in-flight downloads finish, idle connections
// close, new connections are refused.
func TestGracefulShutdown(t *testing.T) {
	root := t.TempDir()
	_, want := linkBig(t, root, "big.bin")
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	idle := dial(t, ts.addr)
	idle.send(get("/big.bin", "Range: bytes=0-0\r\n"))
	idle.response("GET")

	busy, resp, h, stopped := downloadThenStop(t, ts)

	if !idle.closed(scale(3 * time.Second)) {
		t.Error("idle keep-alive connection not closed at shutdown")
	}
	if !waitFor(scale(3*time.Second), func() bool {
		c, err := net.DialTimeout("tcp", ts.addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	}) {
		t.Error("new connections still accepted while shutting down")
	}
	if _, err := io.Copy(h, resp.Body); err != nil {
		t.Fatalf("in-flight download cut: %v", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Error("in-flight download corrupted at shutdown")
	}
	if !busy.closed(scale(3 * time.Second)) {
		t.Error("connection not closed after its last response at shutdown")
	}
	select {
	case <-stopped:
	case <-time.After(scale(10 * time.Second)):
		t.Fatal("server did not stop after the last response")
	}
}

// TestBulkPolicy: a large response switches its socket to the bulk
// congestion control, read back from the server's socket with
// getsockopt(TCP_CONGESTION) while the body is still in flight; a small
// response leaves the system default. The switch is per connection and
// lasts: reactor.Conn.SetCongestion never sets the default back, so a
// small response after a bulk one on the same connection still goes by
// the bulk congestion control.
func TestBulkPolicy(t *testing.T) {
	avail, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if !strings.Contains(string(avail), "bbr") {
		t.Skip("this kernel has no BBR (tcp_available_congestion_control); modprobe tcp_bbr to run this test")
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Fatal(err)
	}
	def := strings.TrimSpace(string(b))
	root := siteRoot(t)
	big, _ := linkBig(t, root, "big.bin")
	const bulk = 32 << 20 // far more than loopback socket buffers hold
	f, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	io.CopyN(h, f, bulk)
	f.Close()
	want := hex.EncodeToString(h.Sum(nil))

	// bbr is the default bulk_congestion; reno, which every kernel has,
	// shows the switch where bbr is the system default too (it is on the
	// development machines).
	for _, cc := range []string{"bbr", "reno"} {
		t.Run(cc, func(t *testing.T) {
			ts := start(t, fmt.Sprintf("root = %q\n[kernel]\nbulk_threshold = \"1MiB\"\nbulk_congestion = %q\n", root, cc))
			c := dial(t, ts.addr)
			c.send(get("/alpha.txt"))
			c.response("GET")
			if got := serverCongestion(t, c.Conn); got != def {
				t.Errorf("after a small response: TCP_CONGESTION %q, want the system default %q", got, def)
			}
			if ts.Stats().Bulk != 0 {
				t.Error("a small response was treated as bulk")
			}

			c.send(get("/big.bin", fmt.Sprintf("Range: bytes=0-%d\r\n", bulk-1)))
			resp := c.head("GET")
			if got := serverCongestion(t, c.Conn); got != cc {
				t.Errorf("during a %d-byte response: TCP_CONGESTION %q, want %q", bulk, got, cc)
			}
			h := sha256.New()
			if n, err := io.Copy(h, resp.Body); err != nil || n != bulk || hex.EncodeToString(h.Sum(nil)) != want {
				t.Fatalf("bulk body: %d bytes, err %v, want %d byte-exact", n, err, bulk)
			}
			st := ts.Stats()
			if st.Bulk != 1 || st.CongestionErrors != 0 {
				t.Errorf("Bulk = %d, CongestionErrors = %d; want 1, 0", st.Bulk, st.CongestionErrors)
			}

			c.send(get("/alpha.txt"))
			c.response("GET")
			if got := serverCongestion(t, c.Conn); got != cc {
				t.Errorf("a small response after the bulk one: TCP_CONGESTION %q, want %q (the socket keeps it)", got, cc)
			}
		})
	}
}

// serverCongestion returns TCP_CONGESTION on the server's end of the
// client connection c. The server runs in this process: its socket is
// the one in /proc/self/fd whose address is c's remote address and whose
// peer is c's local address.
func serverCongestion(t *testing.T, c net.Conn) string {
	t.Helper()
	unmap := func(a net.Addr) netip.AddrPort {
		ap := a.(*net.TCPAddr).AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	local, peer := unmap(c.RemoteAddr()), unmap(c.LocalAddr())
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); !strings.HasPrefix(link, "socket:") {
			continue
		}
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A duplicate keeps the socket for the checks below even if the
		// server closed fd and the number was reused in between.
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			continue
		}
		cc, ok := "", sockAddrPort(unix.Getsockname(dup)) == local && sockAddrPort(unix.Getpeername(dup)) == peer
		if ok {
			cc, err = unix.GetsockoptString(dup, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		}
		unix.Close(dup)
		if ok {
			if err != nil {
				t.Fatalf("getsockopt(TCP_CONGESTION) on the server's socket: %v", err)
			}
			return cc
		}
	}
	t.Fatalf("no socket in /proc/self/fd has address %v and peer %v", local, peer)
	return ""
}

func sockAddrPort(sa unix.Sockaddr, err error) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		if err == nil {
			return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
		}
	case *unix.SockaddrInet6:
		if err == nil {
			return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
		}
	}
	return netip.AddrPort{}
}

// TestLimitRate: a site's limit_rate paces its responses in the kernel.
// The check is a lower bound on the time taken, which only a slower
// machine can make longer.
func TestLimitRate(t *testing.T) {
	root := t.TempDir()
	linkBig(t, root, "big.bin")
	ts := start(t, fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\nlimit_rate = \"1MiB\"\n", root))
	c := dial(t, ts.addr)
	begin := time.Now()
	c.send(get("/big.bin", "Range: bytes=0-3145727\r\n"))
	_, body := c.response("GET")
	took := time.Since(begin)
	if len(body) != 3<<20 {
		t.Fatalf("got %d bytes", len(body))
	}
	if took < 1500*time.Millisecond {
		t.Errorf("3 MiB at limit_rate 1MiB took %v: not paced", took)
	}
}

func TestAccessLog(t *testing.T) {
	root := siteRoot(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	ts := start(t, fmt.Sprintf("root = %q\naccess_log = %q\n", root, logPath))
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt", "User-Agent: test\"agent\r\nReferer: http://r/\r\n"))
	c.response("GET")
	c.send(get("/nope"))
	c.response("GET")
	ts.stop()
	data, _ := os.ReadFile(logPath)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		t.Fatalf("access log has %d lines:\n%s", len(lines), data)
	}
	if !strings.HasPrefix(lines[0], "127.0.0.1 - - [") || !strings.Contains(lines[0], `"GET /alpha.txt HTTP/1.1" 200 26 "http://r/" "test\x22agent"`) {
		t.Errorf("line 1: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"GET /nope HTTP/1.1" 404 `) {
		t.Errorf("line 2: %s", lines[1])
	}
	// Log rotation: rename, reopen (SIGUSR1 in engine serve), and lines go
	// to a new file by the configured name.
	ts2 := start(t, fmt.Sprintf("root = %q\naccess_log = %q\n", root, logPath))
	os.Rename(logPath, logPath+".1")
	if err := ts2.ReopenLogs(); err != nil {
		t.Fatal(err)
	}
	c = dial(t, ts2.addr)
	c.send(get("/alpha.txt"))
	c.response("GET")
	ts2.stop()
	if fresh, _ := os.ReadFile(logPath); !strings.Contains(string(fresh), "GET /alpha.txt") {
		t.Errorf("after reopen the new log holds %q", fresh)
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		if strings.ContainsAny(sc.Text(), "\r") {
			t.Error("raw control characters in access log")
		}
	}
}

// TestPortInUse: a second server on a port already served fails to start
// instead of silently sharing it through SO_REUSEPORT.
func TestPortInUse(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	cfg, err := config.Parse("second.toml", root, []byte(fmt.Sprintf("root = %q\nlisten = %q\n", root, ts.addr)))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := engine.New(cfg, nil)
	if err == nil {
		srv.Run(canceledContext())
		t.Fatal("second server started on a port in use")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error %q does not say the address is in use", err)
	}
	// The first server is unharmed.
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt"))
	if resp, _ := c.response("GET"); resp.StatusCode != 200 {
		t.Errorf("first server: %d", resp.StatusCode)
	}
}

// TestIdleConnectionMemory: a keep-alive connection between requests holds
// no buffers, only its state. Clients use raw sockets so the test process's
// heap holds nothing of theirs, and the measurement runs in a fresh
// process (this test binary, run again for this test only): in a process
// that ran other tests first, the garbage they left made the figure
// meaningless (it came out negative).
func TestIdleConnectionMemory(t *testing.T) {
	if os.Getenv("ENGINE_TEST_IDLE_MEMORY_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdleConnectionMemory$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "ENGINE_TEST_IDLE_MEMORY_CHILD=1")
		out, err := cmd.CombinedOutput()
		m := regexp.MustCompile(`(-?\d+) bytes of heap per idle keep-alive connection`).FindSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("measuring in a fresh process: %v\n%s", err, out)
		}
		t.Logf("%s bytes of heap per idle keep-alive connection (measured in a fresh process)", m[1])
		return
	}
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	host, port, _ := net.SplitHostPort(ts.addr)
	ip := net.ParseIP(host).To4()
	var p int
	fmt.Sscan(port, &p)
	sa := &unix.SockaddrInet4{Port: p}
	copy(sa.Addr[:], ip)
	req := []byte(get("/alpha.txt"))
	buf := make([]byte, 4096)
	connect := func() int {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Connect(fd, sa); err != nil {
			t.Fatal(err)
		}
		unix.Write(fd, req)
		if n, err := unix.Read(fd, buf); err != nil || n == 0 || !strings.HasSuffix(string(buf[:n]), "xyz") {
			t.Fatalf("read %d %v %q", n, err, buf[:max(n, 0)])
		}
		return fd
	}
	for i := 0; i < 20; i++ { // warm up pools and caches
		unix.Close(connect())
	}
	waitFor(scale(2*time.Second), func() bool { return ts.Stats().Open == 0 })
	before := heapInUse()
	const n = 500
	fds := make([]int, 0, n)
	for i := 0; i < n; i++ {
		fds = append(fds, connect())
	}
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	if !waitFor(scale(2*time.Second), func() bool { return ts.Stats().Open == n }) {
		t.Fatalf("open connections %d, want %d", ts.Stats().Open, n)
	}
	per := (int64(heapInUse()) - int64(before)) / n
	t.Logf("%d bytes of heap per idle keep-alive connection", per)
	if per > 4096 {
		t.Errorf("an idle connection holds %d bytes: buffers are kept between requests", per)
	}
}

// downloadThenStop starts downloading /big.bin, reads its first MiB
// into h, and stops the server (stopped closes once it has).
func downloadThenStop(t *testing.T, ts *testServer) (busy *rawConn, resp *http.Response, h hash.Hash, stopped chan struct{}) {
	busy = dial(t, ts.addr)
	busy.send(get("/big.bin"))
	resp = busy.head("GET")
	h = sha256.New()
	io.CopyN(h, resp.Body, 1<<20)
	stopped = make(chan struct{})
	go func() { ts.stop(); close(stopped) }()
	return busy, resp, h, stopped
}

// TestShutdownUntilDone: with shutdown_grace = "until done" a download
// whose client pauses past what a short grace allows still completes
// byte-exact, and the server stops after it; with a short grace the same
// download is cut (the contrast the setting is for).
func TestShutdownUntilDone(t *testing.T) {
	root := t.TempDir()
	_, want := linkBig(t, root, "big.bin")
	for _, tt := range []struct {
		grace    string
		complete bool
	}{
		{"until done", true},
		{"500ms", false},
	} {
		t.Run(tt.grace, func(t *testing.T) {
			ts := start(t, fmt.Sprintf("root = %q\nshutdown_grace = %q\n", root, tt.grace))
			_, resp, h, stopped := downloadThenStop(t, ts)
			time.Sleep(1500 * time.Millisecond) // past the short grace; well within send_timeout
			_, err := io.Copy(h, resp.Body)
			complete := err == nil && hex.EncodeToString(h.Sum(nil)) == want
			if complete != tt.complete {
				t.Errorf("download complete and byte-exact: %v (err %v), want %v", complete, err, tt.complete)
			}
			select {
			case <-stopped:
			case <-time.After(scale(10 * time.Second)):
				t.Fatal("server did not stop after the download")
			}
		})
	}
}
