package engine_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/testtool"
)

func TestDownloadBigNetHTTP(t *testing.T) {
	root := t.TempDir()
	_, want := linkBig(t, root, "big.bin")
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	resp, err := http.Get(ts.url + "/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatalf("after %d bytes: %v", n, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want || n != 100<<20 {
		t.Errorf("download = %d bytes sha256 %s, want %d bytes %s", n, got, 100<<20, want)
	}
	if resp.ContentLength != 100<<20 {
		t.Errorf("Content-Length = %d", resp.ContentLength)
	}
}

func TestDownloadBigCurl(t *testing.T) {
	curl := testtool.Require(t, "curl")
	root := t.TempDir()
	_, want := linkBig(t, root, "big.bin")
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	out := filepath.Join(t.TempDir(), "got")
	cmd := exec.Command(curl, "-sS", "--fail", "-o", out, ts.url+"/big.bin")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("curl: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("curl download sha256 %s, want %s", got, want)
	}
	// curl ranges and a resumed download (-C -) against the same file.
	part := filepath.Join(t.TempDir(), "part")
	src, _ := bigFile()
	head := make([]byte, 3<<20)
	sf, _ := os.Open(src)
	io.ReadFull(sf, head)
	sf.Close()
	os.WriteFile(part, head, 0o644)
	if b, err := exec.Command(curl, "-sS", "--fail", "-C", "-", "-o", part, ts.url+"/big.bin").CombinedOutput(); err != nil {
		t.Fatalf("curl -C -: %v\n%s", err, b)
	}
	pf, _ := os.Open(part)
	defer pf.Close()
	h.Reset()
	io.Copy(h, pf)
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Errorf("resumed download sha256 %s, want %s", got, want)
	}
}

// siteRoot builds a small tree used by the table tests.
func siteRoot(t *testing.T) string {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "index.html"), "<h1>home</h1>\n")
	writeFile(t, filepath.Join(root, "alpha.txt"), "abcdefghijklmnopqrstuvwxyz")
	writeFile(t, filepath.Join(root, "docs/index.html"), "docs index")
	writeFile(t, filepath.Join(root, "empty/.keep"), "")
	writeFile(t, filepath.Join(root, "app.js"), strings.Repeat("console.log(1);\n", 100))
	writeSidecar(t, filepath.Join(root, "app.js.br"), "BROTLI-BYTES")
	writeSidecar(t, filepath.Join(root, "app.js.gz"), "GZIP-BYTES-LONGER")
	writeFile(t, filepath.Join(root, "space name.txt"), "spaced")
	writeFile(t, filepath.Join(root, "zero.bin"), "")
	return root
}

type exchange struct {
	name    string
	req     string // raw request
	method  string // for reading the response
	status  int
	body    string            // exact body when non-empty
	headers map[string]string // exact header values; "" means absent
	closed  bool              // the server closes after this response
}

func runExchanges(t *testing.T, addr string, tests []exchange) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, addr)
			c.send(tt.req)
			method := tt.method
			if method == "" {
				method = "GET"
			}
			resp, body := c.response(method)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d (body %q)", resp.StatusCode, tt.status, body)
			}
			if tt.body != "" && string(body) != tt.body {
				t.Errorf("body = %q, want %q", body, tt.body)
			}
			for k, v := range tt.headers {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if tt.closed && !resp.Close {
				t.Errorf("no Connection: close on a response before closing")
			}
			// A short wait is enough to see a close that was not wanted.
			wait := 50 * time.Millisecond
			if tt.closed {
				wait = scale(2 * time.Second)
			}
			if got := c.closed(wait); got != tt.closed {
				t.Errorf("connection closed = %v, want %v", got, tt.closed)
			}
		})
	}
}

func get(path string, extra ...string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + strings.Join(extra, "") + "\r\n"
}

func TestFileResponses(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	st, _ := os.Stat(filepath.Join(root, "alpha.txt"))
	lm := st.ModTime().UTC().Format(http.TimeFormat)
	etag := func(path string) string {
		c := dial(t, ts.addr)
		c.send(get(path))
		resp, _ := c.response("GET")
		return resp.Header.Get("ETag")
	}
	// The first response has the size-and-time ETag and queues hashing;
	// once hashed, the ETag is derived from the digest.
	et := etag("/alpha.txt")
	if et == "" || et[0] != '"' {
		t.Fatalf("ETag %q is not a strong entity-tag", et)
	}
	waitFor(scale(3*time.Second), func() bool { et = etag("/alpha.txt"); return strings.HasPrefix(et, `"b3-`) })
	if !strings.HasPrefix(et, `"b3-`) {
		t.Fatalf("ETag %q not digest-derived after hashing", et)
	}
	past := st.ModTime().Add(-time.Hour).UTC().Format(http.TimeFormat)
	future := st.ModTime().Add(time.Hour).UTC().Format(http.TimeFormat)

	runExchanges(t, ts.addr, []exchange{
		{name: "get", req: get("/alpha.txt"), status: 200, body: "abcdefghijklmnopqrstuvwxyz",
			headers: map[string]string{"Content-Type": "text/plain; charset=utf-8", "Content-Length": "26",
				"Accept-Ranges": "bytes", "Last-Modified": lm, "ETag": et}},
		{name: "head", req: "HEAD /alpha.txt HTTP/1.1\r\nHost: x\r\n\r\n", method: "HEAD", status: 200,
			headers: map[string]string{"Content-Length": "26", "ETag": et}},
		{name: "index", req: get("/"), status: 200, body: "<h1>home</h1>\n"},
		{name: "dir index", req: get("/docs/"), status: 200, body: "docs index"},
		{name: "dir redirect", req: get("/docs?x=1"), status: 301, headers: map[string]string{"Location": "/docs/?x=1"}},
		{name: "dir without index", req: get("/empty/"), status: 404},
		{name: "missing", req: get("/nope"), status: 404},
		{name: "file with slash", req: get("/alpha.txt/"), status: 404},
		{name: "escaped name", req: get("/space%20name.txt"), status: 200, body: "spaced"},
		{name: "empty file", req: get("/zero.bin"), status: 200, headers: map[string]string{"Content-Length": "0"}},
		{name: "empty file range", req: get("/zero.bin", "Range: bytes=0-5\r\n"), status: 200},
		{name: "post", req: "POST /alpha.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", status: 405,
			headers: map[string]string{"Allow": "GET, HEAD"}},
		{name: "lowercase get", req: "get /alpha.txt HTTP/1.1\r\nHost: x\r\n\r\n", status: 405},
		{name: "delete", req: "DELETE /alpha.txt HTTP/1.1\r\nHost: x\r\n\r\n", status: 405},
		{name: "absolute form", req: "GET http://x/alpha.txt HTTP/1.1\r\nHost: x\r\n\r\n", status: 200, body: "abcdefghijklmnopqrstuvwxyz"},

		// Ranges.
		{name: "range", req: get("/alpha.txt", "Range: bytes=2-4\r\n"), status: 206, body: "cde",
			headers: map[string]string{"Content-Range": "bytes 2-4/26", "Content-Length": "3"}},
		{name: "range open", req: get("/alpha.txt", "Range: bytes=23-\r\n"), status: 206, body: "xyz",
			headers: map[string]string{"Content-Range": "bytes 23-25/26"}},
		{name: "range suffix", req: get("/alpha.txt", "Range: bytes=-2\r\n"), status: 206, body: "yz"},
		{name: "range suffix too long", req: get("/alpha.txt", "Range: bytes=-100\r\n"), status: 206, body: "abcdefghijklmnopqrstuvwxyz"},
		{name: "range past end", req: get("/alpha.txt", "Range: bytes=20-100\r\n"), status: 206, body: "uvwxyz"},
		{name: "range unsatisfiable", req: get("/alpha.txt", "Range: bytes=26-30\r\n"), status: 416,
			headers: map[string]string{"Content-Range": "bytes */26"}},
		{name: "range invalid ignored", req: get("/alpha.txt", "Range: bytes=5-2\r\n"), status: 200},
		{name: "range other unit", req: get("/alpha.txt", "Range: items=0-1\r\n"), status: 200},
		{name: "if-range match", req: get("/alpha.txt", "Range: bytes=0-0\r\nIf-Range: "+et+"\r\n"), status: 206, body: "a"},
		{name: "if-range mismatch", req: get("/alpha.txt", "Range: bytes=0-0\r\nIf-Range: \"other\"\r\n"), status: 200},
		{name: "if-range date", req: get("/alpha.txt", "Range: bytes=1-1\r\nIf-Range: "+lm+"\r\n"), status: 206, body: "b"},
		{name: "if-range old date", req: get("/alpha.txt", "Range: bytes=1-1\r\nIf-Range: "+past+"\r\n"), status: 200},
		{name: "head ignores range", req: "HEAD /alpha.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n", method: "HEAD", status: 200},

		// Conditional requests.
		{name: "if-none-match", req: get("/alpha.txt", "If-None-Match: "+et+"\r\n"), status: 304,
			headers: map[string]string{"ETag": et, "Content-Length": ""}},
		{name: "if-none-match weak", req: get("/alpha.txt", "If-None-Match: \"zz\", W/"+et+"\r\n"), status: 304},
		{name: "if-none-match star", req: get("/alpha.txt", "If-None-Match: *\r\n"), status: 304},
		{name: "if-none-match other", req: get("/alpha.txt", "If-None-Match: \"zz\"\r\n"), status: 200},
		{name: "if-modified-since", req: get("/alpha.txt", "If-Modified-Since: "+lm+"\r\n"), status: 304},
		{name: "if-modified-since old", req: get("/alpha.txt", "If-Modified-Since: "+past+"\r\n"), status: 200},
		{name: "inm wins over ims", req: get("/alpha.txt", "If-None-Match: \"zz\"\r\nIf-Modified-Since: "+future+"\r\n"), status: 200},
		{name: "if-match", req: get("/alpha.txt", "If-Match: "+et+"\r\n"), status: 200},
		{name: "if-match fails", req: get("/alpha.txt", "If-Match: \"zz\"\r\n"), status: 412},
		{name: "if-match weak fails", req: get("/alpha.txt", "If-Match: W/"+et+"\r\n"), status: 412},
		{name: "if-unmodified-since", req: get("/alpha.txt", "If-Unmodified-Since: "+future+"\r\n"), status: 200},
		{name: "if-unmodified-since fails", req: get("/alpha.txt", "If-Unmodified-Since: "+past+"\r\n"), status: 412},

		// Precompressed sidecars.
		{name: "br", req: get("/app.js", "Accept-Encoding: gzip, br\r\n"), status: 200, body: "BROTLI-BYTES",
			headers: map[string]string{"Content-Encoding": "br", "Vary": "Accept-Encoding",
				"Content-Type": "text/javascript; charset=utf-8"}},
		{name: "gzip by q", req: get("/app.js", "Accept-Encoding: br;q=0.5, gzip\r\n"), status: 200, body: "GZIP-BYTES-LONGER",
			headers: map[string]string{"Content-Encoding": "gzip"}},
		{name: "br refused", req: get("/app.js", "Accept-Encoding: br;q=0, gzip;q=0\r\n"), status: 200,
			body: strings.Repeat("console.log(1);\n", 100), headers: map[string]string{"Content-Encoding": ""}},
		{name: "no accept-encoding", req: get("/app.js"), status: 200, body: strings.Repeat("console.log(1);\n", 100),
			headers: map[string]string{"Content-Encoding": ""}},
		{name: "star", req: get("/app.js", "Accept-Encoding: *\r\n"), status: 200, body: "BROTLI-BYTES"},
		{name: "zstd missing", req: get("/app.js", "Accept-Encoding: zstd\r\n"), status: 200,
			headers: map[string]string{"Content-Encoding": ""}},
		{name: "range of encoded", req: get("/app.js", "Accept-Encoding: br\r\nRange: bytes=0-5\r\n"), status: 206, body: "BROTLI",
			headers: map[string]string{"Content-Encoding": "br", "Content-Range": "bytes 0-5/12"}},
		{name: "sidecar not for plain file", req: get("/alpha.txt", "Accept-Encoding: br\r\n"), status: 200,
			headers: map[string]string{"Vary": "", "Content-Encoding": ""}},
	})
}

func TestMultipartRanges(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt", "Range: bytes=0-1, 10-12, -3\r\n"))
	resp, body := c.response("GET")
	if resp.StatusCode != 206 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/byteranges" {
		t.Fatalf("Content-Type %q: %v", resp.Header.Get("Content-Type"), err)
	}
	if got := resp.Header.Get("Content-Length"); got != fmt.Sprint(len(body)) {
		t.Errorf("Content-Length %s, body %d bytes", got, len(body))
	}
	mr := multipart.NewReader(strings.NewReader(string(body)), params["boundary"])
	want := []struct{ rng, data string }{{"bytes 0-1/26", "ab"}, {"bytes 10-12/26", "klm"}, {"bytes 23-25/26", "xyz"}}
	for i, w := range want {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		data, _ := io.ReadAll(p)
		if p.Header.Get("Content-Range") != w.rng || string(data) != w.data ||
			p.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("part %d = %q %q %q, want %q %q", i, p.Header.Get("Content-Range"), data, p.Header.Get("Content-Type"), w.rng, w.data)
		}
	}
	if _, err := mr.NextPart(); err != io.EOF {
		t.Errorf("after last part: %v, want EOF", err)
	}

	// Ranges of a large (sendfile) file, checked against the bytes on disk.
	big, _ := linkBig(t, root, "big.bin")
	disk, _ := os.ReadFile(big)
	c.send(get("/big.bin", "Range: bytes=5-9,50000000-50000099,-7\r\n"))
	resp, body = c.response("GET")
	_, params, _ = mime.ParseMediaType(resp.Header.Get("Content-Type"))
	mr = multipart.NewReader(strings.NewReader(string(body)), params["boundary"])
	for _, r := range [][2]int{{5, 10}, {50000000, 50000100}, {len(disk) - 7, len(disk)}} {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(p)
		if string(data) != string(disk[r[0]:r[1]]) {
			t.Errorf("range %v differs from the file", r)
		}
	}

	// Too many ranges: the header is ignored and the whole file served.
	many := strings.Repeat("0-0,", 100) + "1-1"
	c.send(get("/alpha.txt", "Range: bytes="+many+"\r\n"))
	resp, _ = c.response("GET")
	if resp.StatusCode != 200 {
		t.Errorf("100 ranges: status %d, want 200", resp.StatusCode)
	}
}

func TestKeepAliveAndPipelining(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))

	c := dial(t, ts.addr)
	for i := 0; i < 5; i++ {
		c.send(get("/alpha.txt"))
		resp, body := c.response("GET")
		if resp.StatusCode != 200 || string(body) != "abcdefghijklmnopqrstuvwxyz" || resp.Close {
			t.Fatalf("request %d: %d %q close=%v", i, resp.StatusCode, body, resp.Close)
		}
	}

	// Pipelined: all requests in one write, answers in order, including a
	// HEAD, a 404, a range and a request with a body to discard.
	c = dial(t, ts.addr)
	c.send(get("/alpha.txt") + "HEAD /docs/ HTTP/1.1\r\nHost: x\r\n\r\n" + get("/nope") +
		get("/alpha.txt", "Range: bytes=0-2\r\n") +
		"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
		get("/docs/index.html", "Connection: close\r\n"))
	want := []struct {
		method string
		status int
		body   string
	}{{"GET", 200, "abcdefghijklmnopqrstuvwxyz"}, {"HEAD", 200, ""}, {"GET", 404, ""}, {"GET", 206, "abc"},
		{"POST", 405, ""}, {"GET", 200, "docs index"}}
	for i, w := range want {
		resp, body := c.response(w.method)
		if resp.StatusCode != w.status || (w.body != "" && string(body) != w.body) {
			t.Errorf("pipelined %d: %d %q, want %d %q", i, resp.StatusCode, body, w.status, w.body)
		}
	}
	if !c.closed(scale(2 * time.Second)) {
		t.Error("connection open after Connection: close")
	}

	// Pipelined large responses: sendfile bodies stay in order.
	big, _ := linkBig(t, root, "big.bin")
	disk, _ := os.ReadFile(big)
	c = dial(t, ts.addr)
	c.send(get("/big.bin", "Range: bytes=0-3999999\r\n") + get("/alpha.txt") + get("/big.bin", "Range: bytes=-3000000\r\n"))
	_, b1 := c.response("GET")
	_, b2 := c.response("GET")
	_, b3 := c.response("GET")
	if string(b1) != string(disk[:4000000]) || string(b2) != "abcdefghijklmnopqrstuvwxyz" || string(b3) != string(disk[len(disk)-3000000:]) {
		t.Error("pipelined large responses out of order or corrupted")
	}
}

func TestHTTP10(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	runExchanges(t, ts.addr, []exchange{
		{name: "1.0 closes", req: "GET /alpha.txt HTTP/1.0\r\n\r\n", status: 200, body: "abcdefghijklmnopqrstuvwxyz",
			closed: true},
		{name: "1.0 keep-alive", req: "GET /alpha.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", status: 200,
			headers: map[string]string{"Connection": "keep-alive"}},
		{name: "1.1 close", req: get("/alpha.txt", "Connection: close\r\n"), status: 200, closed: true},
	})
	// The status line is HTTP/1.1 even to 1.0 clients (RFC 9110 §6.2).
	c := dial(t, ts.addr)
	c.send("GET /alpha.txt HTTP/1.0\r\n\r\n")
	line, _ := c.r.ReadString('\n')
	if line != "HTTP/1.1 200 OK\r\n" {
		t.Errorf("status line %q", line)
	}
}
