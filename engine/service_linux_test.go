package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaship/engine/engine"
	"github.com/mediaship/engine/engine/config"
)

// TestServiceReload reloads a running server in process: new connections
// get the new root and the admin listener moves with it, a download in
// flight on the old configuration completes byte for byte, a connection
// idle between requests is closed (its client reconnects), a change of
// workers is refused by name with the old configuration serving on, and
// the stop waits for every generation.
func TestServiceReload(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(a, "x.txt"), "A")
	writeFile(t, filepath.Join(b, "x.txt"), "B")
	_, sum := linkBig(t, a, "big.bin")
	listen := "127.0.0.1:0"
	parse := func(root string, workers int) *config.Config {
		t.Helper()
		return parseConfig(t, fmt.Sprintf(
			"listen = %q\nworkers = %d\nroot = %q\n[admin]\nlisten = \"127.0.0.1:0\"\n", listen, workers, root))
	}
	srv, svc, _ := startService(t, parse(a, 2))
	addr, admin := srv.Addr(), srv.AdminAddr()
	get := func(path string) string {
		t.Helper()
		tr := &http.Transport{DisableKeepAlives: true}
		resp, err := (&http.Client{Transport: tr, Timeout: scale(10 * time.Second)}).Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	if !waitFor(scale(5*time.Second), func() bool { return get("/x.txt") == "A" }) {
		t.Fatal("the first configuration does not serve")
	}

	// A download under way, and a connection idle after one request.
	dl := dial(t, addr)
	dl.send("GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
	resp := dl.head("GET")
	h := sha256.New()
	if _, err := io.CopyN(h, resp.Body, 1<<20); err != nil {
		t.Fatal(err)
	}
	idle := dial(t, addr)
	idle.send("GET /x.txt HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := idle.response("GET"); string(body) != "A" {
		t.Fatalf("idle connection's request: %q", body)
	}

	if err := svc.Reload(parse(b, 2)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := get("/x.txt"); got != "B" {
		t.Errorf("after the reload a new connection got %q, want B", got)
	}
	if !idle.closed(scale(5 * time.Second)) {
		t.Error("a connection idle between requests stayed open on the old configuration")
	}
	if n, err := io.Copy(h, resp.Body); err != nil || hex.EncodeToString(h.Sum(nil)) != sum {
		t.Errorf("the download in flight across the reload: %d more bytes, %v; digest differs: %v", n, err, hex.EncodeToString(h.Sum(nil)) != sum)
	}
	if cur := svc.Current(); cur.AdminAddr() != admin {
		t.Errorf("admin listener %s after the reload, want the same %s", cur.AdminAddr(), admin)
	}
	r, err := http.Get("http://" + admin + "/pid")
	if err != nil {
		t.Fatalf("admin after the reload: %v", err)
	}
	pid, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if strings.TrimSpace(string(pid)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("/pid = %q", pid)
	}

	err = svc.Reload(parse(a, 3))
	if err == nil || !strings.Contains(err.Error(), "workers changed") {
		t.Errorf("a reload changing workers: %v, want a refusal naming workers", err)
	}
	if got := get("/x.txt"); got != "B" {
		t.Errorf("after a refused reload: %q, want B", got)
	}
	if err := svc.Reload(parse(a, 2)); err != nil {
		t.Fatalf("second Reload: %v", err)
	}
	if got := get("/x.txt"); got != "A" {
		t.Errorf("after the second reload: %q, want A", got)
	}

	// A listen address that changes is bound anew; the old one stops
	// taking connections.
	old := addr
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen = l.Addr().String()
	l.Close()
	if err := svc.Reload(parse(b, 2)); err != nil {
		t.Fatalf("Reload to a new address: %v", err)
	}
	addr = listen
	if got := get("/x.txt"); got != "B" {
		t.Errorf("on the new address: %q, want B", got)
	}
	if svc.Current().Addr() != listen {
		t.Errorf("serving on %s, want %s", svc.Current().Addr(), listen)
	}
	if !waitFor(scale(10*time.Second), func() bool {
		c, err := net.DialTimeout("tcp", old, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Errorf("the old address %s still takes connections", old)
	}
}

// TestReloadReleasesSockets: each reload of a server with HTTP/3 and QUIC
// passthrough leaves no descriptor and no goroutine behind once its
// predecessor has drained (ten reloads, counted), and after the stop the
// TCP and UDP ports are free to bind again, without SO_REUSEPORT.
func TestReloadReleasesSockets(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "x.txt"), "x")
	pki := newPKI(t, t.TempDir(), "r.test")
	n := 0
	parse := func() *config.Config {
		t.Helper()
		n++ // a limit that changes: each reload starts a generation
		return parseConfig(t, fmt.Sprintf(
			"listen = \"127.0.0.1:0\"\nworkers = 2\n[limits]\nheader_timeout = \"%ds\"\n%s[[sites]]\ndomain = \"r.test\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n"+
				"[reverse_proxy]\nenabled = true\ntls_termination = false\n[[reverse_proxy.routes]]\ndomain = \"pt.test\"\nupstreams = [\"127.0.0.1:9\"]\n",
			10+n, ktlsAuto, root, pki.certFile, pki.keyFile))
	}
	srv, svc, stop := startService(t, parse())
	addr := srv.Addr()
	fds := func() int {
		es, _ := os.ReadDir("/proc/self/fd")
		return len(es) + 1000*runtime.NumGoroutine() // both must settle back
	}
	if err := svc.Reload(parse()); err != nil {
		t.Fatal(err)
	}
	sweepers := func() int {
		buf := make([]byte, 1<<20)
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "passthrough.(*Router).sweep")
	}
	settle := func() int {
		// The predecessors drain in the background (a 2 s QUIC grace
		// first); a drained one has closed its router and everything
		// else it held.
		for deadline := time.Now().Add(scale(30 * time.Second)); sweepers() > 1 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		n := fds()
		for range 50 {
			time.Sleep(scale(200 * time.Millisecond))
			if m := fds(); m == n {
				return m
			} else {
				n = m
			}
		}
		return n
	}
	before := settle()
	for range 10 {
		if err := svc.Reload(parse()); err != nil {
			t.Fatal(err)
		}
	}
	after := settle()
	if n := sweepers(); n != 1 {
		t.Errorf("%d QUIC passthrough routers sweep after the reloads, want the current generation's only", n)
	}
	if after > before+2+1000*5 {
		t.Errorf("goroutines*1000 + descriptors: %d after 10 more reloads, %d before", after, before)
	}
	stop()
	if l, err := net.Listen("tcp", addr); err != nil {
		t.Errorf("TCP %s after the stop: %v", addr, err)
	} else {
		l.Close()
	}
	if c, err := net.ListenPacket("udp", addr); err != nil {
		t.Errorf("UDP %s after the stop: %v", addr, err)
	} else {
		c.Close()
	}
}

// TestQUICRelayAcrossReload: a QUIC passthrough flow relaying a download
// when the configuration is reloaded goes on in the old generation (the
// kernel's steering keeps its client's datagrams there) and arrives byte
// for byte; the old generation waits for it within shutdown_grace.
func TestQUICRelayAcrossReload(t *testing.T) {
	origin, pki := startH3Origin(t, "a.test")
	parse := func(idle string) *config.Config {
		t.Helper()
		text := "listen = \"127.0.0.1:0\"\n" + strings.Replace(passthroughConfig(fmt.Sprintf("[limits]\nidle_timeout = %q\n", idle), "a.test", origin),
			`shutdown_grace = "2s"`, `shutdown_grace = "30s"`, 1) +
			"idle_timeout = \"2s\"\n" // the route's: the old generation waits for its flow until then
		return parseConfig(t, text)
	}
	srv, svc, _ := startService(t, parse("60s"))
	addr := srv.Addr()
	c := quicPassClient(t, addr, pki.pool)
	resp, err := c.Get("https://a.test:" + portOf(addr) + "/bytes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	want := sha256.New()
	io.Copy(want, io.LimitReader(&pattern{}, h3OriginBytes))
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var n int64
	reloaded := false
	for {
		m, err := resp.Body.Read(buf)
		h.Write(buf[:m])
		n += int64(m)
		if !reloaded && n >= 4<<20 {
			reloaded = true
			if err := svc.Reload(parse("61s")); err != nil {
				t.Fatalf("Reload: %v", err)
			}
		}
		if err != nil {
			if err != io.EOF {
				t.Fatalf("after %d bytes: %v", n, err)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !reloaded || n != h3OriginBytes || !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Errorf("reloaded %v; %d bytes through the relay, digest match %v", reloaded, n, bytes.Equal(h.Sum(nil), want.Sum(nil)))
	}
}

// startService runs cfg's server as a Service until stop, which ends it
// and waits for every generation (an error after 30 s); the test's end
// stops it too.
func startService(t *testing.T, cfg *config.Config) (*engine.Server, *engine.Service, func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := engine.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	svc := engine.NewService(srv, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, srv) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(scale(30 * time.Second)):
				t.Error("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return srv, svc, stop
}
