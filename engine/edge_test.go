package engine_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/nginxtest"
)

var nginxRequests = regexp.MustCompile(`server accepts handled requests\s+\d+ \d+ (\d+)`)

// originRequests counts the requests nginx has answered so far, less
// the status requests among them (this one included): *asked counts
// them.
func originRequests(t *testing.T, status string, asked *int) int {
	t.Helper()
	*asked++
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + status + "/_status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := nginxRequests.FindSubmatch(b)
	if m == nil {
		t.Fatalf("stub_status: %q", b)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n - *asked
}

// TestEdgeCache: a cached route in front of a real origin (nginx, over
// TLS): a fresh response is fetched once and then served from the
// cache's files (every protocol, ranges and conditional requests, the
// origin's Content-Type, Cache-Status), across a restart, and while the
// origin is down; what must not be stored (no-store, credentials, a
// digest that does not match the bytes) goes to the origin every time;
// an object past its freshness is fetched again.
func TestEdgeCache(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	for _, d := range []string{"fresh", "nostore", "short", "lie"} {
		os.MkdirAll(root+"/"+d, 0o755)
	}
	_, sum := linkBig(t, root+"/fresh", "big.bin")
	writeFile(t, root+"/fresh/a.json", `{"model":"a"}`)
	writeFile(t, root+"/nostore/a.txt", "not for caches")
	writeFile(t, root+"/short/a.txt", "one second")
	writeFile(t, root+"/lie/a.txt", "these bytes")
	wrong := sha256.Sum256([]byte("other bytes"))
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	up := newPKI(t, dir, "origin.test")
	status := freeAddr(t)
	addr := nginxtest.Start(t, fmt.Sprintf(`
    sendfile on;
    keepalive_timeout 30s;
    types { application/json json; }
    server {
        listen %%[2]s ssl;
        ssl_certificate %[2]q;
        ssl_certificate_key %[3]q;
        root %[1]q;
        location /fresh/ { expires 1h; }
        location /nostore/ { expires 1h; add_header Cache-Control no-store; }
        location /short/ { expires 1s; }
        location /lie/ { expires 1h; add_header Repr-Digest "sha-256=:%[5]s:"; }
    }
    server {
        listen %[4]s;
        location = /_status { stub_status; }
    }`, root, up.certFile, up.keyFile, status, base64.StdEncoding.EncodeToString(wrong[:])))
	cacheDir := t.TempDir()
	asked := 0
	origin := func() int { return originRequests(t, status, &asked) }
	cfg := func(upstream string) string {
		return proxyConfig(t, "/", fmt.Sprintf("upstream_tls = true\nca = %q\ntls_server_name = \"origin.test\"\ncache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", up.caFile, cacheDir), upstream)
	}
	ts := start(t, cfg(addr))
	get := func(ts *testServer, path string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.url+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer resp.Body.Close()
		h := sha256.New()
		io.Copy(h, resp.Body)
		return resp, hex.EncodeToString(h.Sum(nil))
	}
	hexOf := func(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }

	// A miss, stored as it streams; then hits, with no origin request.
	resp, got := get(ts, "/fresh/big.bin")
	if resp.StatusCode != 200 || got != sum || resp.Header.Get("Cache-Status") != "engine; fwd=uri-miss; fwd-status=200; stored; detail=unverified" {
		t.Fatalf("miss: status %d, digest match %v, Cache-Status %q", resp.StatusCode, got == sum, resp.Header.Get("Cache-Status"))
	}
	get(ts, "/fresh/a.json")
	before := origin()
	for range 3 {
		resp, got = get(ts, "/fresh/big.bin")
		if resp.StatusCode != 200 || got != sum || resp.Header.Get("Cache-Status") != "engine; hit; detail=unverified" || resp.Header.Get("Age") == "" {
			t.Fatalf("hit: status %d, digest match %v, Cache-Status %q, Age %q", resp.StatusCode, got == sum, resp.Header.Get("Cache-Status"), resp.Header.Get("Age"))
		}
	}
	resp, got = get(ts, "/fresh/a.json")
	if l := resp.Header.Values("Link"); len(l) != 0 {
		t.Fatalf("a hit links %q: the object's tree is at a path of the cache's, not the client's", l)
	}
	if got != hexOf(`{"model":"a"}`) || resp.Header.Get("Content-Type") != "application/json" || !strings.HasPrefix(resp.Header.Get("Cache-Control"), "max-age=") {
		t.Fatalf("hit of a.json: digest match %v, Content-Type %q, Cache-Control %q", got == hexOf(`{"model":"a"}`), resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
	}
	// A range and a conditional request of a hit, answered by the file path.
	resp, _ = get(ts, "/fresh/big.bin", "Range", "bytes=1000-1999")
	if resp.StatusCode != 206 || resp.ContentLength != 1000 || resp.Header.Get("Cache-Status") != "engine; hit; detail=unverified" {
		t.Fatalf("range of a hit: status %d, %d bytes", resp.StatusCode, resp.ContentLength)
	}
	etag := resp.Header.Get("ETag")
	if resp, _ = get(ts, "/fresh/big.bin", "If-None-Match", etag); resp.StatusCode != 304 {
		t.Fatalf("If-None-Match %s on a hit: status %d", etag, resp.StatusCode)
	}
	// HTTP/2 hits (the engine over TLS in front of the same cache).
	if n := origin(); n != before {
		t.Fatalf("hits asked the origin %d times", n-before)
	}

	// Not stored: no-store, a request with credentials, a lying digest.
	for _, tc := range []struct{ path, hdr, want string }{
		{"/nostore/a.txt", "", "not for caches"},
		{"/fresh/a.json", "Bearer x", `{"model":"a"}`},
	} {
		n := origin()
		for range 2 {
			var h []string
			if tc.hdr != "" {
				h = []string{"Authorization", tc.hdr}
			}
			if resp, got = get(ts, tc.path, h...); resp.StatusCode != 200 || got != hexOf(tc.want) || resp.Header.Get("Cache-Status") == "engine; hit; detail=unverified" {
				t.Fatalf("%s (%s): status %d, Cache-Status %q", tc.path, tc.hdr, resp.StatusCode, resp.Header.Get("Cache-Status"))
			}
		}
		if m := origin() - n; m != 2 {
			t.Fatalf("%s (%s): the origin was asked %d times for 2 requests; it must not be cached", tc.path, tc.hdr, m)
		}
	}
	// Bytes that do not match the origin's digest: never stored, and the
	// client that streamed them sees its response reset, not ended.
	n0 := origin()
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // Go asks again after a reset on a reused connection
	for range 2 {
		resp, err := fresh.Get(ts.url + "/lie/a.txt")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Fatal("/lie/a.txt: a response whose bytes do not match the origin's digest ended cleanly")
		}
	}
	if m := origin() - n0; m != 2 {
		t.Fatalf("/lie/a.txt: the origin was asked %d times for 2 requests; it must not be cached", m)
	}
	st := ts.Stats()
	if st.EdgeHits != 6 || st.EdgeStored != 2 || st.EdgeIntegrityFailures != 2 || st.EdgeObjects != 2 || st.EdgeOriginBytes < 100<<20 || st.EdgeBytes < 100<<20 {
		t.Fatalf("cache counters: %d hits, %d stored, %d integrity failures, %d objects of %d bytes, %d bytes from the origin; want 6, 2, 2, 2 of 100 MiB and more",
			st.EdgeHits, st.EdgeStored, st.EdgeIntegrityFailures, st.EdgeObjects, st.EdgeBytes, st.EdgeOriginBytes)
	}
	// Past its freshness (1 s): fetched again, then a hit again.
	get(ts, "/short/a.txt")
	time.Sleep(1100 * time.Millisecond)
	n := origin()
	if resp, _ = get(ts, "/short/a.txt"); resp.Header.Get("Cache-Status") == "engine; hit; detail=unverified" || origin() != n+1 {
		t.Fatalf("a stale object: Cache-Status %q, origin requests %d", resp.Header.Get("Cache-Status"), origin()-n)
	}

	// A restart keeps the objects; with the origin down they are still served.
	ts.stop()
	down := start(t, cfg(freeAddr(t)))
	if resp, got = get(down, "/fresh/big.bin"); resp.StatusCode != 200 || got != sum || resp.Header.Get("Cache-Status") != "engine; hit; detail=unverified" {
		t.Fatalf("after a restart, origin down: status %d, digest match %v, Cache-Status %q", resp.StatusCode, got == sum, resp.Header.Get("Cache-Status"))
	}
	// HTTP/2 and HTTP/3 clients of a TLS listener (the key holds the host
	// name: "localhost" here, another object).
	pki := newPKI(t, t.TempDir(), "localhost")
	secure := start(t, tlsProxyConfig(pki, addr, fmt.Sprintf("[cache]\npath = %q\nmin_free = \"1MiB\"\n", t.TempDir()))+
		fmt.Sprintf("upstream_tls = true\nca = %q\ntls_server_name = \"origin.test\"\ncache = true\n", up.caFile))
	h3, _ := h3Client(t, pki)
	for i, c := range []*http.Client{h2Client(pki), h3, h2Client(pki)} {
		r, err := c.Get("https://localhost:" + portOf(secure.addr) + "/fresh/big.bin")
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, r.Body)
		r.Body.Close()
		want := "engine; hit; detail=unverified"
		if i == 0 {
			want = "engine; fwd=uri-miss; fwd-status=200; stored; detail=unverified"
		}
		if r.StatusCode != 200 || hex.EncodeToString(h.Sum(nil)) != sum || r.Header.Get("Cache-Status") != want {
			t.Fatalf("HTTP/%d, request %d: status %d, digest match %v, Cache-Status %q (want %q)", r.ProtoMajor, i+1, r.StatusCode, hex.EncodeToString(h.Sum(nil)) == sum, r.Header.Get("Cache-Status"), want)
		}
	}
}

// TestEdgeCachePurge: POST /cache/purge on the admin listener removes an
// object by its URL, or every object under a URL prefix; the next
// request goes to the origin. Bad requests and browsers are refused.
func TestEdgeCachePurge(t *testing.T) {
	var asked atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprintf(w, "object %s", r.URL.Path)
	}))
	defer origin.Close()
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n[admin]\nlisten = \"127.0.0.1:0\"\n", t.TempDir()),
		strings.TrimPrefix(origin.URL, "http://")))
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(ts.url + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("Cache-Status")
	}
	purge := func(q string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+ts.AdminAddr()+"/cache/purge?"+q, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for _, p := range []string{"/m/a", "/m/b", "/n/c"} {
		get(p)
		if cs := get(p); cs != "engine; hit; detail=unverified" {
			t.Fatalf("%s: Cache-Status %q before purging", p, cs)
		}
	}
	base := "url=" + url.QueryEscape(ts.url)
	if st, body := purge(base + url.QueryEscape("/m/a")); st != 200 || body != `{"purged":1,"fetches":0}` {
		t.Fatalf("purge /m/a: %d %s", st, body)
	}
	if cs := get("/m/a"); !strings.HasPrefix(cs, "engine; fwd=uri-miss") {
		t.Fatalf("/m/a after its purge: Cache-Status %q", cs)
	}
	if cs := get("/m/b"); cs != "engine; hit; detail=unverified" {
		t.Fatalf("/m/b after /m/a's purge: Cache-Status %q", cs)
	}
	if st, body := purge(base + url.QueryEscape("/m/") + "&prefix=true"); st != 200 || body != `{"purged":2,"fetches":0}` {
		t.Fatalf("purge the prefix /m/: %d %s", st, body)
	}
	if cs := get("/n/c"); cs != "engine; hit; detail=unverified" {
		t.Fatalf("/n/c after purging /m/: Cache-Status %q", cs)
	}
	for _, tc := range []struct {
		q    string
		hdr  []string
		want int
	}{
		{"url=/m/b", nil, 400},
		{base + "&prefix=maybe", nil, 400},
		{base + "&prefix=true", []string{"Origin", "https://evil.example"}, 403},
	} {
		if st, body := purge(tc.q, tc.hdr...); st != tc.want {
			t.Errorf("purge?%s %v: %d %s, want %d", tc.q, tc.hdr, st, body, tc.want)
		}
	}
	if cs := get("/n/c"); cs != "engine; hit; detail=unverified" {
		t.Fatalf("/n/c after refused purges: Cache-Status %q", cs)
	}
}

// TestEdgeCacheCollapse: 50 clients of a cold object that the origin
// sends slowly: the origin is asked once, every client streams the bytes
// as they land and gets them all, byte-exact. When the bytes turn out
// not to match the digest the origin stated, every client that streamed
// them sees its response cut, none a clean end, and nothing is stored.
func TestEdgeCacheCollapse(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	os.MkdirAll(root+"/slow", 0o755)
	os.MkdirAll(root+"/lie", 0o755)
	body := make([]byte, 24<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	writeFile(t, root+"/slow/obj.bin", string(body))
	writeFile(t, root+"/lie/obj.bin", string(body))
	writeFile(t, root+"/slow/left.bin", string(body))
	sum := sha256.Sum256(body)
	wrong := sha256.Sum256([]byte("not these bytes"))
	status := freeAddr(t)
	addr := nginxtest.Start(t, fmt.Sprintf(`
    sendfile on;
    server {
        listen %%[2]s;
        root %[1]q;
        location /slow/ { expires 1h; limit_rate 12m; }
        location /lie/ { expires 1h; limit_rate 12m; add_header Repr-Digest "sha-256=:%[3]s:"; }
    }
    server {
        listen %[2]s;
        location = /_status { stub_status; }
    }`, root, status, base64.StdEncoding.EncodeToString(wrong[:])))
	asked := 0
	origin := func() int { return originRequests(t, status, &asked) }
	ts := start(t, proxyConfig(t, "/", fmt.Sprintf("cache = true\nread_timeout = \"30s\"\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", t.TempDir()), addr))

	run := func(path string) (results []string) {
		results = make([]string, 50)
		done := make(chan int, 50)
		fetch := func(i int) {
			defer func() { done <- i }()
			resp, err := http.Get(ts.url + path)
			if err != nil {
				results[i] = "error " + err.Error()
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			switch {
			case err != nil:
				results[i] = fmt.Sprintf("cut after %d bytes (%v)", n, err)
			case !bytes.Equal(h.Sum(nil), sum[:]):
				results[i] = fmt.Sprintf("%d wrong bytes", n)
			default:
				results[i] = "whole " + resp.Header.Get("Cache-Status")
			}
		}
		t0 := time.Now()
		go fetch(0)
		time.Sleep(300 * time.Millisecond) // the first one's fill is under way
		for i := 1; i < 50; i++ {
			go fetch(i)
		}
		for range 50 {
			<-done
		}
		t.Logf("%s: %v", path, time.Since(t0))
		return results
	}
	n := origin()
	res := run("/slow/obj.bin")
	collapsed := 0
	for i, r := range res {
		if !strings.HasPrefix(r, "whole") {
			t.Fatalf("client %d: %s", i, r)
		}
		if strings.Contains(r, "collapsed") {
			collapsed++
		}
	}
	if m := origin() - n; m != 1 || collapsed != 49 {
		t.Fatalf("50 clients of a cold object: the origin was asked %d times, %d clients read the first one's fill; want 1 and 49", m, collapsed)
	}
	if resp, err := http.Get(ts.url + "/slow/obj.bin"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.Header.Get("Cache-Status") != "engine; hit; detail=unverified" {
		t.Fatalf("after the fill: Cache-Status %q", resp.Header.Get("Cache-Status"))
	}

	// The first client goes away after 1 MiB: the fill goes on, for the
	// client that joined it and for the cache.
	resp, err := http.Get(ts.url + "/slow/left.bin")
	if err != nil {
		t.Fatal(err)
	}
	io.CopyN(io.Discard, resp.Body, 1<<20)
	joined := make(chan string, 1)
	go func() {
		r, err := http.Get(ts.url + "/slow/left.bin")
		if err != nil {
			joined <- err.Error()
			return
		}
		defer r.Body.Close()
		h := sha256.New()
		_, err = io.Copy(h, r.Body)
		joined <- fmt.Sprintf("%v %v %s", err, bytes.Equal(h.Sum(nil), sum[:]), r.Header.Get("Cache-Status"))
	}()
	time.Sleep(200 * time.Millisecond)
	resp.Body.Close()
	if got := <-joined; got != "<nil> true engine; fwd=uri-miss; collapsed; fwd-status=200; stored; detail=unverified" {
		t.Fatalf("the client that joined a fill whose first client left: %s", got)
	}
	if !waitFor(10*time.Second, func() bool {
		r, err := http.Get(ts.url + "/slow/left.bin")
		if err != nil {
			return false
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return r.Header.Get("Cache-Status") == "engine; hit; detail=unverified"
	}) {
		t.Fatal("the object whose first client left was not stored")
	}

	res = run("/lie/obj.bin")
	for i, r := range res {
		if !strings.HasPrefix(r, "cut") {
			t.Fatalf("client %d of an object that does not match its digest: %s; want its response cut", i, r)
		}
	}
	if st := ts.Stats(); st.EdgeIntegrityFailures != 1 || st.EdgeStored != 2 {
		t.Fatalf("%d integrity failures, %d stored; want 1 and 2", st.EdgeIntegrityFailures, st.EdgeStored)
	}
}
