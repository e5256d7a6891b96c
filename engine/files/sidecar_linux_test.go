package files

import (
	"os"
	"testing"
	"time"
)

// BenchmarkServeSidecars measures the reactor's part of a cached request
// on a site with precompressed = true: for a file with no sidecars and for
// one with all three, with the Accept-Encoding values clients send.
func BenchmarkServeSidecars(b *testing.B) {
	dir := b.TempDir()
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, name := range []string{"plain.js", "app.js", "app.js.br", "app.js.zst", "app.js.gz"} {
		writeAt(b, dir, name, string(make([]byte, 1024)), mtime)
	}
	c, site := sidecarSite(b, dir)
	for _, bc := range []struct{ name, path, ae string }{
		{"plain/none", "/plain.js", ""},
		{"plain/identity", "/plain.js", "identity"},
		{"plain/gzip", "/plain.js", "gzip"},
		{"plain/browser", "/plain.js", "gzip, deflate, br, zstd"},
		{"sidecars/none", "/app.js", ""},
		{"sidecars/browser", "/app.js", "gzip, deflate, br, zstd"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := hdrs{}
			if bc.ae != "" {
				h["accept-encoding"] = bc.ae
			}
			req := &Request{Path: []byte(bc.path), Header: h}
			var s Scratch
			for !c.Serve(site, req, &s) {
				s.Fetch(c, site)
			}
			s.Reset()
			b.ReportAllocs()
			for b.Loop() {
				if !c.Serve(site, req, &s) {
					b.Fatal("miss after warm-up")
				}
				s.Reset()
			}
		})
	}
}

// serveOnce answers one request as a connection would: Fetch on a miss,
// then Serve again.
// writeAt writes name in dir with mtime mt.
func writeAt(tb testing.TB, dir, name, content string, mt time.Time) {
	tb.Helper()
	if err := os.WriteFile(dir+"/"+name, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chtimes(dir+"/"+name, time.Time{}, mt); err != nil {
		tb.Fatal(err)
	}
}

// sidecarSite serves dir, precompressed = true, from a cache of its own;
// both are closed when tb ends.
func sidecarSite(tb testing.TB, dir string) (*Cache, *Site) {
	tb.Helper()
	c := NewCache(Config{})
	tb.Cleanup(func() { c.Close() })
	root, err := NewRoot(dir, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { root.Close() })
	return c, &Site{Root: root, Index: []string{"index.html"}, Precompressed: true}
}

func serveOnce(t *testing.T, c *Cache, site *Site, path string, h hdrs) Response {
	t.Helper()
	req := &Request{Path: []byte(path), Header: h}
	var s Scratch
	defer s.Reset()
	for i := 0; !c.Serve(site, req, &s); i++ {
		if i == 10 {
			t.Fatalf("GET %s: still pending after %d fetches", path, i)
		}
		s.Fetch(c, site)
	}
	return s.Resp
}

// TestSidecarRules: a sidecar is served only with its file's mtime
// exactly; Vary is on every response for a file with a usable sidecar and on
// none for a file without; a sidecar created, retimed or removed after
// the file was cached is seen (inotify drops the file's entry).
func TestSidecarRules(t *testing.T) {
	dir := t.TempDir()
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	write := func(name, content string, mt time.Time) {
		t.Helper()
		writeAt(t, dir, name, content, mt)
	}
	write("app.js", "plain", mtime)
	c, site := sidecarSite(t, dir)
	root := site.Root

	type want struct {
		coding string
		vary   bool
	}
	// check waits for the cache to see the disk (inotify is asynchronous)
	// and then checks every kind of request.
	check := func(step string, acceptBr want, others bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r := serveOnce(t, c, site, "/app.js", hdrs{"accept-encoding": "gzip;q=0.5, br"})
			if (want{r.ContentEncoding, r.Vary}) == acceptBr {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Accept-Encoding br: encoding %q vary %v, want %+v", step, r.ContentEncoding, r.Vary, acceptBr)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, h := range []hdrs{{}, {"accept-encoding": "identity"}, {"accept-encoding": "br;q=0"},
			{"if-none-match": "*"}} {
			r := serveOnce(t, c, site, "/app.js", h)
			if r.ContentEncoding != "" || r.Vary != others {
				t.Errorf("%s: %v: encoding %q vary %v, want identity vary %v", step, h, r.ContentEncoding, r.Vary, others)
			}
		}
		head := serveOnce(t, c, site, "/app.js", hdrs{})
		if head.Status != 200 || string(head.Parts[0].Mem) != "plain" {
			t.Errorf("%s: identity body %q", step, head.Parts[0].Mem)
		}
	}
	check("no sidecar", want{"", false}, false)
	write("app.js.br", "brotli", mtime)
	check("sidecar created", want{"br", true}, true)
	write("app.js.br", "brotli", mtime.Add(-time.Second))
	check("sidecar older than the file", want{"", false}, false)
	// Newer is not proof either: the file may have been put back with an
	// older mtime (a rollback, rsync -t).
	write("app.js.br", "brotli", mtime.Add(time.Hour))
	check("sidecar newer than the file", want{"", false}, false)
	write("app.js.br", "brotli", mtime.Add(2*time.Hour))
	write("app.js", "plain", mtime.Add(2*time.Hour))
	check("file given its sidecar's mtime", want{"br", true}, true)
	write("app.js", "plain", mtime.Add(3*time.Hour))
	check("file changed after its sidecar", want{"", false}, false)
	write("app.js.gz", "gzip", mtime.Add(3*time.Hour))
	check("an up-to-date gzip sidecar", want{"gzip", true}, true)
	if err := os.Remove(dir + "/app.js.gz"); err != nil {
		t.Fatal(err)
	}
	check("sidecar removed", want{"", false}, false)

	// Evicting the sidecars' entries (here: dropping them by hand) leaves
	// the file's memo right.
	write("app.js.zst", "zstd", mtime.Add(3*time.Hour))
	check("zstd", want{"", true}, true)
	c.mu.Lock()
	for _, sfx := range []string{".br", ".zst", ".gz"} {
		if e := c.m[root.Key([]byte("app.js"+sfx))]; e != nil {
			c.removeLocked(e.key, e)
		}
	}
	c.mu.Unlock()
	r := serveOnce(t, c, site, "/app.js", hdrs{"accept-encoding": "zstd"})
	if r.ContentEncoding != "zstd" || !r.Vary || string(r.Parts[0].Mem) != "zstd" {
		t.Errorf("after eviction: encoding %q vary %v body %q", r.ContentEncoding, r.Vary, r.Parts[0].Mem)
	}
}

// TestSidecarValidators: before the digests are known, two sidecars of
// one size and mtime (engine precompress gives every sidecar its file's)
// still have different ETags, so a validator of the zstd body never
// matches the br body: no 304, and If-Range falls back to the whole body.
// precompress's partial temporaries are never served.
func TestSidecarValidators(t *testing.T) {
	dir := t.TempDir()
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, body := range map[string]string{"app.js": "plain body", "app.js.br": "same-size", "app.js.zst": "same-size",
		".precompress-123.tmp": "partial"} {
		writeAt(t, dir, name, body, mtime)
	}
	c, site := sidecarSite(t, dir)
	zst := serveOnce(t, c, site, "/app.js", hdrs{"accept-encoding": "zstd"})
	br := serveOnce(t, c, site, "/app.js", hdrs{"accept-encoding": "br"})
	if zst.ContentEncoding != "zstd" || br.ContentEncoding != "br" || zst.ETag == br.ETag {
		t.Fatalf("zstd %q %s, br %q %s: the codings share a validator", zst.ContentEncoding, zst.ETag, br.ContentEncoding, br.ETag)
	}
	if r := serveOnce(t, c, site, "/app.js", hdrs{"accept-encoding": "br", "if-none-match": zst.ETag}); r.Status != 200 {
		t.Errorf("br with the zstd body's ETag in If-None-Match: %d", r.Status)
	}
	if r := serveOnce(t, c, site, "/app.js", hdrs{"accept-encoding": "br", "range": "bytes=2-4", "if-range": zst.ETag}); r.Status != 200 {
		t.Errorf("br with If-Range of the zstd body: %d, want the whole br body", r.Status)
	}
	if r := serveOnce(t, c, site, "/.precompress-123.tmp", hdrs{}); r.Status != 404 {
		t.Errorf("a precompress temporary: %d, want 404", r.Status)
	}
}
