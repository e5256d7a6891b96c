package engine_test

import (
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
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaship/engine/engine"
	"github.com/mediaship/engine/engine/config"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// h3Client is quic-go's HTTP/3 client trusting pki; all its requests to
// one host share one QUIC connection.
func h3Client(t testing.TB, pki *testPKI) (*http.Client, *http3.Transport) {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, ServerName: "localhost"}}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr}, tr
}

// dialQUIC opens a raw QUIC connection speaking h3, for the tests that
// misbehave on purpose.
func dialQUIC(t *testing.T, addr string, pki *testPKI) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scale(10*time.Second))
	defer cancel()
	c, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost", NextProtos: []string{"h3"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseWithError(0, "") })
	return c
}

// TestH3DownloadBig: quic-go's HTTP/3 client downloads the 100 MiB file
// byte for byte; the TCP side advertises HTTP/3 with Alt-Svc on the same
// port.
func TestH3DownloadBig(t *testing.T) {
	root := siteRoot(t)
	_, want := linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto)
	c, _ := h3Client(t, pki)
	n, got, resp := sha256Of(t, c, "https://"+ts.addr+"/big.bin")
	if n != 100<<20 || got != want {
		t.Fatalf("got %d bytes sha %s, want %d bytes sha %s", n, got, 100<<20, want)
	}
	if resp.Proto != "HTTP/3.0" || resp.Header.Get("Content-Length") != "104857600" {
		t.Errorf("proto %s, content-length %q", resp.Proto, resp.Header.Get("Content-Length"))
	}
	r1, err := pki.client(nil).Get("https://" + ts.addr + "/alpha.txt")
	if err != nil {
		t.Fatal(err)
	}
	r1.Body.Close()
	if want := `h3=":` + portOf(ts.addr) + `"; ma=86400`; r1.Header.Get("Alt-Svc") != want {
		t.Errorf("Alt-Svc on HTTP/1.1 over TLS = %q, want %q", r1.Header.Get("Alt-Svc"), want)
	}
	st := ts.Stats()
	if st.H3Connections != 1 || st.H3Streams != 1 || st.Bulk < 1 {
		t.Errorf("stats: %d connections, %d streams, %d bulk", st.H3Connections, st.H3Streams, st.Bulk)
	}
}

// TestH3ConcurrentStreams: 64 requests at once on one connection, whole
// files and ranges of the big one, each checked.
func TestH3ConcurrentStreams(t *testing.T) {
	root := siteRoot(t)
	big, _ := linkBig(t, root, "big.bin")
	content, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	ts, pki := startTLS(t, root, ktlsAuto)
	c, _ := h3Client(t, pki)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			url := "https://" + ts.addr + "/alpha.txt"
			want := []byte("abcdefghijklmnopqrstuvwxyz")
			req, _ := http.NewRequest("GET", url, nil)
			if i%2 == 0 {
				off := int64(i) * 1_500_000
				req, _ = http.NewRequest("GET", "https://"+ts.addr+"/big.bin", nil)
				req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+3<<20-1))
				want = content[off : off+3<<20]
			}
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				errs <- fmt.Errorf("stream %d: %v", i, err)
				return
			}
			if sha256.Sum256(b) != sha256.Sum256(want) {
				errs <- fmt.Errorf("stream %d: %d bytes, wrong content (status %d)", i, len(b), resp.StatusCode)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := ts.Stats(); st.H3Connections != 1 || st.H3Streams != 64 {
		t.Errorf("%d connections, %d streams; want 1 and 64", st.H3Connections, st.H3Streams)
	}
}

// TestH3Responses: the file layer answers HTTP/3 as it answers HTTP/1.1.
func TestH3Responses(t *testing.T) {
	root := siteRoot(t)
	pki := newPKI(t, t.TempDir(), "localhost", "noh3.localhost")
	ts := start(t, fmt.Sprintf(`root = %q
[[sites]]
domain = "localhost"
[sites.tls]
cert = %q
key = %q
[[sites]]
domain = "noh3.localhost"
[sites.protocols]
h3 = false
[sites.tls]
cert = %q
key = %q
%s`, root, pki.certFile, pki.keyFile, pki.certFile, pki.keyFile, ktlsAuto))
	c, _ := h3Client(t, pki)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	base := "https://" + ts.addr
	etag := ""
	tests := []struct {
		name, method, path string
		hdr                []string
		status             int
		body               string
		headers            map[string]string
	}{
		{"whole", "GET", "/alpha.txt", nil, 200, "abcdefghijklmnopqrstuvwxyz",
			map[string]string{"Content-Type": "text/plain; charset=utf-8", "Accept-Ranges": "bytes", "Server": "engine"}},
		{"head", "HEAD", "/alpha.txt", nil, 200, "", map[string]string{"Content-Length": "26"}},
		{"range", "GET", "/alpha.txt", []string{"Range", "bytes=2-4"}, 206, "cde",
			map[string]string{"Content-Range": "bytes 2-4/26"}},
		{"suffix range", "GET", "/alpha.txt", []string{"Range", "bytes=-3"}, 206, "xyz", nil},
		{"unsatisfiable", "GET", "/alpha.txt", []string{"Range", "bytes=30-40"}, 416, "",
			map[string]string{"Content-Range": "bytes */26"}},
		{"not modified", "GET", "/alpha.txt", []string{"If-None-Match", "*"}, 304, "", nil},
		{"sidecar", "GET", "/app.js", []string{"Accept-Encoding", "br"}, 200, "BROTLI-BYTES",
			map[string]string{"Content-Encoding": "br", "Vary": "Accept-Encoding"}},
		{"missing", "GET", "/nope", nil, 404, "", nil},
		{"directory", "GET", "/docs", nil, 301, "", map[string]string{"Location": "/docs/"}},
		{"index", "GET", "/docs/", nil, 200, "docs index", nil},
		{"traversal", "GET", "/%2e%2e/etc/passwd", nil, 400, "", nil},
		{"method", "DELETE", "/alpha.txt", nil, 405, "", map[string]string{"Allow": "GET, HEAD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, base+tt.path, nil)
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				req.Header.Set(tt.hdr[i], tt.hdr[i+1])
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.body != "" && string(b) != tt.body {
				t.Errorf("body %q, want %q", b, tt.body)
			}
			for k, v := range tt.headers {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if tt.name == "whole" {
				etag = resp.Header.Get("Etag")
			}
		})
	}
	t.Run("if-none-match etag", func(t *testing.T) {
		req, _ := http.NewRequest("GET", base+"/alpha.txt", nil)
		req.Header.Set("If-None-Match", etag)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 304 || etag == "" {
			t.Errorf("status %d with etag %q, want 304", resp.StatusCode, etag)
		}
	})
	t.Run("multiple ranges", func(t *testing.T) {
		req, _ := http.NewRequest("GET", base+"/alpha.txt", nil)
		req.Header.Set("Range", "bytes=0-1,24-25")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 206 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "multipart/byteranges") ||
			!strings.Contains(string(b), "Content-Range: bytes 0-1/26\r\n\r\nab\r\n") || !strings.Contains(string(b), "\r\n\r\nyz\r\n") {
			t.Errorf("status %d %s:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	})
	t.Run("site without h3", func(t *testing.T) {
		tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, ServerName: "noh3.localhost"}}
		defer tr.Close()
		req, _ := http.NewRequest("GET", base+"/alpha.txt", nil)
		req.Host = "noh3.localhost"
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 421 {
			t.Errorf("status %d, want 421", resp.StatusCode)
		}
		req, _ = http.NewRequest("GET", base+"/alpha.txt", nil)
		req.Host = "noh3.localhost"
		r1, err := (&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, ServerName: "noh3.localhost"}}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		r1.Body.Close()
		if v := r1.Header.Get("Alt-Svc"); v != "" {
			t.Errorf("site without h3 advertises Alt-Svc %q", v)
		}
	})
}

// TestH3Pacing: with bulk_pace_rate set, or a site's limit_rate, a bulk
// response arrives whole and byte-exact, and a small request on the same
// connection is answered while the bulk one is still being paced. The
// rate is not timed here: h3's TestPacerSchedule checks the pacer's
// arithmetic on a fake clock, and BenchmarkH3Pacing measures the rate.
func TestH3Pacing(t *testing.T) {
	root := siteRoot(t)
	big, _ := linkBig(t, root, "big.bin")
	pki := newPKI(t, t.TempDir(), "localhost")
	// default: the site answers the 127.0.0.1 the requests name.
	site := fmt.Sprintf("[[sites]]\ndomain = \"localhost\"\ndefault = true\nroot = %q\n", root)
	tls := fmt.Sprintf("[sites.tls]\ncert = %q\nkey = %q\n", pki.certFile, pki.keyFile)
	t.Run("bulk_pace_rate", func(t *testing.T) {
		testH3Pacing(t, start(t, site+tls+ktlsAuto+"[h3]\nbulk_pace_rate = \"4MiB\"\n"), pki, big)
	})
	t.Run("site limit_rate", func(t *testing.T) {
		testH3Pacing(t, start(t, site+"limit_rate = \"4MiB\"\n"+tls+ktlsAuto), pki, big)
	})
}

func testH3Pacing(t *testing.T, ts *testServer, pki *testPKI, big string) {
	// 6 MiB at 4 MiB/s: once the first 64 KiB has arrived, the pacer
	// holds the rest back for well over a second on any machine.
	const size = 6 << 20
	f, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	io.CopyN(h, f, size)
	f.Close()
	want := hex.EncodeToString(h.Sum(nil))

	c, _ := h3Client(t, pki)
	// Warm the connection (handshake, file open) first.
	if _, _, r := sha256Of(t, c, "https://"+ts.addr+"/alpha.txt"); r.StatusCode != 200 {
		t.Fatal(r.Status)
	}
	type result struct {
		n   int64
		sum string
		err error
	}
	bulk := make(chan result, 1)
	flowing := make(chan struct{})
	go func() {
		var once sync.Once
		flow := func() { once.Do(func() { close(flowing) }) }
		defer flow()
		req, _ := http.NewRequest("GET", "https://"+ts.addr+"/big.bin", nil)
		req.Header.Set("Range", fmt.Sprintf("bytes=0-%d", size-1))
		resp, err := c.Do(req)
		if err != nil {
			bulk <- result{err: err}
			return
		}
		defer resp.Body.Close()
		h := sha256.New()
		n, err := io.CopyN(h, resp.Body, 64<<10)
		flow()
		if err == nil {
			var m int64
			m, err = io.Copy(h, resp.Body)
			n += m
		}
		bulk <- result{n, hex.EncodeToString(h.Sum(nil)), err}
	}()
	<-flowing
	n, sum, r := sha256Of(t, c, "https://"+ts.addr+"/alpha.txt")
	if r.StatusCode != 200 || n != 26 || sum != sha([]byte("abcdefghijklmnopqrstuvwxyz")) {
		t.Fatalf("small request during the bulk one: %s, %d bytes", r.Status, n)
	}
	select {
	case res := <-bulk:
		t.Fatalf("the bulk response (%d bytes, err %v) finished before the small one: not paced", res.n, res.err)
	default:
	}
	res := <-bulk
	if res.err != nil || res.n != size || res.sum != want {
		t.Fatalf("bulk: %d bytes (sha %s), want %d (sha %s), err %v", res.n, res.sum, size, want, res.err)
	}
	if st := ts.Stats(); st.H3Connections != 1 {
		t.Errorf("%d connections; the requests should have shared one", st.H3Connections)
	}
}

// BenchmarkH3Pacing measures the rate a download paced by bulk_pace_rate
// (8 MiB/s) achieves over HTTP/3 on loopback, in MiB/s. It asserts
// nothing: the first burst goes at once, so a short download runs a
// little above the rate.
func BenchmarkH3Pacing(b *testing.B) {
	const size = 4 << 20
	root := b.TempDir()
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{9}).Read(data)
	if err := os.WriteFile(filepath.Join(root, "big.bin"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	writeFile(b, filepath.Join(root, "small.txt"), "small")
	// Kernel TLS is for TCP; "off" keeps its warning out of the output.
	ts, pki := startTLS(b, root, "[kernel]\nktls = \"off\"\n[h3]\nbulk_pace_rate = \"8MiB\"\n")
	c, _ := h3Client(b, pki)
	download := func(path string) int64 {
		resp, err := c.Get("https://" + ts.addr + path)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.ProtoMajor != 3 {
			b.Fatalf("%s over %s: %d bytes, %v", path, resp.Proto, n, err)
		}
		return n
	}
	download("/small.txt") // handshake and file cache, outside the timing
	b.ReportAllocs()
	var total int64
	for b.Loop() {
		if n := download("/big.bin"); n != size {
			b.Fatalf("%d bytes, want %d", n, size)
		}
		total += size
	}
	b.ReportMetric(float64(total)/(1<<20)/b.Elapsed().Seconds(), "MiB/s")
}

// TestH3StoppedReaders: clients that stop reading hold a bounded amount
// of server memory, and after send_timeout their streams are reset with
// H3_REQUEST_CANCELLED while the connection keeps serving.
func TestH3StoppedReaders(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	// send_timeout leaves room to read 32 response heads on a loaded CI
	// machine before the first stalled stream is reset.
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nsend_timeout = \"6s\"\n")
	conn := dialQUIC(t, ts.addr, pki)
	cc := (&http3.Transport{}).NewClientConn(conn)
	before := heapInUse()
	const streams = 32
	var strs []*http3.RequestStream
	for range streams {
		str, err := cc.OpenRequestStream(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "https://"+ts.addr+"/big.bin", nil)
		if err := str.SendRequestHeader(req); err != nil {
			t.Fatal(err)
		}
		str.Close()
		strs = append(strs, str)
	}
	// A head may never come: the first streams' bodies can fill the
	// connection's flow-control window before later heads leave, and
	// those streams are then stalled too and reset, which is what this
	// test is about. Any other outcome is an error.
	var answered []*http3.RequestStream
	for i, str := range strs {
		resp, err := str.ReadResponse()
		var se *quic.StreamError
		switch {
		case err == nil && resp.StatusCode == 200:
			answered = append(answered, str)
		case errors.As(err, &se) && se.ErrorCode == quic.StreamErrorCode(http3.ErrCodeRequestCanceled):
		default:
			t.Fatalf("stream %d: response %v, %v", i, resp, err)
		}
	}
	if len(answered) == 0 {
		t.Fatal("no stream got a response head")
	}
	time.Sleep(scale(time.Second)) // the windows fill
	grew := int64(heapInUse()) - int64(before)
	t.Logf("%d stalled 100 MiB responses: server and client heap grew %.1f MiB", streams, float64(grew)/(1<<20))
	// Each stream may hold one chunk and what the client's window lets
	// through; never the file.
	if grew > 64<<20 {
		t.Errorf("heap grew %d MiB for %d stalled streams", grew>>20, streams)
	}
	if !waitFor(scale(20*time.Second), func() bool { return ts.Stats().H3Stalled == streams }) {
		t.Fatalf("%d of %d stalled streams were reset", ts.Stats().H3Stalled, streams)
	}
	buf := make([]byte, 64<<10)
	for _, str := range answered[:1] {
		var err error
		for err == nil {
			_, err = str.Read(buf)
		}
		var se *quic.StreamError
		if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeRequestCanceled) {
			t.Errorf("stalled stream ended with %v, want H3_REQUEST_CANCELLED", err)
		}
	}
	// The same connection still serves.
	req, _ := http.NewRequest("GET", "https://"+ts.addr+"/alpha.txt", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("after the resets: %q", b)
	}
}

// TestH3VanishedClient: a client that disappears without a word costs
// the server its connection only until the idle timeout.
func TestH3VanishedClient(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nsend_timeout = \"2s\"\nidle_timeout = \"3s\"\n")
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ctx, cancel := context.WithTimeout(context.Background(), scale(10*time.Second))
	defer cancel()
	ua, _ := net.ResolveUDPAddr("udp", ts.addr)
	conn, err := tr.Dial(ctx, ua, &tls.Config{RootCAs: pki.pool, ServerName: "localhost", NextProtos: []string{"h3"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc := (&http3.Transport{}).NewClientConn(conn)
	req, _ := http.NewRequest("GET", "https://"+ts.addr+"/big.bin", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.CopyN(io.Discard, resp.Body, 1<<20)
	udp.Close() // gone: no CONNECTION_CLOSE, no ACKs
	if !waitFor(scale(20*time.Second), func() bool { return ts.Stats().H3Connections == 1 && activeH3(ts) == 0 }) {
		t.Fatalf("the vanished client's connection is still open")
	}
	tr.Close()
	// Others are served.
	c, _ := h3Client(t, pki)
	if _, _, r := sha256Of(t, c, "https://"+ts.addr+"/alpha.txt"); r.StatusCode != 200 {
		t.Fatal(r.Status)
	}
}

func activeH3(ts *testServer) int64 { return ts.Stats().H3Active }

// TestH3BadInput: protocol errors get the RFC 9114 error codes, are
// counted, and harm no other connection.
func TestH3BadInput(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto+"[h3]\nmax_streams = 4\n")
	good, _ := h3Client(t, pki)
	check := func(t *testing.T) {
		t.Helper()
		if _, _, r := sha256Of(t, good, "https://"+ts.addr+"/alpha.txt"); r.StatusCode != 200 {
			t.Fatal(r.Status)
		}
	}
	closedWith := func(t *testing.T, conn *quic.Conn, code http3.ErrCode) {
		t.Helper()
		select {
		case <-conn.Context().Done():
		case <-time.After(scale(10 * time.Second)):
			t.Fatal("connection not closed")
		}
		var ae *quic.ApplicationError
		if err := context.Cause(conn.Context()); !errors.As(err, &ae) || ae.ErrorCode != quic.ApplicationErrorCode(code) || !ae.Remote {
			t.Fatalf("closed with %v, want %v", err, code)
		}
	}
	hdrs := func(fields string) []byte { // a HEADERS frame with a raw field section
		b := quicvarint.Append(nil, 0x01)
		b = quicvarint.Append(b, uint64(len(fields)))
		return append(b, fields...)
	}

	t.Run("DATA before HEADERS", func(t *testing.T) {
		conn := dialQUIC(t, ts.addr, pki)
		str, err := conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		str.Write([]byte{0x00, 0x03, 'a', 'b', 'c'})
		closedWith(t, conn, http3.ErrCodeFrameUnexpected)
		check(t)
		if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().H3ConnErrors["local H3_FRAME_UNEXPECTED"] == 1 }) {
			t.Errorf("conn errors %v", ts.Stats().H3ConnErrors)
		}
	})
	t.Run("malformed QPACK", func(t *testing.T) {
		conn := dialQUIC(t, ts.addr, pki)
		str, err := conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		// Required insert count 0, base 0, then an indexed field line
		// naming static index 120 (the table has 99 entries).
		str.Write(hdrs("\x00\x00\xff\x39"))
		str.Close()
		_, err = io.ReadAll(str)
		var se *quic.StreamError
		if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeQPACKDecompressionFailed) {
			t.Errorf("stream ended with %v, want H3_QPACK_DECOMPRESSION_FAILED", err)
		}
		check(t)
	})
	t.Run("missing pseudo-headers", func(t *testing.T) {
		conn := dialQUIC(t, ts.addr, pki)
		str, err := conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		// A literal field "x: y" and no :method or :path.
		str.Write(hdrs("\x00\x00\x21x\x01y"))
		str.Close()
		_, err = io.ReadAll(str)
		var se *quic.StreamError
		if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeMessageError) {
			t.Errorf("stream ended with %v, want H3_MESSAGE_ERROR", err)
		}
		check(t)
	})
	t.Run("header section too large", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "https://"+ts.addr+"/alpha.txt", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 20<<10))
		resp, err := good.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 431 {
			t.Errorf("status %d, want 431", resp.StatusCode)
		}
		check(t)
	})
	t.Run("stream limit", func(t *testing.T) {
		conn := dialQUIC(t, ts.addr, pki)
		for i := range 4 {
			if _, err := conn.OpenStream(); err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
		}
		// The server granted four: quic-go's client will not open a
		// fifth (a client that did would get STREAM_LIMIT_ERROR).
		if _, err := conn.OpenStream(); err == nil {
			t.Error("a fifth concurrent stream was allowed with max_streams = 4")
		}
		check(t)
	})
	t.Run("second control stream", func(t *testing.T) {
		conn := dialQUIC(t, ts.addr, pki)
		for range 2 {
			u, err := conn.OpenUniStream()
			if err != nil {
				t.Fatal(err)
			}
			u.Write([]byte{0x00, 0x04, 0x00}) // control stream, empty SETTINGS
		}
		closedWith(t, conn, http3.ErrCodeStreamCreationError)
		check(t)
	})
}

// TestH3GracefulShutdown: on shutdown the server sends GOAWAY, the
// response in flight finishes whole, and then the server stops.
func TestH3GracefulShutdown(t *testing.T) {
	stopDuringDownload(t, "", func(t *testing.T, err error) {
		// After GOAWAY the connection takes no new request.
		if err == nil {
			t.Errorf("a new request after GOAWAY was answered")
		} else {
			t.Logf("new request after GOAWAY: %v", err)
		}
	})
}

// stopDuringDownload starts an engine (with extra config), downloads
// 100 MiB paced over HTTP/3 and stops the server during it: the stop
// waits for the response, a new request on the same connection goes to
// newRequest (its error, nil if it was answered), the download finishes
// whole, and the server stops after it.
func stopDuringDownload(t *testing.T, extra string, newRequest func(*testing.T, error)) {
	root := siteRoot(t)
	_, want := linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto+"[h3]\nbulk_pace_rate = \"40MiB\"\n"+extra)
	cc := (&http3.Transport{}).NewClientConn(dialQUIC(t, ts.addr, pki))
	req, _ := http.NewRequest("GET", "https://"+ts.addr+"/big.bin", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { ts.stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("stopped with a response in flight")
	case <-time.After(300 * time.Millisecond):
	}
	req, _ = http.NewRequest("GET", "https://"+ts.addr+"/alpha.txt", nil)
	r, err := cc.RoundTrip(req)
	if err == nil {
		r.Body.Close()
	}
	newRequest(t, err)
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || n != 100<<20 || hex.EncodeToString(h.Sum(nil)) != want {
		t.Fatalf("in-flight download: %d bytes, %v", n, err)
	}
	select {
	case <-stopped:
	case <-time.After(scale(15 * time.Second)):
		t.Fatal("server did not stop after the last response")
	}
}

// TestH3AccessLog: HTTP/3 requests are logged like the others.
func TestH3AccessLog(t *testing.T) {
	root := siteRoot(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, fmt.Sprintf("access_log = %q\nroot = %q\n[[sites]]\ndomain = \"localhost\"\n[sites.tls]\ncert = %q\nkey = %q\n%s",
		logPath, root, pki.certFile, pki.keyFile, ktlsAuto))
	c, _ := h3Client(t, pki)
	sha256Of(t, c, "https://"+ts.addr+"/alpha.txt")
	ts.stop()
	b, _ := os.ReadFile(logPath)
	if !regexp.MustCompile(`^127\.0\.0\.1 - - \[[^]]+\] "GET /alpha.txt HTTP/3.0" 200 26 "-" "quic-go HTTP/3"\n$`).Match(b) {
		t.Errorf("access log:\n%s", b)
	}
}

// TestH3UDPPortInUse: when the UDP port is taken the server does not
// start, and says how to go on; the TCP port it bound is released.
func TestH3UDPPortInUse(t *testing.T) {
	root := siteRoot(t)
	// A UDP port whose TCP twin is free too: another process's outbound
	// connection may hold any ephemeral TCP port number, and the check at
	// the end must find the port free because the server released it.
	var udp *net.UDPConn
	for try := 0; udp == nil; try++ {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if ln, err := net.Listen("tcp", u.LocalAddr().String()); err == nil {
			ln.Close()
			udp = u
		} else if u.Close(); try == 20 {
			t.Fatalf("no UDP port with a free TCP twin in 20 tries: %v", err)
		}
	}
	defer udp.Close()
	addr := udp.LocalAddr().String()
	pki := newPKI(t, t.TempDir(), "localhost")
	text := fmt.Sprintf("listen = %q\nroot = %q\n[[sites]]\ndomain = \"localhost\"\n[sites.tls]\ncert = %q\nkey = %q\n%s",
		addr, root, pki.certFile, pki.keyFile, ktlsAuto)
	cfg, err := config.Parse("engine.toml", root, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := engine.New(cfg, nil)
	if err == nil {
		srv.Run(canceledContext())
		t.Fatal("started with the UDP port taken")
	}
	if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "protocols.h3 = false") {
		t.Errorf("error %q", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("TCP port not released: %v", err)
	}
	ln.Close()
}

// TestH3FileShrinks: a file cut short while it is sent resets the stream,
// so the client never takes a short body for the whole file.
func TestH3FileShrinks(t *testing.T) {
	root := siteRoot(t)
	src, _ := bigFile()
	p := filepath.Join(root, "shrinks.bin")
	copyFile(t, src, p)
	ts, pki := startTLS(t, root, ktlsAuto+"[h3]\nbulk_pace_rate = \"20MiB\"\n")
	c, _ := h3Client(t, pki)
	resp, err := c.Get("https://" + ts.addr + "/shrinks.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.CopyN(io.Discard, resp.Body, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 10<<20); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeInternalError) {
		t.Fatalf("after %d more bytes: %v; want the stream reset with H3_INTERNAL_ERROR", n, err)
	}
}

// TestH3SNI: HTTP/3 picks each site's certificate by SNI, from the same
// store as the TCP side.
func TestH3SNI(t *testing.T) {
	root := siteRoot(t)
	a := newPKI(t, t.TempDir(), "a.test")
	b := newPKI(t, t.TempDir(), "b.test")
	ts := start(t, fmt.Sprintf("root = %q\n[[sites]]\ndomain = \"a.test\"\n[sites.tls]\ncert = %q\nkey = %q\n[[sites]]\ndomain = \"b.test\"\n[sites.tls]\ncert = %q\nkey = %q\n%s",
		root, a.certFile, a.keyFile, b.certFile, b.keyFile, ktlsAuto))
	for _, c := range []struct {
		name string
		pki  *testPKI
	}{{"a.test", a}, {"b.test", b}} {
		tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: c.pki.pool, ServerName: c.name}}
		req, _ := http.NewRequest("GET", "https://"+ts.addr+"/alpha.txt", nil)
		req.Host = c.name
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if got := resp.TLS.PeerCertificates[0].Subject.CommonName; resp.StatusCode != 200 || got != c.name {
			t.Errorf("%s: status %d, certificate for %q", c.name, resp.StatusCode, got)
		}
		tr.Close()
	}
}

// TestH3StalledSmallResponse: a response built in memory (a directory
// listing) to a client whose window stays shut is also reset after
// send_timeout.
func TestH3StalledSmallResponse(t *testing.T) {
	root := siteRoot(t)
	for i := range 200 {
		writeFile(t, filepath.Join(root, "many", fmt.Sprintf("file-with-a-long-name-%03d.bin", i)), "x")
	}
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, fmt.Sprintf("[[sites]]\ndomain = \"localhost\"\ndefault = true\nroot = %q\ndirectory_listing = true\n[sites.tls]\ncert = %q\nkey = %q\n%s[limits]\nsend_timeout = \"2s\"\n",
		root, pki.certFile, pki.keyFile, ktlsAuto))
	ctx, cancel := context.WithTimeout(context.Background(), scale(10*time.Second))
	defer cancel()
	conn, err := quic.DialAddr(ctx, ts.addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost", NextProtos: []string{"h3"}},
		&quic.Config{InitialStreamReceiveWindow: 1 << 10, MaxStreamReceiveWindow: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	cc := (&http3.Transport{}).NewClientConn(conn)
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://"+ts.addr+"/many/", nil)
	if err := str.SendRequestHeader(req); err != nil {
		t.Fatal(err)
	}
	str.Close()
	if resp, err := str.ReadResponse(); err != nil || resp.ContentLength < 8<<10 {
		t.Fatalf("listing: %v, %d bytes", err, resp.ContentLength)
	}
	time.Sleep(scale(3 * time.Second)) // past send_timeout, reading nothing
	str.SetReadDeadline(time.Now().Add(scale(5 * time.Second)))
	_, err = io.ReadAll(str)
	var se *quic.StreamError
	if !errors.As(err, &se) || !se.Remote {
		t.Fatalf("stalled small response ended with %v, want a reset from the server", err)
	}
	t.Logf("reset with %v", se.ErrorCode)
}

// TestH3SessionTicketsOff: session_tickets = false holds on HTTP/3 too (a
// client with a session cache is not resumed); the default resumes.
func TestH3SessionTicketsOff(t *testing.T) {
	root := siteRoot(t)
	for _, tickets := range []bool{true, false} {
		extra := ktlsAuto
		if !tickets {
			extra = "session_tickets = false\n" + extra
		}
		ts, pki := startTLS(t, root, extra)
		cache := tls.NewLRUClientSessionCache(8)
		for i := 0; i < 2; i++ {
			tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, ServerName: "localhost", ClientSessionCache: cache}}
			c := &http.Client{Transport: tr, Timeout: scale(10 * time.Second)}
			resp, err := c.Get("https://localhost:" + portOf(ts.addr) + "/alpha.txt")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if want := tickets && i == 1; resp.TLS == nil || resp.TLS.DidResume != want {
				t.Errorf("tickets %v, connection %d: TLS state %+v, want resumed %v", tickets, i, resp.TLS, want)
			}
			tr.Close()
		}
	}
}
