package engine_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/internal/nginxtest"
)

// edgeGet fetches path with the fields in hdr (name, value pairs) and
// returns the response (its body read) and the body.
func edgeGet(t *testing.T, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: body: %v", url, err)
	}
	return resp, b
}

// cacheOrigin starts nginx serving root, every response fresh for an
// hour, with the directives in extra too, and returns its address.
func cacheOrigin(t *testing.T, root, extra string) string {
	return nginxtest.Start(t, fmt.Sprintf(`
    server {
        listen %%[2]s;
        root %[1]q;
        location / { expires 1h; %[2]s }
    }`, root, extra))
}

// randomBytes is n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestEdgeRevalidation: against a real origin (nginx: its ETag and
// If-None-Match), a stale object is revalidated (304: no body moves, the
// object is fresh again), replaced when the origin's file changed,
// served stale at once while one fetch revalidates it in the background
// (stale-while-revalidate), and served stale when the origin fails
// (stale-if-error) but not past it or without it.
func TestEdgeRevalidation(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	for _, d := range []string{"reval", "swr", "sie", "nosie"} {
		os.MkdirAll(root+"/"+d, 0o755)
	}
	one, two := randomBytes(1<<20), randomBytes(1<<20)
	for _, d := range []string{"reval", "swr", "sie", "nosie"} {
		writeFile(t, root+"/"+d+"/a.bin", string(one))
	}
	addr := nginxtest.Start(t, fmt.Sprintf(`
    server {
        listen %%[2]s;
        root %[1]q;
        location /reval/ { add_header Cache-Control "max-age=1"; }
        location /swr/ { add_header Cache-Control "max-age=1, stale-while-revalidate=60"; }
        location /sie/ { add_header Cache-Control "max-age=1, stale-if-error=60"; if (-f %[1]s/down) { return 503; } }
        location /nosie/ { add_header Cache-Control "max-age=1"; if (-f %[1]s/down) { return 503; } }
    }`, root))
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", t.TempDir()), addr))
	for _, d := range []string{"reval", "swr", "sie", "nosie"} {
		if resp, b := edgeGet(t, ts.url+"/"+d+"/a.bin"); resp.StatusCode != 200 || !bytes.Equal(b, one) || !strings.HasSuffix(resp.Header.Get("Cache-Status"), "; stored; detail=unverified") {
			t.Fatalf("/%s/: status %d, bytes match %v, Cache-Status %q", d, resp.StatusCode, bytes.Equal(b, one), resp.Header.Get("Cache-Status"))
		}
	}
	fromOrigin := ts.Stats().EdgeOriginBytes
	time.Sleep(1100 * time.Millisecond) // all four are stale now

	// Revalidated: the origin answers 304, no body moves.
	resp, b := edgeGet(t, ts.url+"/reval/a.bin")
	if resp.StatusCode != 200 || !bytes.Equal(b, one) || resp.Header.Get("Cache-Status") != "engine; fwd=stale; fwd-status=304; detail=unverified" {
		t.Fatalf("revalidation: status %d, bytes match %v, Cache-Status %q", resp.StatusCode, bytes.Equal(b, one), resp.Header.Get("Cache-Status"))
	}
	if st := ts.Stats(); st.EdgeRevalidated != 1 || st.EdgeOriginBytes != fromOrigin {
		t.Fatalf("revalidation: %d revalidated, %d bytes from the origin; want 1 and none", st.EdgeRevalidated, st.EdgeOriginBytes-fromOrigin)
	}
	if resp, _ := edgeGet(t, ts.url+"/reval/a.bin"); resp.Header.Get("Cache-Status") != "engine; hit; detail=unverified" {
		t.Fatalf("after a revalidation: Cache-Status %q, want a hit", resp.Header.Get("Cache-Status"))
	}
	// Changed at the origin: the new bytes replace the object.
	writeFile(t, root+"/reval/a.bin", string(two))
	os.Chtimes(root+"/reval/a.bin", time.Now().Add(time.Hour), time.Now().Add(time.Hour)) // a new ETag, whatever the clock's grain
	time.Sleep(1100 * time.Millisecond)
	if resp, b := edgeGet(t, ts.url+"/reval/a.bin"); !bytes.Equal(b, two) || resp.Header.Get("Cache-Status") != "engine; fwd=stale; fwd-status=200; stored; detail=unverified" {
		t.Fatalf("changed at the origin: bytes match %v, Cache-Status %q", bytes.Equal(b, two), resp.Header.Get("Cache-Status"))
	}
	if !waitFor(5*time.Second, func() bool {
		resp, b := edgeGet(t, ts.url+"/reval/a.bin")
		return bytes.Equal(b, two) && resp.Header.Get("Cache-Status") == "engine; hit; detail=unverified"
	}) {
		t.Fatal("the changed object was not stored")
	}

	// Stale while revalidated: served from the cache at once; one
	// background fetch makes it fresh again.
	if resp, b := edgeGet(t, ts.url+"/swr/a.bin"); !bytes.Equal(b, one) || resp.Header.Get("Cache-Status") != `engine; hit; detail="stale-while-revalidate unverified"` {
		t.Fatalf("stale-while-revalidate: bytes match %v, Cache-Status %q", bytes.Equal(b, one), resp.Header.Get("Cache-Status"))
	}
	if !waitFor(5*time.Second, func() bool { return ts.Stats().EdgeRevalidated == 2 }) {
		t.Fatalf("stale-while-revalidate: no background revalidation (%d revalidated)", ts.Stats().EdgeRevalidated)
	}
	if resp, _ := edgeGet(t, ts.url+"/swr/a.bin"); resp.Header.Get("Cache-Status") != "engine; hit; detail=unverified" {
		t.Fatalf("after a background revalidation: Cache-Status %q, want a hit", resp.Header.Get("Cache-Status"))
	}

	// The origin fails: stale-if-error serves the stale object; without
	// it the client sees the origin's error.
	writeFile(t, root+"/down", "")
	if resp, b := edgeGet(t, ts.url+"/sie/a.bin"); resp.StatusCode != 200 || !bytes.Equal(b, one) || resp.Header.Get("Cache-Status") != `engine; fwd=stale; fwd-status=503; detail="stale-if-error unverified"` {
		t.Fatalf("stale-if-error: status %d, bytes match %v, Cache-Status %q", resp.StatusCode, bytes.Equal(b, one), resp.Header.Get("Cache-Status"))
	}
	if resp, _ := edgeGet(t, ts.url+"/nosie/a.bin"); resp.StatusCode != 503 || resp.Header.Get("Cache-Status") != "engine; fwd=stale; fwd-status=503" {
		t.Fatalf("no stale-if-error: status %d, Cache-Status %q; want the origin's 503", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}
	if st := ts.Stats(); st.EdgeStale != 2 {
		t.Fatalf("%d stale responses counted, want 2 (one while revalidating, one after an error)", st.EdgeStale)
	}
}

// TestEdgeColdRange: a range from the middle of a cold 2 GiB object is
// answered without waiting for the bytes before it (relayed on its own
// while the whole object is fetched in the background), and a range
// near the start is read from that fetch as it lands. The origin (nginx)
// sends at 40 MB/s, so the object's 2 GiB would take 50 s.
func TestEdgeColdRange(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	const size, mid = 2 << 30, 1 << 30
	head, middle := randomBytes(4<<20), randomBytes(4<<20)
	f, err := os.Create(root + "/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(head, 0)
	f.WriteAt(middle, mid)
	f.Truncate(size) // sparse: zeros elsewhere
	f.Close()
	os.Chmod(root+"/big.bin", 0o644)
	addr := cacheOrigin(t, root, "limit_rate 40m;")
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", t.TempDir()), addr))

	resp, b := edgeGet(t, ts.url+"/big.bin", "Range", fmt.Sprintf("bytes=%d-%d", mid+1000, mid+1000+(2<<20)-1))
	landed := ts.Stats().EdgeOriginBytes
	if resp.StatusCode != 206 || !bytes.Equal(b, middle[1000:1000+2<<20]) || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", mid+1000, mid+1000+(2<<20)-1, size) {
		t.Fatalf("a range from the middle: status %d, %d bytes (match %v), Content-Range %q", resp.StatusCode, len(b), bytes.Equal(b, middle[1000:1000+2<<20]), resp.Header.Get("Content-Range"))
	}
	if cs := resp.Header.Get("Cache-Status"); cs != "engine; fwd=uri-miss; detail=range-ahead-of-fill; fwd-status=206" {
		t.Fatalf("a range from the middle: Cache-Status %q", cs)
	}
	if landed >= mid {
		t.Fatalf("the range from the middle was answered once %d bytes of the object had landed: it waited for them", landed)
	}
	t.Logf("the range from the middle was answered with %d MiB of the object fetched", landed>>20)

	// Near the start: from the fetch under way.
	resp, b = edgeGet(t, ts.url+"/big.bin", "Range", "bytes=1000-1048575")
	if resp.StatusCode != 206 || !bytes.Equal(b, head[1000:1<<20]) || resp.Header.Get("Cache-Status") != "engine; fwd=uri-miss; collapsed; fwd-status=200; stored; detail=unverified" {
		t.Fatalf("a range near the start: status %d, bytes match %v, Cache-Status %q", resp.StatusCode, bytes.Equal(b, head[1000:1<<20]), resp.Header.Get("Cache-Status"))
	}
	if st := ts.Stats(); st.EdgePasses != 1 || st.EdgeStored != 0 {
		t.Fatalf("%d relayed, %d stored; want 1 (the middle range) and none yet", st.EdgePasses, st.EdgeStored)
	}
}

// TestEdgeVaryAndRoom: a response that varies on Accept-Encoding alone
// (nginx's gzip_vary) is fetched as identity and stored once for every
// client, whatever encodings they accept; one that varies on anything
// else is not shared; and an object that does not fit (min_free past
// the file system's free space: the disk is full by the operator's
// rule) is proxied whole, never an error, and nothing is left on disk.
func TestEdgeVaryAndRoom(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	text := strings.Repeat("a line of text that compresses well\n", 4000)
	writeFile(t, root+"/vary.txt", text)
	writeFile(t, root+"/cookie.txt", text)
	big := randomBytes(8 << 20)
	writeFile(t, root+"/big.bin", string(big))
	addr := nginxtest.Start(t, fmt.Sprintf(`
    gzip on;
    gzip_types text/plain;
    gzip_vary on;
    gzip_min_length 1;
    types { text/plain txt; }
    server {
        listen %%[2]s;
        root %[1]q;
        location / { expires 1h; }
        location = /cookie.txt { expires 1h; add_header Vary Cookie; }
    }`, root))
	cacheDir := t.TempDir()
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", cacheDir), addr))
	for i, ae := range []string{"gzip, br", "identity", "gzip"} {
		resp, b := edgeGet(t, ts.url+"/vary.txt", "Accept-Encoding", ae)
		want := "engine; hit; detail=unverified"
		if i == 0 {
			want = "engine; fwd=uri-miss; fwd-status=200; stored; detail=unverified"
		}
		if resp.Header.Get("Content-Encoding") == "" && string(b) != text || resp.Header.Get("Cache-Status") != want {
			t.Fatalf("Vary: Accept-Encoding, request %d (Accept-Encoding: %s): %d bytes, Content-Encoding %q, Cache-Status %q (want %q)",
				i+1, ae, len(b), resp.Header.Get("Content-Encoding"), resp.Header.Get("Cache-Status"), want)
		}
	}
	for range 2 {
		if resp, b := edgeGet(t, ts.url+"/cookie.txt", "Accept-Encoding", "identity"); string(b) != text || resp.Header.Get("Cache-Status") == "engine; hit; detail=unverified" {
			t.Fatalf("Vary: Cookie: Cache-Status %q; it must not be shared", resp.Header.Get("Cache-Status"))
		}
	}

	full := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmin_free = \"1000000TiB\"\n", t.TempDir()), addr))
	for range 2 {
		resp, b := edgeGet(t, full.url+"/big.bin")
		if resp.StatusCode != 200 || !bytes.Equal(b, big) || resp.Header.Get("Cache-Status") != "engine; fwd=uri-miss; fwd-status=200" {
			t.Fatalf("no room: status %d, bytes match %v, Cache-Status %q; want the origin's response, proxied", resp.StatusCode, bytes.Equal(b, big), resp.Header.Get("Cache-Status"))
		}
	}
	if st := full.Stats(); st.EdgeStored != 0 || st.EdgeObjects != 0 {
		t.Fatalf("no room: %d stored", st.EdgeStored)
	}
}

// TestEdgeEvictWhileRead: an object evicted to keep max_size while a
// client reads it (a hit, from its file) is read to its end; the next
// request of it is a miss.
func TestEdgeEvictWhileRead(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	a, b := randomBytes(16<<20), randomBytes(16<<20)
	writeFile(t, root+"/a.bin", string(a))
	writeFile(t, root+"/b.bin", string(b))
	addr := cacheOrigin(t, root, "")
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmax_size = \"20MiB\"\nmin_free = \"1MiB\"\n", t.TempDir()), addr))
	edgeGet(t, ts.url+"/a.bin")
	resp, err := http.Get(ts.url + "/a.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Cache-Status") != "engine; hit; detail=unverified" {
		t.Fatalf("a.bin: Cache-Status %q, want a hit", resp.Header.Get("Cache-Status"))
	}
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	edgeGet(t, ts.url+"/b.bin") // stored in a.bin's place
	if st := ts.Stats(); st.EdgeEvictions != 1 || st.EdgeObjects != 1 {
		t.Fatalf("%d evictions, %d objects; want 1 and 1", st.EdgeEvictions, st.EdgeObjects)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(append(first, rest...), a) {
		t.Fatalf("the client reading the evicted object: %v, bytes match %v", err, bytes.Equal(append(first, rest...), a))
	}
	if resp, _ := edgeGet(t, ts.url+"/a.bin"); !strings.HasPrefix(resp.Header.Get("Cache-Status"), "engine; fwd=uri-miss") {
		t.Fatalf("a.bin after its eviction: Cache-Status %q", resp.Header.Get("Cache-Status"))
	}
}

// TestEdgeManifest: a route's cache_manifest gives digests the origin
// does not state: an object that matches its line is stored verified;
// one that does not is never stored, and its clients are cut.
func TestEdgeManifest(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	good, bad := randomBytes(2<<20), randomBytes(2<<20)
	os.MkdirAll(root+"/m", 0o755)
	writeFile(t, root+"/m/good.bin", string(good))
	writeFile(t, root+"/m/bad.bin", string(bad))
	other := blake3.Sum256([]byte("other bytes"))
	manifest := filepath.Join(t.TempDir(), "B3SUMS")
	gs := blake3.Sum256(good)
	os.WriteFile(manifest, []byte(fmt.Sprintf("%x  m/good.bin\n%x  m/bad.bin\n", gs, other)), 0o644)
	addr := cacheOrigin(t, root, "")
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\ncache_manifest = %q\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", manifest, t.TempDir()), addr))
	var etag string
	for i, want := range []string{"engine; fwd=uri-miss; fwd-status=200; stored", "engine; hit"} {
		resp, b := edgeGet(t, ts.url+"/m/good.bin")
		if !bytes.Equal(b, good) || resp.Header.Get("Cache-Status") != want {
			t.Fatalf("an object its manifest line matches, request %d: bytes match %v, Cache-Status %q (want %q)", i+1, bytes.Equal(b, good), resp.Header.Get("Cache-Status"), want)
		}
		if i == 0 {
			etag = resp.Header.Get("ETag") // the origin's
		}
	}
	// The ETag a miss's client got still names the object on a hit: a
	// resumed download goes on from its range, a revalidation is a 304.
	if resp, b := edgeGet(t, ts.url+"/m/good.bin", "Range", "bytes=1000-1999", "If-Range", etag); resp.StatusCode != 206 || !bytes.Equal(b, good[1000:2000]) {
		t.Fatalf("a hit's range with If-Range: the origin's ETag %s: status %d", etag, resp.StatusCode)
	}
	if resp, _ := edgeGet(t, ts.url+"/m/good.bin", "If-None-Match", etag); resp.StatusCode != 304 {
		t.Fatalf("a hit with If-None-Match: the origin's ETag %s: status %d", etag, resp.StatusCode)
	}
	for i := range 2 {
		resp, err := http.Get(ts.url + "/m/bad.bin")
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatalf("an object its manifest line does not match, request %d: ended cleanly (Cache-Status %q); want it cut", i+1, resp.Header.Get("Cache-Status"))
		}
	}
	if st := ts.Stats(); st.EdgeIntegrityFailures != 2 || st.EdgeStored != 1 {
		t.Fatalf("%d integrity failures, %d stored; want 2 and 1", st.EdgeIntegrityFailures, st.EdgeStored)
	}
}

// TestEdgeMaxFills: past max_fills objects being fetched, a miss of
// another object is relayed whole and not stored.
func TestEdgeMaxFills(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	a, b := randomBytes(8<<20), randomBytes(1<<20)
	writeFile(t, root+"/a.bin", string(a))
	writeFile(t, root+"/b.bin", string(b))
	addr := cacheOrigin(t, root, "limit_rate 4m;")
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\nmax_fills = 1\n", t.TempDir()), addr))
	resp, err := http.Get(ts.url + "/a.bin") // a's fill: 2 s at the origin's rate
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, bb := edgeGet(t, ts.url+"/b.bin")
	if !bytes.Equal(bb, b) || rb.Header.Get("Cache-Status") != "engine; fwd=uri-miss; detail=fills-busy; fwd-status=200" {
		t.Fatalf("a miss while max_fills are under way: bytes match %v, Cache-Status %q", bytes.Equal(bb, b), rb.Header.Get("Cache-Status"))
	}
	if ab, err := io.ReadAll(resp.Body); err != nil || !bytes.Equal(ab, a) {
		t.Fatalf("the fill under way: %v, bytes match %v", err, bytes.Equal(ab, a))
	}
	if st := ts.Stats(); st.EdgeFillsBusy != 1 || st.EdgeStored != 1 {
		t.Fatalf("%d misses past max_fills, %d stored; want 1 and 1", st.EdgeFillsBusy, st.EdgeStored)
	}
}

// TestEdge304OtherETag: a 304 whose ETag is not the stored object's
// updates nothing: the object is asked for whole again.
func TestEdge304OtherETag(t *testing.T) {
	var full atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=1")
		if r.Header.Get("If-None-Match") != "" {
			w.Header().Set("ETag", `"v2"`)
			w.WriteHeader(304)
			return
		}
		n := full.Add(1)
		w.Header().Set("ETag", fmt.Sprintf(`"v%d"`, n))
		fmt.Fprintf(w, "version %d", n)
	}))
	defer origin.Close()
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", t.TempDir()), strings.TrimPrefix(origin.URL, "http://")))
	if _, b := edgeGet(t, ts.url+"/a"); string(b) != "version 1" {
		t.Fatalf("first: %q", b)
	}
	time.Sleep(1100 * time.Millisecond)
	if resp, b := edgeGet(t, ts.url+"/a"); string(b) != "version 2" || !strings.HasPrefix(resp.Header.Get("Cache-Status"), "engine; fwd=stale; fwd-status=200") {
		t.Fatalf("after a 304 with another ETag: %q, Cache-Status %q; want the object fetched whole", b, resp.Header.Get("Cache-Status"))
	}
}

// TestEdgeDamagedObject: an object whose file was changed on disk while
// the server was stopped (a byte rewritten here: its modification time
// moved) is not taken back at the next start: the request is a miss,
// fetched again, byte-exact.
func TestEdgeDamagedObject(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	body := randomBytes(2 << 20)
	writeFile(t, root+"/obj.bin", string(body))
	addr := cacheOrigin(t, root, "")
	cacheDir := t.TempDir()
	conf := proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", cacheDir), addr)
	ts := start(t, conf)
	edgeGet(t, ts.url+"/obj.bin")
	if resp, _ := edgeGet(t, ts.url+"/obj.bin"); !strings.HasPrefix(resp.Header.Get("Cache-Status"), "engine; hit") {
		t.Fatalf("not a hit: %q", resp.Header.Get("Cache-Status"))
	}
	ts.stop()
	files, _ := filepath.Glob(filepath.Join(cacheDir, "objects", "*", "*"))
	n := 0
	for _, p := range files {
		if strings.HasSuffix(p, ".meta") {
			continue
		}
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte{'X'}, 1000)
		f.Close()
		n++
	}
	if n != 1 {
		t.Fatalf("%d data files", n)
	}
	again := start(t, conf)
	if resp, b := edgeGet(t, again.url+"/obj.bin"); !bytes.Equal(b, body) || !strings.HasPrefix(resp.Header.Get("Cache-Status"), "engine; fwd=uri-miss") {
		t.Fatalf("after a restart with the object changed: bytes match %v, Cache-Status %q", bytes.Equal(b, body), resp.Header.Get("Cache-Status"))
	}
}
