package engine_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mediaship/engine/internal/s3test"
)

// TestEdgeS3: a cached route in front of a real S3-compatible object
// store (SeaweedFS), its requests signed with credentials from a file:
// 50 clients of a cold 100 MB object take it from one fetch, verified
// against the SHA-256 the store keeps; then it is a hit. A range of a
// cold object, a HEAD, a missing object and the bucket itself are asked
// of the store on their own (signed) or refused; a request that would
// write through the cache's credentials is refused; wrong credentials
// reach the client as the store's refusal.
func TestEdgeS3(t *testing.T) {
	store := s3test.Start(t)
	if err := store.MakeBucket("models"); err != nil {
		t.Fatal(err)
	}
	big := randomBytes(100 << 20)
	small := randomBytes(3 << 20)
	store.Put(t, "models", "llama/weights.bin", big)
	store.Put(t, "models", "llama/config.bin", small)
	store.Put(t, "models", "llama/range.bin", small)
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	os.WriteFile(creds, []byte(fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n", store.AccessKey, store.Secret)), 0o600)
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(wrong, []byte(fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = not-the-secret\n", store.AccessKey)), 0o600)
	cacheDir := t.TempDir()
	conf := func(file string) string {
		return proxyConfig(t, "/", fmt.Sprintf("cache = true\norigin = \"s3\"\ns3_bucket = \"models\"\ns3_credentials = %q\n[cache]\npath = %q\nmin_free = \"1MiB\"\ndefault_ttl = \"1h\"\n", file, cacheDir), store.Addr)
	}
	ts := start(t, conf(creds))

	var wg sync.WaitGroup
	results := make([]string, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(ts.url + "/llama/weights.bin")
			if err != nil {
				results[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			want := sha256.Sum256(big)
			switch {
			case err != nil:
				results[i] = fmt.Sprintf("cut after %d bytes: %v", n, err)
			case !bytes.Equal(h.Sum(nil), want[:]):
				results[i] = fmt.Sprintf("%d wrong bytes", n)
			default:
				results[i] = "whole"
			}
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r != "whole" {
			t.Fatalf("client %d of a cold object: %s", i, r)
		}
	}
	if st := ts.Stats(); st.EdgeOriginBytes != int64(len(big)) || st.EdgeCollapsed != 49 || st.EdgeStored != 1 || st.EdgeIntegrityFailures != 0 {
		t.Fatalf("50 clients of a cold object: %d bytes from the store (want %d), %d collapsed, %d stored", st.EdgeOriginBytes, len(big), st.EdgeCollapsed, st.EdgeStored)
	}
	if resp, b := edgeGet(t, ts.url+"/llama/weights.bin"); !bytes.Equal(b, big) || resp.Header.Get("Cache-Status") != "engine; hit" || resp.Header.Get("Repr-Digest") == "" {
		t.Fatalf("after the fill: bytes match %v, Cache-Status %q, Repr-Digest %q", bytes.Equal(b, big), resp.Header.Get("Cache-Status"), resp.Header.Get("Repr-Digest"))
	}
	if st := ts.Stats(); st.EdgeClientBytes < 51*int64(len(big)) {
		t.Fatalf("%d bytes to clients counted, want at least the 51 objects' %d", st.EdgeClientBytes, 51*len(big))
	}
	verified := "none"
	if metas, _ := filepath.Glob(filepath.Join(cacheDir, "objects", "*", "*.meta")); len(metas) == 1 {
		b, _ := os.ReadFile(metas[0])
		if bytes.Contains(b, []byte(`"verified":"sha-256"`)) {
			verified = "sha-256"
		}
	}
	if verified != "sha-256" {
		t.Fatalf("the object was not verified against the store's x-amz-checksum-sha256")
	}

	// A range of a cold object: from the fill it starts (small here).
	resp, b := edgeGet(t, ts.url+"/llama/range.bin", "Range", "bytes=1000-1999")
	if resp.StatusCode != 206 || !bytes.Equal(b, small[1000:2000]) {
		t.Fatalf("a range of a cold object: status %d, bytes match %v", resp.StatusCode, bytes.Equal(b, small[1000:2000]))
	}
	// HEAD of a cold object: asked on its own, signed.
	req, _ := http.NewRequest("HEAD", ts.url+"/llama/config.bin", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 || resp.ContentLength != int64(len(small)) {
		t.Fatalf("HEAD of a cold object: %v %v", err, resp)
	}
	// A missing object: the store's 404.
	if resp, _ := edgeGet(t, ts.url+"/llama/missing.bin"); resp.StatusCode != 404 {
		t.Fatalf("a missing object: status %d", resp.StatusCode)
	}
	// The bucket itself (a listing) is never asked for.
	if resp, b := edgeGet(t, ts.url+"/"); resp.StatusCode != 404 || bytes.Contains(b, []byte("ListBucketResult")) {
		t.Fatalf("the bucket's root: status %d, %q", resp.StatusCode, b)
	}
	// Nothing is written through the cache's credentials.
	req, _ = http.NewRequest("PUT", ts.url+"/llama/evil.bin", strings.NewReader("evil"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 405 {
		t.Fatalf("PUT through the cache: %v %v", err, resp)
	}
	if resp, err := store.Do("GET", "/models/llama/evil.bin", nil, nil); err != nil || resp.StatusCode != 404 {
		t.Fatalf("the PUT reached the store: %v %v", err, resp)
	}

	// Wrong credentials: the store's refusal, passed on.
	cacheDir = t.TempDir()
	bad := start(t, conf(wrong))
	if resp, _ := edgeGet(t, bad.url+"/llama/config.bin"); resp.StatusCode != 403 {
		t.Fatalf("wrong credentials: status %d, want the store's 403", resp.StatusCode)
	}
}
