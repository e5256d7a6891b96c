package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/internal/testtool"
)

// gatedSite writes a site with a gated prefix, a signing key and
// credentials, and returns its root, the key file and the TOML of its
// [[sites.paths]] and [signing] (for a TLS site named localhost).
func gatedSite(t *testing.T) (root, keyFile, toml string) {
	t.Helper()
	root = siteRoot(t)
	writeFile(t, filepath.Join(root, "gated/llama/a.bin"), strings.Repeat("A", 300_000))
	writeFile(t, filepath.Join(root, "gated/llama/b.bin"), "bbbb")
	writeFile(t, filepath.Join(root, "gated/other.bin"), "other")
	writeFile(t, filepath.Join(root, "basic/x.txt"), "basic file")
	writeFile(t, filepath.Join(root, "bearer/x.txt"), "bearer file")
	writeFile(t, filepath.Join(root, "inner/x.txt"), "inner file")
	writeFile(t, filepath.Join(root, "immutable/ab12.bin"), "content addressed")
	dir := t.TempDir()
	keyFile = filepath.Join(dir, "k1")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("0123456789", 4)), 0o600); err != nil {
		t.Fatal(err)
	}
	bc, _ := bcrypt.GenerateFromPassword([]byte("open sesame"), bcrypt.MinCost)
	users := filepath.Join(dir, "users")
	writeFile(t, users, "alice:"+string(bc)+"\n")
	sum := sha256.Sum256([]byte("tok-1"))
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "ci:sha256:"+hex.EncodeToString(sum[:])+"\n")
	toml = fmt.Sprintf(`hsts = "max-age=600"
directory_listing = true
[[sites.paths]]
prefix = "/gated/"
auth = "signed"
cors_origins = ["https://app.test"]
content_disposition = { "*.bin" = "attachment" }
set_headers = { "X-Gate" = "signed", "Server" = "models" }
types = { ".bin" = "application/x-model" }
[[sites.paths]]
prefix = "/basic/"
auth = "basic"
realm = "Models"
credentials = %q
[[sites.paths]]
prefix = "/bearer/"
auth = "bearer"
credentials = %q
[[sites.paths]]
prefix = "/inner/"
allow = ["127.0.0.2/32"]
[[sites.paths]]
prefix = "/immutable/"
cache_control = "public, max-age=31536000, immutable"
remove_headers = ["Server"]
add_headers = { "X-Added" = "1" }
headers_on_errors = true
`, users, tokens)
	return root, keyFile, toml
}

func startGated(t *testing.T) (*testServer, *testPKI, *policy.Keys, string) {
	t.Helper()
	root, keyFile, paths := gatedSite(t)
	logFile := filepath.Join(t.TempDir(), "access.log")
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, fmt.Sprintf("access_log = %q\n[[sites]]\ndomain = \"localhost\"\nroot = %q\n%s[sites.tls]\ncert = %q\nkey = %q\n[signing]\nkeys = { k1 = %q }\n%s",
		logFile, root, paths, pki.certFile, pki.keyFile, keyFile, ktlsAuto))
	keys, err := policy.LoadKeys(map[string]string{"k1": keyFile})
	if err != nil {
		t.Fatal(err)
	}
	return ts, pki, keys, logFile
}

func signPath(t *testing.T, k *policy.Keys, path string, prefix bool, exp time.Duration) string {
	t.Helper()
	q, err := k.Sign(policy.SignRequest{KeyID: "k1", Path: path, Prefix: prefix, Expires: time.Now().Add(exp)})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

type gatedCase struct {
	name   string
	path   string // with query
	hdr    []string
	status int
	want   map[string]string // fields and values; "" means absent
	body   string
}

// TestGatedResponses: signed URLs, auth and response fields over
// HTTP/1.1, HTTP/2 and HTTP/3, on every kind of response.
func TestGatedResponses(t *testing.T) {
	ts, pki, keys, logFile := startGated(t)
	base := "https://" + ts.addr
	exact := signPath(t, keys, "/gated/llama/a.bin", false, time.Hour)
	prefix := signPath(t, keys, "/gated/llama/", true, time.Hour)
	expired := signPath(t, keys, "/gated/llama/a.bin", false, -2*time.Second)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:open sesame"))
	cases := []gatedCase{
		{"public file", "/alpha.txt", nil, 200, map[string]string{"Cache-Control": "no-cache", "Server": "engine", "Strict-Transport-Security": "max-age=600", "X-Gate": ""}, "abcdefghijklmnopqrstuvwxyz"},
		{"public 404", "/nope", nil, 404, map[string]string{"Cache-Control": "", "Strict-Transport-Security": "max-age=600"}, ""},
		{"unsigned", "/gated/llama/a.bin", nil, 403, map[string]string{"Cache-Control": "private, no-store", "X-Gate": "", "Server": "engine"}, ""},
		{"signed, missing file", "/gated/llama/none.bin?" + prefix, nil, 404, map[string]string{"Cache-Control": "private, no-store"}, ""},
		{"signed", "/gated/llama/a.bin?" + exact, nil, 200, map[string]string{
			"Cache-Control": "private, no-cache", "Content-Disposition": `attachment; filename="a.bin"`, "X-Gate": "signed",
			"Server": "models", "Content-Type": "application/x-model", "Vary": "Origin",
			"Link": "</gated/llama/a.bin.obao?" + exact + `>; rel="blake3-outboard"`}, strings.Repeat("A", 300_000)},
		{"signed, another parameter", "/gated/llama/a.bin?download=1&" + exact, nil, 200, map[string]string{
			"Link": "</gated/llama/a.bin.obao?" + exact + `>; rel="blake3-outboard"`}, strings.Repeat("A", 300_000)},
		{"signed, prefix, another parameter", "/gated/llama/b.bin?" + prefix + "&v=2", nil, 200, map[string]string{
			"Link": "</gated/llama/b.bin.obao?" + prefix + `>; rel="blake3-outboard"`}, "bbbb"},
		{"signed range", "/gated/llama/a.bin?" + exact, []string{"Range", "bytes=10-19"}, 206, map[string]string{"Content-Range": "bytes 10-19/300000", "Cache-Control": "private, no-cache"}, "AAAAAAAAAA"},
		{"signed, other file", "/gated/llama/b.bin?" + exact, nil, 403, nil, ""},
		{"expired", "/gated/llama/a.bin?" + expired, nil, 403, nil, ""},
		{"prefix, shard", "/gated/llama/b.bin?" + prefix, nil, 200, nil, "bbbb"},
		{"prefix, outside", "/gated/other.bin?" + prefix, nil, 403, nil, ""},
		{"prefix, encoded way out", "/gated/llama/%2e%2e/other.bin?" + prefix, nil, 400, nil, ""},
		{"prefix, encoded slash", "/gated%2Fllama/b.bin?" + prefix, nil, 200, nil, "bbbb"},
		{"prefix, listing", "/gated/llama/?" + prefix, nil, 200, map[string]string{"Cache-Control": "private, no-cache", "Content-Disposition": ""}, ""},
		{"cors", "/gated/llama/b.bin?" + prefix, []string{"Origin", "https://app.test"}, 200, map[string]string{
			"Access-Control-Allow-Origin": "https://app.test", "Access-Control-Expose-Headers": "Content-Length, Content-Range, Accept-Ranges, ETag, Repr-Digest, Link"}, "bbbb"},
		{"cors, other origin", "/gated/llama/b.bin?" + prefix, []string{"Origin", "https://evil.test"}, 200, map[string]string{"Access-Control-Allow-Origin": ""}, "bbbb"},
		{"basic, none", "/basic/x.txt", nil, 401, map[string]string{"WWW-Authenticate": `Basic realm="Models", charset="UTF-8"`}, ""},
		{"basic, wrong", "/basic/x.txt", []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:nope"))}, 401, nil, ""},
		{"basic", "/basic/x.txt", []string{"Authorization", basic}, 200, map[string]string{"Cache-Control": "private, no-cache"}, "basic file"},
		{"bearer, none", "/bearer/x.txt", nil, 401, map[string]string{"WWW-Authenticate": `Bearer realm="localhost"`}, ""},
		{"bearer, wrong", "/bearer/x.txt", []string{"Authorization", "Bearer tok-2"}, 401, map[string]string{"WWW-Authenticate": `Bearer realm="localhost", error="invalid_token"`}, ""},
		{"bearer", "/bearer/x.txt", []string{"Authorization", "Bearer tok-1"}, 200, nil, "bearer file"},
		{"address", "/inner/x.txt", nil, 403, nil, ""},
		{"immutable", "/immutable/ab12.bin", nil, 200, map[string]string{"Cache-Control": "public, max-age=31536000, immutable", "Server": "", "X-Added": "1"}, "content addressed"},
		{"immutable 404, headers on errors", "/immutable/none", nil, 404, map[string]string{"X-Added": "1", "Cache-Control": ""}, ""},
	}
	h3, _ := h3Client(t, pki)
	for _, cl := range []struct {
		proto  string
		client *http.Client
	}{{"HTTP/1.1", pki.client(nil)}, {"HTTP/2.0", h2Client(pki)}, {"HTTP/3.0", h3}} {
		for _, tc := range cases {
			t.Run(cl.proto+"/"+tc.name, func(t *testing.T) {
				req, _ := http.NewRequest("GET", base+tc.path, nil)
				req.Host = "localhost"
				for i := 0; i+1 < len(tc.hdr); i += 2 {
					req.Header.Set(tc.hdr[i], tc.hdr[i+1])
				}
				resp, err := cl.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Proto != cl.proto {
					t.Fatalf("protocol %s", resp.Proto)
				}
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
				}
				for k, v := range tc.want {
					if got := strings.Join(resp.Header.Values(k), ", "); got != v {
						t.Errorf("%s: %q, want %q", k, got, v)
					}
				}
				if tc.body != "" && string(body) != tc.body {
					t.Errorf("body %d bytes, want %d", len(body), len(tc.body))
				}
				if tc.status == 200 && tc.body == "" && len(body) == 0 {
					t.Errorf("empty body")
				}
			})
		}
	}
	// The tree a signed file's Link names is served with the same query.
	get := func(url string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = "localhost"
		return pki.client(nil).Do(req)
	}
	resp, err := get(base + "/gated/llama/a.bin.obao?" + exact)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 503 {
		t.Fatalf("tree: %d", resp.StatusCode)
	}
	// A redirect of a gated path (its Location carries the signature) is
	// kept by no cache.
	nr := pki.client(nil)
	nr.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, _ := http.NewRequest("GET", base+"/gated/llama?"+prefix, nil)
	req.Host = "localhost"
	if resp, err = nr.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 301 || resp.Header.Get("Cache-Control") != "private, no-store" {
		t.Fatalf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	// Conditional: a 304 keeps the policy's Cache-Control.
	resp, _ = get(base + "/gated/llama/b.bin?" + prefix)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	req, _ = http.NewRequest("GET", base+"/gated/llama/b.bin?"+prefix, nil)
	req.Host = "localhost"
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	resp, err = pki.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 304 || resp.Header.Get("Cache-Control") != "private, no-cache" {
		t.Fatalf("304: %d %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	// No signature reaches the access log.
	ts.stop()
	log, _ := os.ReadFile(logFile)
	if strings.Contains(string(log), strings.TrimPrefix(exact[strings.Index(exact, "sig="):], "sig=")) {
		t.Fatalf("a signature is in the access log:\n%s", log)
	}
	if !strings.Contains(string(log), "sig=REDACTED") {
		t.Fatalf("no redacted signature in the access log:\n%s", log)
	}
	if strings.Contains(string(log), "open sesame") || strings.Contains(string(log), "tok-1") {
		t.Fatalf("a credential is in the access log")
	}
}

// TestGatedPreflight: a CORS preflight is answered 204 before auth, and
// refused for an origin, method or field the path does not allow.
func TestGatedPreflight(t *testing.T) {
	ts, pki, _, _ := startGated(t)
	for _, tc := range []struct {
		origin, method, fields string
		status                 int
	}{
		{"https://app.test", "GET", "Range, If-None-Match", 204},
		{"https://evil.test", "GET", "", 403},
		{"https://app.test", "DELETE", "", 403},
		{"https://app.test", "GET", "X-Secret", 403},
	} {
		req, _ := http.NewRequest("OPTIONS", "https://"+ts.addr+"/gated/llama/a.bin", nil)
		req.Host = "localhost"
		req.Header.Set("Origin", tc.origin)
		req.Header.Set("Access-Control-Request-Method", tc.method)
		if tc.fields != "" {
			req.Header.Set("Access-Control-Request-Headers", tc.fields)
		}
		resp, err := pki.client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("%+v: status %d", tc, resp.StatusCode)
		}
		if tc.status == 204 && (resp.Header.Get("Access-Control-Allow-Origin") != tc.origin || resp.Header.Get("Access-Control-Allow-Methods") != "GET, HEAD" ||
			resp.Header.Get("Access-Control-Max-Age") != "600" || resp.Header.Get("Content-Length") != "") {
			t.Fatalf("preflight fields: %v", resp.Header)
		}
	}
	// An OPTIONS that is no preflight is still 405 on a file site.
	req, _ := http.NewRequest("OPTIONS", "https://"+ts.addr+"/alpha.txt", nil)
	req.Host = "localhost"
	resp, err := pki.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Fatalf("plain OPTIONS: %d", resp.StatusCode)
	}
}

// TestGatedAddress: allow and deny judge the peer's address, or the one
// a trusted proxy forwarded.
func TestGatedAddress(t *testing.T) {
	root := siteRoot(t)
	writeFile(t, filepath.Join(root, "inner/x.txt"), "inner")
	ts := start(t, fmt.Sprintf(`[[sites]]
domain = "*"
root = %q
[[sites.paths]]
prefix = "/inner/"
allow = ["127.0.0.2/32", "10.0.0.0/8"]
deny = ["10.9.0.0/16"]
[reverse_proxy]
trusted_proxies = ["127.0.0.3"]
`, root))
	get := func(from string, xff string) int {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, n, a string) (net.Conn, error) { return d.DialContext(ctx, n, a) }}}
		req, _ := http.NewRequest("GET", ts.url+"/inner/x.txt", nil)
		for _, line := range strings.Split(xff, "|") { // "|": another field line
			if line != "" {
				req.Header.Add("X-Forwarded-For", line)
			}
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		from, xff string
		want      int
	}{
		{"127.0.0.1", "", 403},
		{"127.0.0.2", "", 200},
		{"127.0.0.1", "127.0.0.2", 403},            // not a trusted proxy: its X-Forwarded-For is not read
		{"127.0.0.3", "10.1.1.1", 200},             // a trusted proxy forwards an allowed client
		{"127.0.0.3", "10.9.1.1", 403},             // denied inside the allowed prefix
		{"127.0.0.3", "10.1.1.1, 127.0.0.3", 200},  // through two trusted hops
		{"127.0.0.3", "192.0.2.1, 10.1.1.1", 200},  // the nearest untrusted hop is the client
		{"127.0.0.3", "junk", 403},                 // unreadable: refused
		{"127.0.0.3", "10.6.6.6|203.0.113.7", 403}, // a second line: the client is its last address
		{"127.0.0.3", "203.0.113.7|10.1.1.1", 200}, // the proxy's own line names an allowed client
		{"127.0.0.3", "10.1.1.1|127.0.0.3", 200},   // through two trusted hops on two lines
	} {
		if got := get(tc.from, tc.xff); got != tc.want {
			t.Errorf("from %s, X-Forwarded-For %q: %d, want %d", tc.from, tc.xff, got, tc.want)
		}
	}
}

// TestGatedProxy: a route's policy on proxied responses: auth before the
// upstream is asked, fields removed, set and added, CORS in place of the
// upstream's.
func TestGatedProxy(t *testing.T) {
	var asked int
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked++
		w.Header().Set("Server", "upstream/1.0")
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("X-Up", "yes")
		io.WriteString(w, "from upstream "+r.URL.RawQuery)
	}))
	defer up.Close()
	sum := sha256.Sum256([]byte("tok-1"))
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, tokens, "ci:sha256:"+hex.EncodeToString(sum[:])+"\n")
	ts := start(t, fmt.Sprintf(`[reverse_proxy]
enabled = true
[[reverse_proxy.routes]]
domain = "*"
path_prefix = "/api/"
upstreams = [%q]
auth = "bearer"
credentials = %q
remove_headers = ["Server"]
set_headers = { "Cache-Control" = "private" }
add_headers = { "X-Edge" = "engine" }
cors_origins = ["https://app.test"]
`, strings.TrimPrefix(up.URL, "http://"), tokens))
	req, _ := http.NewRequest("GET", ts.url+"/api/x?sig=abc", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || asked != 0 {
		t.Fatalf("without a token: %d, upstream asked %d times", resp.StatusCode, asked)
	}
	req.Header.Set("Authorization", "Bearer tok-1")
	req.Header.Set("Origin", "https://app.test")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "from upstream sig=abc" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	for k, v := range map[string]string{"Server": "", "Cache-Control": "private", "X-Edge": "engine", "X-Up": "yes",
		"Access-Control-Allow-Origin": "https://app.test", "Vary": "Origin"} {
		if got := strings.Join(resp.Header.Values(k), ", "); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// TestGatedWebTransport: a WebTransport session's file= is judged by the
// file's policy, as a GET of it: the signed URL's parameters ride in the
// session's query.
func TestGatedWebTransport(t *testing.T) {
	root, keyFile, paths := gatedSite(t)
	pki := newPKI(t, t.TempDir(), "localhost")
	// "*": the client's :authority is the address, its SNI localhost.
	ts := start(t, fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\n%s[sites.tls]\ncert = %q\nkey = %q\n[signing]\nkeys = { k1 = %q }\n%s%s",
		root, paths, pki.certFile, pki.keyFile, keyFile, ktlsAuto, wtConf))
	keys, err := policy.LoadKeys(map[string]string{"k1": keyFile})
	if err != nil {
		t.Fatal(err)
	}
	q := signPath(t, keys, "/gated/llama/a.bin", false, time.Hour)
	if r := wtRun(t, ts, pki, "mode=source&file=/gated/llama/a.bin", "-op", "source"); r.Status != 403 {
		t.Fatalf("unsigned file=: status %d", r.Status)
	}
	if r := wtRun(t, ts, pki, "mode=source&file=/gated/llama/b.bin&"+q, "-op", "source"); r.Status != 403 {
		t.Fatalf("file= another file than the signature's: status %d", r.Status)
	}
	var r *wtResult
	waitFor(scale(20*time.Second), func() bool {
		r = wtRun(t, ts, pki, "mode=source&file=/gated/llama/a.bin&"+q, "-op", "source")
		return r.Status != 503 // the digest is being computed
	})
	if !r.OK || !r.Verified || r.Bytes != 300_000 {
		t.Fatalf("signed file=: %+v", r)
	}
	if r := wtRun(t, ts, pki, "mode=source&file=/basic/x.txt", "-op", "source"); r.Status != 401 {
		t.Fatalf("file= behind basic auth: %d", r.Status)
	}
}

// TestGatedReload: a reload reads the credentials and signing keys
// again: a new password works and the old one stops; a broken file is
// refused and the ones in use stay.
func TestGatedReload(t *testing.T) {
	root := siteRoot(t)
	writeFile(t, filepath.Join(root, "team/x.txt"), "team")
	users := filepath.Join(t.TempDir(), "users")
	bc, _ := bcrypt.GenerateFromPassword([]byte("old"), bcrypt.MinCost)
	writeFile(t, users, "u:"+string(bc)+"\n")
	ts := start(t, fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\n[[sites.paths]]\nprefix = \"/team/\"\nauth = \"basic\"\ncredentials = %q\n", root, users))
	status := func(pass string) int {
		req, _ := http.NewRequest("GET", ts.url+"/team/x.txt", nil)
		req.SetBasicAuth("u", pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status("old") != 200 || status("new") != 401 {
		t.Fatal("before the reload")
	}
	bc, _ = bcrypt.GenerateFromPassword([]byte("new"), bcrypt.MinCost)
	writeFile(t, users, "u:"+string(bc)+"\n")
	if err := ts.Reload(nil); err != nil {
		t.Fatal(err)
	}
	if s := status("new"); s != 200 {
		t.Fatalf("the new password after the reload: %d", s)
	}
	if s := status("old"); s != 401 {
		t.Fatalf("the old password after the reload: %d", s)
	}
	writeFile(t, users, "u:plaintext\n")
	if err := ts.Reload(nil); err == nil || !strings.Contains(err.Error(), "neither bcrypt") {
		t.Fatalf("a broken credentials file: %v", err)
	}
	if s := status("new"); s != 200 {
		t.Fatalf("after a refused reload: %d", s)
	}
}

// TestGatedForward: auth = "forward" on a site's path and on a proxy
// route, over HTTP/1.1, HTTP/2 and HTTP/3: the endpoint's answer lets
// the request through, refuses it, or sends it to a login page.
func TestGatedForward(t *testing.T) {
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Cookie") {
		case "sid=ok":
			w.WriteHeader(200)
		case "":
			http.Redirect(w, r, "https://login.test/", 302)
		default:
			w.WriteHeader(403)
		}
	}))
	defer ep.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	root := siteRoot(t)
	writeFile(t, filepath.Join(root, "sso/x.txt"), "behind sso")
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, fmt.Sprintf(`[[sites]]
domain = "*"
root = %q
[[sites.paths]]
prefix = "/sso/"
auth = "forward"
forward_auth = { url = %q, cache = "0s" }
[sites.tls]
cert = %q
key = %q
[reverse_proxy]
enabled = true
[[reverse_proxy.routes]]
domain = "*"
path_prefix = "/api/"
upstreams = [%q]
auth = "forward"
forward_auth = { url = %q }
%s`, root, ep.URL, pki.certFile, pki.keyFile, strings.TrimPrefix(up.URL, "http://"), ep.URL, ktlsAuto))
	h3, _ := h3Client(t, pki)
	noRedirect := func(c *http.Client) *http.Client {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		return c
	}
	for _, cl := range []struct {
		proto  string
		client *http.Client
	}{{"h1", noRedirect(pki.client(nil))}, {"h2", noRedirect(h2Client(pki))}, {"h3", noRedirect(h3)}} {
		for _, tc := range []struct {
			path, cookie string
			status       int
			body         string
		}{
			{"/sso/x.txt", "sid=ok", 200, "behind sso"},
			{"/sso/x.txt", "", 302, ""},
			{"/sso/x.txt", "sid=bad", 403, ""},
			{"/api/y", "sid=ok", 200, "upstream"},
			{"/api/y", "sid=bad", 403, ""},
		} {
			req, _ := http.NewRequest("GET", "https://"+ts.addr+tc.path, nil)
			req.Host = "localhost"
			if tc.cookie != "" {
				req.Header.Set("Cookie", tc.cookie)
			}
			resp, err := cl.client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", cl.proto, tc.path, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || tc.body != "" && string(body) != tc.body {
				t.Errorf("%s %s cookie %q: %d %q", cl.proto, tc.path, tc.cookie, resp.StatusCode, body)
			}
			if tc.status == 302 && resp.Header.Get("Location") != "https://login.test/" {
				t.Errorf("%s: Location %q", cl.proto, resp.Header.Get("Location"))
			}
		}
	}
}

// TestGatedCurl: curl, as an operator tries it: a signed URL, the same
// without its signature, a range, and a CORS preflight.
func TestGatedCurl(t *testing.T) {
	curl := testtool.Require(t, "curl")
	ts, pki, keys, _ := startGated(t)
	q := signPath(t, keys, "/gated/llama/", true, time.Hour)
	base := "https://localhost:" + ts.addr[strings.LastIndexByte(ts.addr, ':')+1:]
	run := func(args ...string) string {
		args = append([]string{"-sS", "--cacert", pki.caFile, "--resolve", "localhost:" + ts.addr[strings.LastIndexByte(ts.addr, ':')+1:] + ":127.0.0.1",
			"-o", "/dev/null", "-w", "%{http_code} %header{cache-control} %header{access-control-allow-origin}"}, args...)
		out, err := exec.Command(curl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{base + "/gated/llama/a.bin?" + q}, "200 private, no-cache"},
		{[]string{base + "/gated/llama/a.bin"}, "403 private, no-store"},
		{[]string{"-r", "0-99", base + "/gated/llama/a.bin?" + q}, "206 private, no-cache"},
		{[]string{"--http2", base + "/gated/llama/b.bin?" + q}, "200 private, no-cache"},
		{[]string{"-X", "OPTIONS", "-H", "Origin: https://app.test", "-H", "Access-Control-Request-Method: GET", base + "/gated/llama/a.bin"}, "204  https://app.test"},
	} {
		if got := run(tc.args...); got != tc.want {
			t.Errorf("curl %v: %q, want %q", tc.args, got, tc.want)
		}
	}
}
