package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaship/engine/engine"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/internal/vmtest"
)

// scale stretches test timeouts on slow machines: ENGINE_TEST_TIMEOUT_SCALE=3.
func scale(d time.Duration) time.Duration {
	if f, err := strconv.ParseFloat(os.Getenv("ENGINE_TEST_TIMEOUT_SCALE"), 64); err == nil && f > 0 {
		return time.Duration(float64(d) * f)
	}
	return d
}

// bigFile is a 100 MiB file of random bytes shared by the tests that need
// one, with its SHA-256.
var bigFile = sync.OnceValues(func() (string, string) {
	dir, err := os.MkdirTemp("", "engine-big-")
	if err != nil {
		panic(err)
	}
	p := filepath.Join(dir, "big.bin")
	f, err := os.Create(p)
	if err != nil {
		panic(err)
	}
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 1<<20)
	for i := 0; i < 100; i++ {
		rng.Read(buf)
		f.Write(buf)
		h.Write(buf)
	}
	if err := f.Close(); err != nil {
		panic(err)
	}
	return p, hex.EncodeToString(h.Sum(nil))
})

// TestMain runs the tests; the TestKernelTLS* ones may boot a VM with
// this binary as its /init (internal/vmtest).
func TestMain(m *testing.M) {
	// Servers built outside start ([integrity] state_dir unset) keep
	// their state in this run's directory, never in /var/lib/engine.
	state, err := os.MkdirTemp("", "engine-test-state-*")
	if err == nil {
		os.Setenv("STATE_DIRECTORY", state)
	}
	code := vmtest.RunMain(m)
	if p, _ := bigFile(); p != "" {
		os.RemoveAll(filepath.Dir(p))
	}
	if state != "" {
		os.RemoveAll(state)
	}
	os.Exit(code)
}

// setTestStateDir gives cfg the state directory of the test (digest
// cache, outboard trees) unless it names one: never /var/lib/engine, and
// no test learns digests from another. A configuration parsed again for
// a reload gets the same one.
func setTestStateDir(t testing.TB, cfg *config.Config) {
	if cfg.Integrity.StateDir == "" {
		cfg.Integrity.StateDir = filepath.Join(os.Getenv("STATE_DIRECTORY"), strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	}
}

// linkBig puts the 100 MiB file into dir as name.
func linkBig(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	src, sum := bigFile()
	dst := filepath.Join(dir, name)
	if err := os.Link(src, dst); err != nil {
		copyFile(t, src, dst)
	}
	return dst, sum
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeSidecar writes a precompressed sidecar with its file's mtime, as
// engine precompress does: the server serves no other.
func writeSidecar(t testing.TB, path, content string) {
	t.Helper()
	writeFile(t, path, content)
	ext := filepath.Ext(path)
	st, err := os.Stat(strings.TrimSuffix(path, ext))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, time.Time{}, st.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// testServer is a running engine on a loopback port.
type testServer struct {
	*engine.Server
	addr string
	url  string
	stop func() // graceful stop, waits for Run to return
	done chan struct{}
}

// start runs an engine with the TOML config text (listen is set to a free
// loopback port unless the text sets it) and stops it at test end.
func start(t testing.TB, toml string) *testServer {
	t.Helper()
	return startLog(t, toml, nil)
}

// startLog is start with the server's log (from Info up) also written to w.
func startLog(t testing.TB, toml string, w io.Writer) *testServer {
	t.Helper()
	return startFlags(t, toml, w)
}

// startFlags is startLog with command-line flags ("name", "value", ...)
// applied over the file, as engine serve does.
func startFlags(t testing.TB, toml string, w io.Writer, flags ...string) *testServer {
	t.Helper()
	if !topLevelListen(toml) {
		toml = "listen = \"127.0.0.1:0\"\n" + toml
	}
	dir := t.TempDir()
	cfg, err := config.Parse("test.toml", dir, []byte(toml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	for i := 0; i+1 < len(flags); i += 2 {
		if err := cfg.SetFlag(flags[i], flags[i+1]); err != nil {
			t.Fatalf("flag --%s: %v", flags[i], err)
		}
	}
	setTestStateDir(t, cfg)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if w != nil {
		log = slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, w), &slog.HandlerOptions{Level: testLogLevel()}))
	}
	srv, err := engine.New(cfg, log)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{Server: srv, addr: srv.Addr(), url: "http://" + srv.Addr(), done: make(chan struct{})}
	go func() {
		defer close(ts.done)
		if err := srv.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// Run binds nothing New has not bound, but it marks the server serving
	// (/healthz 200) only when it gets there: a test that asks at once
	// could find it "starting" on a loaded machine.
	select {
	case <-srv.Serving():
	case <-ts.done:
	case <-time.After(scale(30 * time.Second)):
		t.Fatal("the server did not start serving")
	}
	var once sync.Once
	ts.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-ts.done:
			case <-time.After(scale(40 * time.Second)):
				t.Errorf("server did not stop")
			}
		})
	}
	t.Cleanup(ts.stop)
	return ts
}

// topLevelListen reports whether a TOML text sets the top-level listen
// (before its first table: [admin] listen is another key).
func topLevelListen(toml string) bool {
	for _, line := range strings.Split(toml, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			return false
		}
		if k, _, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "listen" {
			return true
		}
	}
	return false
}

// syncBuffer is a bytes.Buffer safe for the server's loops to write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testWriter sends server logs to the test log, and stops after the test.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { recover() }() // logging after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// rawConn is a client connection for requests written byte by byte.
type rawConn struct {
	t *testing.T
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, scale(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(scale(20 * time.Second)))
	return &rawConn{t: t, Conn: c, r: bufio.NewReaderSize(c, 64<<10)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.Conn, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// head reads a response head and leaves its body to the caller.
func (c *rawConn) head(method string) *http.Response {
	c.t.Helper()
	resp, err := http.ReadResponse(c.r, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return resp
}

// response reads one response; method is the request's (HEAD has no body).
func (c *rawConn) response(method string) (*http.Response, []byte) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.r, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("read body: %v", err)
	}
	resp.Body.Close()
	return resp, body
}

// closed reports whether the server closed the connection (EOF or reset)
// within d.
func (c *rawConn) closed(d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.r.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

func canceledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// testLogLevel is the level of server logs a test asks for:
// ENGINE_TEST_LOG=debug shows debug lines too.
func testLogLevel() slog.Level {
	if os.Getenv("ENGINE_TEST_LOG") == "debug" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
