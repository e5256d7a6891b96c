package engine_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mediaship/engine/integrity"
)

// seededFile writes n random bytes to path and returns them.
func seededFile(t *testing.T, path string, n int, seed byte) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// fetch GETs url with the extra header fields (name, value, ...) and
// returns the response with its body read.
func fetch(t *testing.T, url string, fields ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	c := &http.Client{Timeout: scale(20 * time.Second)}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// fetchMaybe is fetch that returns a failed transfer instead of failing
// the test.
func fetchMaybe(url string) (*http.Response, []byte, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// treeOf waits until url (a file's .obao) answers 200 (the file is hashed
// in the background, 503 meanwhile) and returns the tree.
func treeOf(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	var resp *http.Response
	var body []byte
	if !waitFor(scale(20*time.Second), func() bool {
		resp, body = fetch(t, url)
		if resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "" {
			t.Errorf("503 for %s without Retry-After", url)
		}
		return resp.StatusCode != 503
	}) {
		t.Fatalf("%s: still 503", url)
	}
	return resp, body
}

// checkTree checks that tree is the outboard of data under data's BLAKE3,
// group by group, and that the response carries its own digest.
func checkTree(t *testing.T, resp *http.Response, tree, data []byte) {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("tree: status %d, want 200", resp.StatusCode)
	}
	own, _, _ := integrity.Sum(bytes.NewReader(tree))
	if got := resp.Header.Get("Repr-Digest"); got != own.HeaderValue() {
		t.Errorf("tree's Repr-Digest %q, want its own BLAKE3 %q", got, own.HeaderValue())
	}
	root, _, _ := integrity.Sum(bytes.NewReader(data))
	o, err := integrity.ParseOutboard(tree, root, int64(len(data)))
	if err != nil {
		t.Fatalf("tree of %d bytes: %v", len(tree), err)
	}
	for i := range o.Groups() {
		off, n := o.Group(i)
		if err := o.Verify(i, data[off:off+n]); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
}

// TestOutboard: a file's responses link to its outboard tree, which the
// engine serves at the file's path + ".obao" (a 503 with Retry-After until
// the file is hashed): with its own Repr-Digest, ranges, and always the
// tree of the file's current bytes, never a stale sidecar of that name
// on disk. A tree removed from the state directory is written again.
func TestOutboard(t *testing.T) {
	root := t.TempDir()
	state := t.TempDir()
	big := seededFile(t, filepath.Join(root, "big.bin"), 3*integrity.GroupSize+12345, 1)
	spaced := seededFile(t, filepath.Join(root, "sub/a b.bin"), integrity.GroupSize+1, 2)
	small := seededFile(t, filepath.Join(root, "small.txt"), 1000, 3)
	// A stale sidecar by the tree's name: the engine's own tree wins.
	writeFile(t, filepath.Join(root, "big.bin.obao"), "stale sidecar, not a tree")
	ts := start(t, fmt.Sprintf("root = %q\n[integrity]\nstate_dir = %q\n", root, state))

	resp, body := fetch(t, ts.url+"/big.bin")
	if !bytes.Equal(body, big) {
		t.Fatal("file body differs")
	}
	if got, want := resp.Header.Get("Link"), `</big.bin.obao>; rel="blake3-outboard"`; got != want {
		t.Errorf("Link %q, want %q", got, want)
	}
	if resp, _ := fetch(t, ts.url+"/sub/a%20b.bin", "Range", "bytes=0-0"); resp.Header.Get("Link") != `</sub/a%20b.bin.obao>; rel="blake3-outboard"` {
		t.Errorf("Link of a spaced name: %q", resp.Header.Get("Link"))
	}

	resp, tree := treeOf(t, ts.url+"/big.bin.obao")
	checkTree(t, resp, tree, big)
	if len(tree) != int(integrity.OutboardSize(int64(len(big)))) {
		t.Fatalf("tree of %d bytes, want %d", len(tree), integrity.OutboardSize(int64(len(big))))
	}
	if resp.Header.Get("ETag") == "" || resp.Header.Get("Link") != "" {
		t.Errorf("tree's ETag %q (want one), Link %q (want none)", resp.Header.Get("ETag"), resp.Header.Get("Link"))
	}
	resp, part := fetch(t, ts.url+"/big.bin.obao", "Range", "bytes=8-71")
	if resp.StatusCode != 206 || !bytes.Equal(part, tree[8:72]) {
		t.Errorf("tree range: status %d, %d bytes", resp.StatusCode, len(part))
	}
	resp, again := fetch(t, ts.url+"/big.bin.obao", "If-None-Match", resp.Header.Get("ETag"))
	if resp.StatusCode != 304 || len(again) != 0 {
		t.Errorf("tree with its ETag: status %d", resp.StatusCode)
	}
	resp, tree = treeOf(t, ts.url+"/sub/a%20b.bin.obao")
	checkTree(t, resp, tree, spaced)

	// A file of one group: its tree is its size, 8 bytes.
	resp, tree = treeOf(t, ts.url+"/small.txt.obao")
	checkTree(t, resp, tree, small)
	if len(tree) != 8 || binary.LittleEndian.Uint64(tree) != 1000 {
		t.Errorf("tree of a small file: %x", tree)
	}
	// No file, no tree; a directory has none either, nor a path that
	// names a directory.
	for _, p := range []string{"/none.bin.obao", "/sub.obao", "/sub/.obao", "/big.bin.obao/"} {
		if resp, _ := fetch(t, ts.url+p); resp.StatusCode != 404 {
			t.Errorf("%s: status %d, want 404", p, resp.StatusCode)
		}
	}

	// The tree removed from the state directory: written again.
	sum, _, _ := integrity.Sum(bytes.NewReader(big))
	treePath := filepath.Join(state, "outboard", fmt.Sprintf("%x.obao", sum[:]))
	if err := os.Remove(treePath); err != nil {
		t.Fatalf("the tree is not where the state directory keeps it: %v", err)
	}
	resp, tree = treeOf(t, ts.url+"/big.bin.obao")
	checkTree(t, resp, tree, big)
}

// TestRewrittenInPlace: bytes rewritten in place with the size and the
// modification time kept (rsync --inplace -t, builds that normalise
// mtimes) get a new digest, ETag and tree; the old ETag no longer matches.
func TestRewrittenInPlace(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "model.bin")
	old := seededFile(t, path, 2*integrity.GroupSize+7, 4)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := start(t, fmt.Sprintf("root = %q\n", root))
	oldSum, _, _ := integrity.Sum(bytes.NewReader(old))
	if got := reprDigest(t, ts.addr, "/model.bin"); got != oldSum.HeaderValue() {
		t.Fatalf("Repr-Digest %q, want %q", got, oldSum.HeaderValue())
	}
	resp, _ := fetch(t, ts.url+"/model.bin")
	oldETag := resp.Header.Get("ETag")
	resp, tree := treeOf(t, ts.url+"/model.bin.obao")
	checkTree(t, resp, tree, old)

	fresh := bytes.Clone(old)
	rand.NewChaCha8([32]byte{5}).Read(fresh[100:200])
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(fresh[100:200], 100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.Stat(path); now.Size() != st.Size() || !now.ModTime().Equal(st.ModTime()) {
		t.Fatal("size or mtime not kept")
	}
	freshSum, _, _ := integrity.Sum(bytes.NewReader(fresh))
	var got string
	if !waitFor(scale(20*time.Second), func() bool {
		// Until the engine has seen the change, a response may start
		// under the old digest: it must then fail, never end cleanly.
		resp, body, err := fetchMaybe(ts.url + "/model.bin")
		if err != nil {
			return false
		}
		got = resp.Header.Get("Repr-Digest")
		if got == oldSum.HeaderValue() && !bytes.Equal(body, old) {
			t.Errorf("bytes other than the digest's delivered cleanly under the old digest")
		}
		return got == freshSum.HeaderValue()
	}) {
		t.Fatalf("Repr-Digest %q after the rewrite, want %q", got, freshSum.HeaderValue())
	}
	if resp, _ := fetch(t, ts.url+"/model.bin", "If-None-Match", oldETag); resp.StatusCode != 200 {
		t.Errorf("the old ETag: status %d, want 200 (new bytes)", resp.StatusCode)
	}
	resp, tree = treeOf(t, ts.url+"/model.bin.obao")
	checkTree(t, resp, tree, fresh)
}

// TestSHA256: with digests = ["blake3", "sha-256"], a file's Repr-Digest
// carries both members, computed in one read; Want-Repr-Digest picks one.
func TestSHA256(t *testing.T) {
	root := t.TempDir()
	data := seededFile(t, filepath.Join(root, "f.bin"), 3*integrity.GroupSize+1, 6)
	ts := start(t, fmt.Sprintf("root = %q\n[integrity]\ndigests = [\"blake3\", \"sha-256\"]\n", root))
	b3, _, _ := integrity.Sum(bytes.NewReader(data))
	sha := integrity.SHA256(sha256.Sum256(data))
	both := b3.HeaderValue() + ", " + sha.HeaderValue()
	if got := reprDigest(t, ts.addr, "/f.bin"); got != both {
		t.Fatalf("Repr-Digest %q, want %q", got, both)
	}
	for _, tt := range []struct{ want, got string }{
		{"sha-256=1", sha.HeaderValue()},
		{"blake3=1", b3.HeaderValue()},
		{"sha-256=9, blake3=1", both},
		{"md5=1", ""},
	} {
		resp, _ := fetch(t, ts.url+"/f.bin", "Want-Repr-Digest", tt.want, "Range", "bytes=0-0")
		if got := resp.Header.Get("Repr-Digest"); got != tt.got {
			t.Errorf("Want-Repr-Digest %q: Repr-Digest %q, want %q", tt.want, got, tt.got)
		}
	}
	// The tree is there too: one read gave all three.
	resp, tree := treeOf(t, ts.url+"/f.bin.obao")
	if resp.StatusCode != 200 {
		t.Fatalf("tree: %d", resp.StatusCode)
	}
	if _, err := integrity.ParseOutboard(tree, b3, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if st := ts.Stats(); st.FilesHashed != 1 {
		t.Errorf("the file was read %d times for its digests, want once", st.FilesHashed)
	}
}

// TestOutboardKept: trees and digests outlive a restart (the state
// directory): the next server serves them without reading the file
// again. A tree damaged in place (its size kept) is found out before it
// is served, and written again.
func TestOutboardKept(t *testing.T) {
	root, state := t.TempDir(), t.TempDir()
	big := seededFile(t, filepath.Join(root, "big.bin"), 5*integrity.GroupSize+3, 7)
	conf := fmt.Sprintf("root = %q\n[integrity]\nstate_dir = %q\n", root, state)
	ts := start(t, conf)
	resp, tree := treeOf(t, ts.url+"/big.bin.obao")
	checkTree(t, resp, tree, big)
	ts.stop()

	ts2 := start(t, conf)
	resp, tree2 := fetch(t, ts2.url+"/big.bin.obao")
	checkTree(t, resp, tree2, big)
	if st := ts2.Stats(); st.FilesHashed != 0 {
		t.Errorf("after a restart the file was hashed %d times, want 0: its digest and tree were kept", st.FilesHashed)
	}

	sum, _, _ := integrity.Sum(bytes.NewReader(big))
	treePath := filepath.Join(state, "outboard", fmt.Sprintf("%x.obao", sum[:]))
	f, err := os.OpenFile(treePath, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("damaged"), 20)
	f.Close()
	var got []byte
	if !waitFor(scale(20*time.Second), func() bool {
		resp, body, err := fetchMaybe(ts2.url + "/big.bin.obao")
		if err != nil || resp.StatusCode != 200 {
			return false
		}
		got = body
		_, err = integrity.ParseOutboard(body, sum, int64(len(big)))
		if err != nil {
			t.Errorf("a damaged tree was served: %v", err)
		}
		return err == nil
	}) {
		t.Fatalf("no sound tree after the damage (last %d bytes)", len(got))
	}
}
