package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/integrity"
)

func b3(t *testing.T, path string) integrity.Digest {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, _, err := integrity.Sum(f)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// reprDigest fetches path until its Repr-Digest appears (hashing runs in
// the background after the first request) and returns it.
func reprDigest(t *testing.T, addr, path string) string {
	t.Helper()
	got := ""
	waitFor(scale(10*time.Second), func() bool {
		c := dial(t, addr)
		c.send(get(path))
		resp, _ := c.response("GET")
		got = resp.Header.Get("Repr-Digest")
		return got != ""
	})
	return got
}

// TestReprDigest: once hashed, every response for a file carries the
// digest of the whole file (full, range, HEAD, 304), and the ETag is
// derived from it. The first response is not delayed for hashing.
func TestReprDigest(t *testing.T) {
	root := siteRoot(t)
	big, _ := linkBig(t, root, "big.bin")
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	want := b3(t, big).HeaderValue()

	c := dial(t, ts.addr)
	c.send(get("/big.bin", "Range: bytes=0-0\r\n"))
	if resp, _ := c.response("GET"); resp.Header.Get("Repr-Digest") != "" {
		t.Log("digest already known (a previous test hashed this inode)")
	}
	if got := reprDigest(t, ts.addr, "/big.bin"); got != want {
		t.Fatalf("Repr-Digest %q, want %q", got, want)
	}
	c = dial(t, ts.addr)
	c.send(get("/big.bin", "Range: bytes=1000-1999\r\n"))
	resp, _ := c.response("GET")
	etag := resp.Header.Get("ETag")
	tests := []struct {
		name, req, method string
		status            int
	}{
		{"range", get("/big.bin", "Range: bytes=5-9\r\n"), "GET", 206},
		{"multi-range", get("/big.bin", "Range: bytes=5-9,100-200\r\n"), "GET", 206},
		{"head", "HEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD", 200},
		{"304", get("/big.bin", "If-None-Match: "+etag+"\r\n"), "GET", 304},
		{"want blake3", get("/big.bin", "Want-Repr-Digest: blake3=3, sha-256=1\r\nRange: bytes=0-0\r\n"), "GET", 206},
	}
	for _, tt := range tests {
		c.send(tt.req)
		resp, _ := c.response(tt.method)
		if resp.StatusCode != tt.status || resp.Header.Get("Repr-Digest") != want {
			t.Errorf("%s: status %d Repr-Digest %q; want %d %q", tt.name, resp.StatusCode, resp.Header.Get("Repr-Digest"), tt.status, want)
		}
	}
	if !strings.HasPrefix(etag, `"b3-`) {
		t.Errorf("ETag %q not derived from the digest", etag)
	}
	// Refused by Want-Repr-Digest: no header.
	for _, w := range []string{"blake3=0", "sha-256=5", "sha-512=1, *=0"} {
		c.send(get("/big.bin", "Want-Repr-Digest: "+w+"\r\nRange: bytes=0-0\r\n"))
		if resp, _ := c.response("GET"); resp.Header.Get("Repr-Digest") != "" {
			t.Errorf("Want-Repr-Digest: %s still got a digest", w)
		}
	}
	if st := ts.Stats(); st.FilesHashed < 1 || st.BytesHashed < 100<<20 {
		t.Logf("hashed %d files, %d bytes", st.FilesHashed, st.BytesHashed)
	}
}

// TestDigestFollowsChanges: a file rewritten in place, or replaced by
// rename, gets a new digest; the old one is never served for new bytes.
func TestDigestFollowsChanges(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "model.bin")
	writeFile(t, p, strings.Repeat("version one ", 1000))
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	if got, want := reprDigest(t, ts.addr, "/model.bin"), b3(t, p).HeaderValue(); got != want {
		t.Fatalf("v1: %q, want %q", got, want)
	}
	// In place, same size.
	f, _ := os.OpenFile(p, os.O_WRONLY, 0)
	f.WriteAt([]byte("VERSION"), 0)
	f.Close()
	want2 := b3(t, p).HeaderValue()
	if !waitFor(scale(10*time.Second), func() bool { return reprDigest(t, ts.addr, "/model.bin") == want2 }) {
		t.Errorf("after an in-place rewrite: %q, want %q", reprDigest(t, ts.addr, "/model.bin"), want2)
	}
	// Replaced by rename.
	tmp := filepath.Join(root, ".model.tmp")
	writeFile(t, tmp, "version three")
	os.Rename(tmp, p)
	want3 := b3(t, p).HeaderValue()
	if !waitFor(scale(10*time.Second), func() bool { return reprDigest(t, ts.addr, "/model.bin") == want3 }) {
		t.Errorf("after a rename: %q, want %q", reprDigest(t, ts.addr, "/model.bin"), want3)
	}
}

// TestRequireDigest: a site that requires digests answers 503 with
// Retry-After until the file is hashed, then serves it with the digest.
func TestRequireDigest(t *testing.T) {
	root := siteRoot(t)
	big, _ := linkBig(t, root, "artifact.bin")
	writeFile(t, filepath.Join(root, "fresh.bin"), "fresh bytes")
	ts := start(t, fmt.Sprintf("root = %q\n[integrity]\nmode = \"require\"\n", root))
	c := dial(t, ts.addr)
	c.send(get("/fresh.bin"))
	resp, _ := c.response("GET")
	if resp.StatusCode == 503 {
		if resp.Header.Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
	} else if resp.Header.Get("Repr-Digest") == "" {
		t.Errorf("status %d without a digest under mode = require", resp.StatusCode)
	}
	ok := waitFor(scale(20*time.Second), func() bool {
		c := dial(t, ts.addr)
		c.send(get("/artifact.bin", "Range: bytes=0-0\r\n"))
		resp, _ := c.response("GET")
		return resp.StatusCode == 206 && resp.Header.Get("Repr-Digest") == b3(t, big).HeaderValue()
	})
	if !ok {
		t.Error("never served with a digest")
	}
}

// TestManifest: a B3SUMS at the site root is trusted for files older than
// it (the digest is served at once, nothing is hashed); a file changed
// after it is hashed and a contradiction is logged and handled by policy.
func TestManifest(t *testing.T) {
	for _, policy := range []string{"serve", "refuse"} {
		t.Run(policy, func(t *testing.T) {
			root := t.TempDir()
			writeFile(t, filepath.Join(root, "good.bin"), "published bytes")
			writeFile(t, filepath.Join(root, "tampered.bin"), "published bytes too")
			var es []integrity.Entry
			for _, n := range []string{"good.bin", "tampered.bin"} {
				es = append(es, integrity.Entry{Digest: b3(t, filepath.Join(root, n)), Path: n})
			}
			mf, _ := os.Create(filepath.Join(root, "B3SUMS"))
			integrity.WriteManifest(mf, es)
			mf.Close()
			past := time.Now().Add(-time.Hour)
			os.Chtimes(filepath.Join(root, "good.bin"), past, past)
			// Tampered after the manifest was written.
			time.Sleep(10 * time.Millisecond)
			writeFile(t, filepath.Join(root, "tampered.bin"), "other bytes!")
			var logs syncBuffer
			ts := startLog(t, fmt.Sprintf("root = %q\n[integrity]\non_mismatch = %q\n", root, policy), &logs)

			c := dial(t, ts.addr)
			c.send(get("/good.bin"))
			resp, _ := c.response("GET")
			if resp.Header.Get("Repr-Digest") != es[0].Digest.HeaderValue() {
				t.Errorf("trusted manifest entry not served at once: %q", resp.Header.Get("Repr-Digest"))
			}
			c.send(get("/tampered.bin"))
			c.response("GET")
			if !waitFor(scale(10*time.Second), func() bool { return ts.Stats().ManifestMismatches == 1 }) {
				t.Fatal("mismatch not detected")
			}
			if !waitFor(scale(3*time.Second), func() bool {
				return strings.Contains(logs.String(), "FILE DOES NOT MATCH THE MANIFEST") && strings.Contains(logs.String(), "tampered.bin")
			}) {
				t.Errorf("mismatch not logged:\n%s", logs.String())
			}
			c.send(get("/tampered.bin"))
			resp, body := c.response("GET")
			switch policy {
			case "serve":
				if resp.StatusCode != 200 || string(body) != "other bytes!" ||
					resp.Header.Get("Repr-Digest") != b3(t, filepath.Join(root, "tampered.bin")).HeaderValue() {
					t.Errorf("serve policy: %d %q %q", resp.StatusCode, body, resp.Header.Get("Repr-Digest"))
				}
			case "refuse":
				if resp.StatusCode != 500 {
					t.Errorf("refuse policy: status %d", resp.StatusCode)
				}
			}
			if ts.Stats().FilesHashed != 1 {
				t.Errorf("hashed %d files, want 1 (the trusted one is not hashed)", ts.Stats().FilesHashed)
			}
		})
	}
}

// TestDigestCachePersists: a restart with [integrity] cache loads the
// digests, so nothing is hashed again.
func TestDigestCachePersists(t *testing.T) {
	root := siteRoot(t)
	big, _ := linkBig(t, root, "big.bin")
	cache := filepath.Join(t.TempDir(), "digests")
	cfg := fmt.Sprintf("root = %q\n[integrity]\ncache = %q\n", root, cache)
	ts := start(t, cfg)
	reprDigest(t, ts.addr, "/big.bin")
	ts.stop()
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("cache not saved: %v", err)
	}
	ts2 := start(t, cfg)
	c := dial(t, ts2.addr)
	c.send(get("/big.bin", "Range: bytes=0-0\r\n"))
	resp, _ := c.response("GET")
	if resp.Header.Get("Repr-Digest") != b3(t, big).HeaderValue() {
		t.Errorf("after a restart the first response has %q", resp.Header.Get("Repr-Digest"))
	}
	if ts2.Stats().FilesHashed != 0 {
		t.Errorf("hashed %d files after a restart", ts2.Stats().FilesHashed)
	}
}
