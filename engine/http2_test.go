package engine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/mediaship/engine/internal/testtool"
)

// h2Client speaks only HTTP/2 (x/net's Transport), over TLS to the test
// PKI, or in the clear with prior knowledge when pki is nil.
func h2Client(pki *testPKI) *http.Client {
	tr := &http2.Transport{DisableCompression: true}
	if pki != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: pki.pool, ServerName: "localhost"}
	} else {
		tr.AllowHTTP = true
		tr.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	return &http.Client{Transport: tr, Timeout: scale(60 * time.Second)}
}

// ktlsAuto lets a TLS test server start on a kernel without kernel TLS.
const ktlsAuto = "[kernel]\nktls = \"auto\"\n"

func h2cTOML(root string) string {
	return fmt.Sprintf("root = %q\n[[sites]]\ndomain = \"*\"\nroot = %q\n[sites.protocols]\nh2c = true\n", root, root)
}

// sha256Of downloads url and returns the body's length and SHA-256.
func sha256Of(t *testing.T, c *http.Client, url string, hdr ...string) (int64, string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatalf("after %d bytes: %v", n, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), resp
}

func TestH2DownloadBig(t *testing.T) {
	root := t.TempDir()
	_, want := linkBig(t, root, "big.bin")
	tls, pki := startTLS(t, root, ktlsAuto)
	plain := start(t, h2cTOML(root))
	for _, tt := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"tls", h2Client(pki), "https://" + tls.addr + "/big.bin"},
		{"h2c", h2Client(nil), plain.url + "/big.bin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, got, resp := sha256Of(t, tt.c, tt.url)
			if resp.Proto != "HTTP/2.0" || n != 100<<20 || got != want {
				t.Errorf("%s: %d bytes sha256 %s, want %d %s", resp.Proto, n, got, 100<<20, want)
			}
			if resp.Header.Get("Repr-Digest") == "" && resp.Header.Get("Etag") == "" {
				t.Errorf("headers %v", resp.Header)
			}
		})
	}
	if st := tls.Stats(); st.H2Connections == 0 || st.H2Streams == 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestH2Curl(t *testing.T) {
	curl := testtool.Require(t, "curl")
	root := t.TempDir()
	_, want := linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto)
	plain := start(t, h2cTOML(root))
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"tls", []string{"--http2", "--cacert", pki.caFile, "--resolve", "localhost:" + portOf(ts.addr) + ":127.0.0.1",
			"https://localhost:" + portOf(ts.addr) + "/big.bin"}},
		{"h2c", []string{"--http2-prior-knowledge", plain.url + "/big.bin"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"-sS", "-o", out, "-w", "%{http_version} %{http_code}"}, tt.args...)
			b, err := exec.Command(curl, args...).CombinedOutput()
			if err != nil || string(b) != "2 200" {
				t.Fatalf("curl: %v: %s", err, b)
			}
			f, _ := os.ReadFile(out)
			if got := sha(f); got != want {
				t.Errorf("sha256 %s, want %s (%d bytes)", got, want, len(f))
			}
		})
	}
}

// TestH2ConcurrentStreams: many requests at once on one connection, each
// a different slice of the big file or a small file, each verified.
func TestH2ConcurrentStreams(t *testing.T) {
	root := siteRoot(t)
	path, _ := linkBig(t, root, "big.bin")
	big, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ts, pki := startTLS(t, root, ktlsAuto)
	c := h2Client(pki)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url, want, rng := "https://"+ts.addr+"/alpha.txt", []byte("abcdefghijklmnopqrstuvwxyz"), ""
			if i%2 == 0 {
				a := rand.IntN(len(big) - 1)
				b := min(a+rand.IntN(8<<20), len(big)-1)
				url, want, rng = "https://"+ts.addr+"/big.bin", big[a:b+1], fmt.Sprintf("bytes=%d-%d", a, b)
			}
			req, _ := http.NewRequest("GET", url, nil)
			if rng != "" {
				req.Header.Set("Range", rng)
			}
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, want) || resp.ProtoMajor != 2 {
				errs <- fmt.Errorf("%s %s: %v, %d bytes (want %d), equal %v", url, rng, err, len(got), len(want), bytes.Equal(got, want))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := ts.Stats().H2Connections; n != 1 {
		t.Errorf("%d HTTP/2 connections, want 1 (all streams on one)", n)
	}
}

// TestH2Responses: the file layer's answers over HTTP/2.
func TestH2Responses(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto)
	c := h2Client(pki)
	base := "https://" + ts.addr
	for _, tt := range []struct {
		name, method, path string
		hdr                []string
		status             int
		body               string
		want               map[string]string
	}{
		{"file", "GET", "/alpha.txt", nil, 200, "abcdefghijklmnopqrstuvwxyz", map[string]string{"Content-Type": "text/plain; charset=utf-8", "Content-Length": "26"}},
		{"head", "HEAD", "/alpha.txt", nil, 200, "", map[string]string{"Content-Length": "26"}},
		{"range", "GET", "/alpha.txt", []string{"Range", "bytes=2-4"}, 206, "cde", map[string]string{"Content-Range": "bytes 2-4/26"}},
		{"unsatisfiable", "GET", "/alpha.txt", []string{"Range", "bytes=100-"}, 416, "", map[string]string{"Content-Range": "bytes */26"}},
		{"not found", "GET", "/nope", nil, 404, "", nil},
		{"method", "POST", "/alpha.txt", nil, 405, "", map[string]string{"Allow": "GET, HEAD"}},
		{"index", "GET", "/", nil, 200, "<h1>home</h1>\n", nil},
		{"redirect", "GET", "/docs", nil, 301, "", map[string]string{"Location": "/docs/"}},
		{"sidecar", "GET", "/app.js", []string{"Accept-Encoding", "br"}, 200, "BROTLI-BYTES", map[string]string{"Content-Encoding": "br", "Vary": "Accept-Encoding"}},
		{"empty", "GET", "/zero.bin", nil, 200, "", map[string]string{"Content-Length": "0"}},
		{"traversal", "GET", "/../etc/passwd", nil, 400, "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, base+tt.path, nil)
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				req.Header.Set(tt.hdr[i], tt.hdr[i+1])
			}
			c := *c
			c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tt.status {
				t.Fatalf("status %d (%v), want %d", resp.StatusCode, err, tt.status)
			}
			if tt.body != "" && string(body) != tt.body {
				t.Errorf("body %q, want %q", body, tt.body)
			}
			for k, v := range tt.want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
	// Conditional requests with the ETag just served.
	resp, err := c.Get(base + "/alpha.txt")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest("GET", base+"/alpha.txt", nil)
	req.Header.Set("If-None-Match", resp.Header.Get("Etag"))
	if resp, err = c.Do(req); err != nil || resp.StatusCode != 304 {
		t.Errorf("If-None-Match: %v %v", resp, err)
	}
}

// rawH2 is a hand-driven HTTP/2 client over TLS (or plain TCP), for the
// flow-control and flood tests that no ordinary client would do.
type rawH2 struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	eb   bytes.Buffer
	dec  *hpack.Decoder
	mu   sync.Mutex
}

func dialH2(t *testing.T, addr string, pki *testPKI, settings ...http2.Setting) *rawH2 {
	t.Helper()
	var conn net.Conn
	var err error
	if pki != nil {
		conn, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost", NextProtos: []string{"h2"}})
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(scale(30 * time.Second)))
	r := &rawH2{t: t, conn: conn, fr: http2.NewFramer(conn, conn), dec: hpack.NewDecoder(4096, func(hpack.HeaderField) {})}
	r.enc = hpack.NewEncoder(&r.eb)
	r.fr.SetMaxReadFrameSize(1 << 20)
	io.WriteString(conn, http2.ClientPreface)
	r.fr.WriteSettings(settings...)
	return r
}

func (r *rawH2) get(id uint32, path string, extra ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eb.Reset()
	f := append([]string{":method", "GET", ":scheme", "https", ":path", path, ":authority", "localhost"}, extra...)
	for i := 0; i+1 < len(f); i += 2 {
		r.enc.WriteField(hpack.HeaderField{Name: f[i], Value: f[i+1]})
	}
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.eb.Bytes(), EndStream: true, EndHeaders: true})
}

// read returns the next frame, answering nothing; frames are copied out
// of the framer's buffer.
func (r *rawH2) read() (http2.Frame, error) {
	f, err := r.fr.ReadFrame()
	if h, ok := f.(*http2.HeadersFrame); ok {
		r.dec.Write(h.HeaderBlockFragment())
		r.dec.Close()
	}
	return f, err
}

// until reads frames until cond is true of one; it fails after timeout.
func (r *rawH2) until(d time.Duration, cond func(http2.Frame) bool) http2.Frame {
	r.t.Helper()
	r.conn.SetReadDeadline(time.Now().Add(d))
	defer r.conn.SetReadDeadline(time.Now().Add(scale(30 * time.Second)))
	for {
		f, err := r.read()
		if err != nil {
			r.t.Fatalf("waiting for a frame: %v", err)
		}
		if cond(f) {
			return f
		}
	}
}

func isGoAway(code http2.ErrCode) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		return ok && g.ErrCode == code
	}
}

// TestH2SmallWindow: a client that grants 1 KiB at a time gets the whole
// file, never more than it granted.
func TestH2SmallWindow(t *testing.T) {
	root := t.TempDir()
	body := make([]byte, 300<<10)
	for i := range body {
		body[i] = byte(i * 7)
	}
	writeFile(t, filepath.Join(root, "f.bin"), string(body))
	ts, pki := startTLS(t, root, ktlsAuto)
	r := dialH2(t, ts.addr, pki, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1024})
	r.get(1, "/f.bin")
	var got []byte
	credit := 65535 // connection window
	for {
		f, err := r.read()
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		d, ok := f.(*http2.DataFrame)
		if !ok {
			continue
		}
		n := len(d.Data())
		if n > 1024 {
			t.Fatalf("a %d-byte DATA frame past a 1 KiB window", n)
		}
		credit -= n
		if credit < 0 {
			t.Fatal("sent past the connection window")
		}
		got = append(got, d.Data()...)
		if d.StreamEnded() {
			break
		}
		r.fr.WriteWindowUpdate(1, uint32(n))
		r.fr.WriteWindowUpdate(0, uint32(n))
		credit += n
	}
	if !bytes.Equal(got, body) {
		t.Errorf("got %d bytes, equal %v", len(got), bytes.Equal(got, body))
	}
}

// TestH2NoWindowUpdate: a stream whose client never opens its window is
// reset after send_timeout; the connection serves other streams meanwhile
// and after.
func TestH2NoWindowUpdate(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nsend_timeout = \"1s\"\n")
	r := dialH2(t, ts.addr, pki, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
	r.fr.WriteWindowUpdate(0, 1<<30)
	r.get(1, "/big.bin")
	r.get(3, "/alpha.txt", "range", "bytes=0-9")
	r.until(scale(10*time.Second), func(f http2.Frame) bool {
		return f.Header().StreamID == 3 && f.Header().Flags.Has(http2.FlagDataEndStream)
	})
	start := time.Now()
	f := r.until(scale(10*time.Second), func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst := f.(*http2.RSTStreamFrame); rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeCancel {
		t.Fatalf("reset %v", rst)
	}
	if time.Since(start) < 200*time.Millisecond {
		t.Errorf("reset after %v", time.Since(start))
	}
	r.get(5, "/alpha.txt", "range", "bytes=0-9")
	r.until(scale(10*time.Second), func(f http2.Frame) bool {
		return f.Header().StreamID == 5 && f.Header().Flags.Has(http2.FlagDataEndStream)
	})
	if n := ts.Stats().H2Events["flow-control stall"]; n != 1 {
		t.Errorf("stall events %d", n)
	}
}

// TestH2Floods: each flood ends its own connection with GOAWAY
// ENHANCE_YOUR_CALM and is counted; a download on another connection is
// unharmed.
func TestH2Floods(t *testing.T) {
	root := siteRoot(t)
	path, want := linkBig(t, root, "big.bin")
	_ = path
	ts, pki := startTLS(t, root, ktlsAuto)
	done := make(chan error, 1)
	go func() {
		n, got, _ := sha256Of(t, h2Client(pki), "https://"+ts.addr+"/big.bin")
		if n != 100<<20 || got != want {
			done <- fmt.Errorf("download beside the floods: %d bytes, sha %s", n, got)
		}
		done <- nil
	}()
	for _, tt := range []struct {
		name, event string
		send        func(r *rawH2)
	}{
		{"rapid reset", "rapid reset", func(r *rawH2) {
			for id := uint32(1); id < 4000; id += 2 {
				r.get(id, "/alpha.txt")
				r.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}},
		{"ping", "control frame flood", func(r *rawH2) {
			for i := 0; i < 5000; i++ {
				r.fr.WritePing(false, [8]byte{})
			}
		}},
		{"settings", "control frame flood", func(r *rawH2) {
			for i := 0; i < 5000; i++ {
				r.fr.WriteSettings()
			}
		}},
		{"continuation", "CONTINUATION flood", func(r *rawH2) {
			r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}})
			for i := 0; i < 200; i++ {
				r.fr.WriteContinuation(1, false, []byte{})
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := dialH2(t, ts.addr, pki)
			go tt.send(r) // the server may stop reading: do not block the test on it
			r.until(scale(10*time.Second), isGoAway(http2.ErrCodeEnhanceYourCalm))
			if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().H2Events[tt.event] > 0 }) {
				t.Errorf("events %v", ts.Stats().H2Events)
			}
		})
	}
	// An HPACK bomb is answered 431 and the connection goes on.
	r := dialH2(t, ts.addr, pki)
	r.eb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/alpha.txt"}, {":authority", "localhost"}} {
		r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	r.enc.WriteField(hpack.HeaderField{Name: "x-bomb", Value: strings.Repeat("b", 4000)})
	block := bytes.Clone(r.eb.Bytes())
	for i := 0; i < 2000; i++ {
		block = append(block, 0x80|62)
	}
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})
	r.dec.SetEmitFunc(func(f hpack.HeaderField) {
		if f.Name == ":status" && f.Value != "431" {
			t.Errorf("status %s, want 431", f.Value)
		}
	})
	r.until(scale(10*time.Second), func(f http2.Frame) bool { _, ok := f.(*http2.HeadersFrame); return ok })
	r.dec.SetEmitFunc(func(hpack.HeaderField) {})
	r.get(3, "/alpha.txt")
	r.until(scale(10*time.Second), func(f http2.Frame) bool {
		return f.Header().StreamID == 3 && f.Header().Flags.Has(http2.FlagDataEndStream)
	})
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// TestH2Load: h2load (nghttp2) with many streams per connection.
func TestH2Load(t *testing.T) {
	h2load := testtool.Require(t, "h2load")
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto)
	_ = pki
	out, err := exec.Command(h2load, "-n", "4000", "-c", "4", "-m", "32", "https://"+ts.addr+"/alpha.txt").CombinedOutput()
	if err != nil {
		t.Fatalf("h2load: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`requests: 4000 total, 4000 started, 4000 done, 4000 succeeded, 0 failed, 0 errored`).Match(out) ||
		!strings.Contains(string(out), "Application protocol: h2") {
		t.Errorf("h2load:\n%s", out)
	}
}

// TestH2Spec runs the h2spec conformance suite (all 145 cases) over TLS.
func TestH2Spec(t *testing.T) {
	h2spec := testtool.Require(t, "h2spec")
	root := siteRoot(t)
	ts, _ := startTLS(t, root, ktlsAuto)
	out, _ := exec.Command(h2spec, "-h", "127.0.0.1", "-p", portOf(ts.addr), "-t", "-k", "-o", "5").CombinedOutput()
	m := regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`).FindSubmatch(out)
	if m == nil || string(m[4]) != "0" || string(m[3]) != "0" {
		t.Fatalf("h2spec:\n%s", out)
	}
	t.Logf("h2spec: %s", m[0])
}

func TestH2ALPNPerSite(t *testing.T) {
	root := siteRoot(t)
	pki := newPKI(t, t.TempDir(), "localhost", "old.example")
	ts := start(t, fmt.Sprintf("root = %q\n[[sites]]\ndomain = \"localhost\"\n[sites.tls]\ncert = %q\nkey = %q\n"+
		"[[sites]]\ndomain = \"old.example\"\n[sites.protocols]\nh2 = false\n[sites.tls]\ncert = %q\nkey = %q\n%s",
		root, pki.certFile, pki.keyFile, pki.certFile, pki.keyFile, ktlsAuto))
	for _, tt := range []struct{ name, want string }{{"localhost", "h2"}, {"old.example", "http/1.1"}} {
		c, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pki.pool, ServerName: tt.name, NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.ConnectionState().NegotiatedProtocol; got != tt.want {
			t.Errorf("%s: ALPN %q, want %q", tt.name, got, tt.want)
		}
		c.Close()
	}
	// A ClientHello naming nothing, or a name no site names, is offered
	// what the default allows, as it is given the default's certificate.
	def := start(t, fmt.Sprintf("[[sites]]\ndomain = \"localhost\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n"+
		"[[sites]]\ndomain = \"old.example\"\nroot = %q\ndefault = true\n[sites.protocols]\nh2 = false\n[sites.tls]\ncert = %q\nkey = %q\n%s",
		root, pki.certFile, pki.keyFile, root, pki.certFile, pki.keyFile, ktlsAuto))
	for _, tt := range []struct{ name, want string }{{"localhost", "h2"}, {"", "http/1.1"}, {"unknown.example", "http/1.1"}} {
		c, err := tls.Dial("tcp", def.addr, &tls.Config{InsecureSkipVerify: true, ServerName: tt.name, NextProtos: []string{"h2", "http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.ConnectionState().NegotiatedProtocol; got != tt.want {
			t.Errorf("default site without h2, SNI %q: ALPN %q, want %q", tt.name, got, tt.want)
		}
		c.Close()
	}
	// Reusing the h2 connection for the other site is refused with 421.
	r := dialH2(t, ts.addr, pki)
	r.eb.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/alpha.txt"}, {":authority", "old.example"}} {
		r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	status := ""
	r.dec.SetEmitFunc(func(f hpack.HeaderField) {
		if f.Name == ":status" {
			status = f.Value
		}
	})
	r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: r.eb.Bytes(), EndStream: true, EndHeaders: true})
	r.until(scale(10*time.Second), func(f http2.Frame) bool { _, ok := f.(*http2.HeadersFrame); return ok })
	if status != "421" {
		t.Errorf("status %q, want 421", status)
	}
}

// TestH2c: HTTP/2 with prior knowledge only where a site enables it.
func TestH2c(t *testing.T) {
	root := siteRoot(t)
	off := start(t, fmt.Sprintf("root = %q\n", root))
	c := dial(t, off.addr)
	c.send(http2.ClientPreface)
	if resp, _ := c.response("GET"); resp.StatusCode/100 != 4 && resp.StatusCode/100 != 5 {
		t.Errorf("h2c off: status %d", resp.StatusCode)
	}
	on := start(t, h2cTOML(root))
	resp, err := h2Client(nil).Get(on.url + "/alpha.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(b) != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("%s %q", resp.Proto, b)
	}
	// HTTP/1.1 still works on the same port.
	if r, err := http.Get(on.url + "/alpha.txt"); err != nil || r.ProtoMajor != 1 {
		t.Errorf("HTTP/1.1 beside h2c: %v %v", r, err)
	} else {
		r.Body.Close()
	}
}

// TestH2GracefulShutdown: shutdown sends GOAWAY; the stream in flight
// finishes; then the server stops.
func TestH2GracefulShutdown(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto)
	r := dialH2(t, ts.addr, pki, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 5})
	r.get(1, "/alpha.txt")
	r.until(scale(10*time.Second), func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
	stopped := make(chan struct{})
	go func() { ts.stop(); close(stopped) }()
	f := r.until(scale(10*time.Second), isGoAway(http2.ErrCodeNo))
	if g := f.(*http2.GoAwayFrame); g.LastStreamID != 1 {
		t.Errorf("GOAWAY last stream %d, want 1", g.LastStreamID)
	}
	select {
	case <-stopped:
		t.Fatal("stopped with a stream in flight")
	case <-time.After(200 * time.Millisecond):
	}
	r.fr.WriteWindowUpdate(1, 100)
	r.until(scale(10*time.Second), func(f http2.Frame) bool {
		return f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream)
	})
	select {
	case <-stopped:
	case <-time.After(scale(10 * time.Second)):
		t.Fatal("server did not stop after the last stream")
	}
}

// TestH2IdleGoAway: a connection idle for idle_timeout gets GOAWAY
// (NO_ERROR, naming the last stream it served), then is closed.
func TestH2IdleGoAway(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nidle_timeout = \"1s\"\n")
	r := dialH2(t, ts.addr, pki)
	r.get(1, "/alpha.txt")
	r.until(scale(10*time.Second), func(f http2.Frame) bool {
		return f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagDataEndStream)
	})
	t0 := time.Now()
	f := r.until(scale(10*time.Second), isGoAway(http2.ErrCodeNo))
	if g := f.(*http2.GoAwayFrame); g.LastStreamID != 1 {
		t.Errorf("GOAWAY last stream %d, want 1", g.LastStreamID)
	}
	waited := time.Since(t0)
	r.conn.SetReadDeadline(time.Now().Add(scale(10 * time.Second)))
	for {
		if _, err := r.read(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("not closed after the idle GOAWAY")
			}
			break
		}
	}
	if waited < 900*time.Millisecond {
		t.Errorf("GOAWAY after %v of idleness, before idle_timeout (1s)", waited)
	}
}

// TestH2AccessLog: HTTP/2 requests are logged like HTTP/1.1 ones.
func TestH2AccessLog(t *testing.T) {
	root := siteRoot(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, fmt.Sprintf("access_log = %q\nroot = %q\n[[sites]]\ndomain = \"localhost\"\n[sites.tls]\ncert = %q\nkey = %q\n%s",
		logPath, root, pki.certFile, pki.keyFile, ktlsAuto))
	resp, err := h2Client(pki).Get("https://" + ts.addr + "/alpha.txt")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ts.stop()
	b, _ := os.ReadFile(logPath)
	if !regexp.MustCompile(`"GET /alpha.txt HTTP/2.0" 200 26 "-" "Go-http-client/2.0"`).Match(b) {
		t.Errorf("access log:\n%s", b)
	}
}
