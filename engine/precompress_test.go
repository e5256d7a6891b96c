package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/mediaship/engine/precompress"
)

// TestPrecompressedSidecars: after engine precompress, a real HTTP client
// gets the coding its Accept-Encoding prefers, a body that decompresses
// to the file, and Vary: Accept-Encoding on every response for a file
// with sidecars (identity, none, HEAD, 304) and on none for a file
// without; a sidecar older than its file is not served.
func TestPrecompressedSidecars(t *testing.T) {
	root := t.TempDir()
	js := []byte(strings.Repeat("export function f(x) { return x * 2; }\n", 300))
	writeFile(t, filepath.Join(root, "app.js"), string(js))
	writeFile(t, filepath.Join(root, "weights.bin"), strings.Repeat("w", 4096))
	rep, err := precompress.Run(context.Background(), root, precompress.Config{})
	if err != nil || rep.Written != 3 || len(rep.Errors) > 0 {
		t.Fatalf("precompress: %v %+v", err, rep)
	}
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: scale(10 * time.Second)}
	t.Cleanup(client.CloseIdleConnections)
	get := func(method, path string, h ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.url+path, nil)
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}

	for _, tc := range []struct{ ae, coding string }{
		{"br", "br"},
		{"zstd", "zstd"},
		{"gzip", "gzip"},
		{"gzip, deflate, br, zstd", "br"},
		{"gzip;q=0.5, br;q=0.4, zstd;q=0.9", "zstd"},
		{"br;q=0.1, gzip", "gzip"},
		{"x-gzip", "gzip"},
		{"*", "br"},
		{"identity", ""},
		{"deflate", ""},
		{"br;q=0, zstd;q=0, gzip;q=0", ""},
	} {
		resp, body := get("GET", "/app.js", "Accept-Encoding", tc.ae)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != tc.coding || resp.Header.Get("Vary") != "Accept-Encoding" {
			t.Errorf("Accept-Encoding %q: %d, Content-Encoding %q, Vary %q; want 200, %q, Accept-Encoding", tc.ae, resp.StatusCode,
				resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"), tc.coding)
			continue
		}
		if got := decompress(t, tc.coding, body); !bytes.Equal(got, js) {
			t.Errorf("Accept-Encoding %q: the body does not decompress to the file", tc.ae)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
			t.Errorf("Accept-Encoding %q: Content-Type %q", tc.ae, ct)
		}
	}

	// No Accept-Encoding, HEAD and 304 carry Vary too.
	resp, body := get("GET", "/app.js")
	if !bytes.Equal(body, js) || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Vary") != "Accept-Encoding" {
		t.Errorf("no Accept-Encoding: encoding %q, Vary %q", resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"))
	}
	etag := resp.Header.Get("ETag")
	brSize, _ := os.Stat(filepath.Join(root, "app.js.br"))
	resp, body = get("HEAD", "/app.js", "Accept-Encoding", "br")
	if len(body) != 0 || resp.Header.Get("Content-Encoding") != "br" || resp.Header.Get("Vary") != "Accept-Encoding" ||
		resp.ContentLength != brSize.Size() {
		t.Errorf("HEAD: encoding %q, Vary %q, length %d (sidecar %d)", resp.Header.Get("Content-Encoding"),
			resp.Header.Get("Vary"), resp.ContentLength, brSize.Size())
	}
	resp, _ = get("HEAD", "/app.js")
	if resp.Header.Get("Vary") != "Accept-Encoding" || resp.ContentLength != int64(len(js)) {
		t.Errorf("HEAD without Accept-Encoding: Vary %q, length %d", resp.Header.Get("Vary"), resp.ContentLength)
	}
	for _, ae := range []string{"", "identity"} {
		resp, _ = get("GET", "/app.js", "If-None-Match", etag, "Accept-Encoding", ae)
		if resp.StatusCode != 304 || resp.Header.Get("Vary") != "Accept-Encoding" {
			t.Errorf("If-None-Match, Accept-Encoding %q: %d, Vary %q; want 304 with Vary", ae, resp.StatusCode, resp.Header.Get("Vary"))
		}
	}

	// A file without sidecars: no Vary, whatever the client accepts.
	for _, ae := range []string{"", "br", "identity"} {
		resp, _ := get("GET", "/weights.bin", "Accept-Encoding", ae)
		if resp.StatusCode != 200 || resp.Header.Get("Vary") != "" || resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("weights.bin, Accept-Encoding %q: %d, Vary %q, encoding %q", ae, resp.StatusCode,
				resp.Header.Get("Vary"), resp.Header.Get("Content-Encoding"))
		}
	}

	// The file changes (its mtime moves past its sidecars'): they are
	// stale and no longer served, and without a usable sidecar there is
	// no Vary either.
	js = append(js, "// changed\n"...)
	writeFile(t, filepath.Join(root, "app.js"), string(js))
	if !waitFor(scale(5*time.Second), func() bool {
		resp, body := get("GET", "/app.js", "Accept-Encoding", "br, zstd, gzip")
		return resp.Header.Get("Content-Encoding") == "" && bytes.Equal(body, js) && resp.Header.Get("Vary") == ""
	}) {
		resp, _ := get("GET", "/app.js", "Accept-Encoding", "br, zstd, gzip")
		t.Fatalf("stale sidecars: Content-Encoding %q, Vary %q", resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"))
	}
	// precompress again: served again.
	if _, err := precompress.Run(context.Background(), root, precompress.Config{}); err != nil {
		t.Fatal(err)
	}
	if !waitFor(scale(5*time.Second), func() bool {
		resp, body := get("GET", "/app.js", "Accept-Encoding", "zstd")
		return resp.Header.Get("Content-Encoding") == "zstd" && bytes.Equal(decompress(t, "zstd", body), js)
	}) {
		t.Error("fresh sidecars not served after precompress ran again")
	}
}

func decompress(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	switch coding {
	case "":
		return b
	case "br":
		r = brotli.NewReader(bytes.NewReader(b))
	case "gzip":
		if r, err = gzip.NewReader(bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	case "zstd":
		d, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		r = d
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Errorf("%s: %v", coding, err)
	}
	return out
}
