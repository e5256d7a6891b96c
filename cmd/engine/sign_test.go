package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/testtool"
)

// signedSite writes a key and a config whose /gated/ prefix needs a
// signed URL, for a server started on root.
func signedSite(t *testing.T, root string) (cfgFile, extra string) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "k1")
	os.WriteFile(key, []byte("abcdefghijklmnopqrstuvwxyz0123456789\n"), 0o600)
	extra = fmt.Sprintf("[[sites]]\ndomain = \"*\"\nroot = %q\n[[sites.paths]]\nprefix = \"/gated/\"\nauth = \"signed\"\n[signing]\nkeys = { k1 = %q }\n", root, key)
	cfgFile = filepath.Join(dir, "engine.toml")
	os.WriteFile(cfgFile, []byte(fmt.Sprintf("root = %q\n%s", root, extra)), 0o644)
	return cfgFile, extra
}

func httpStatus(t *testing.T, u string, hdr ...string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestSign: engine sign prints URLs the server takes, and refuses what it
// cannot sign, saying why.
func TestSign(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "gated/m"), 0o755)
	os.WriteFile(filepath.Join(root, "gated/m/a.bin"), []byte("aaaa"), 0o644)
	os.WriteFile(filepath.Join(root, "gated/m/b c.bin"), []byte("bc"), 0o644)
	cfgFile, extra := signedSite(t, root)
	srv := startServer(t, root, extra)
	base := "http://" + srv.Addr()
	code, out, errs := run2("sign", "-c", cfgFile, "/gated/m/b c.bin", "--expires", "5m", "--base", base)
	if code != 0 || !strings.HasPrefix(out, base+"/gated/m/b%20c.bin?exp=") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	if s := httpStatus(t, strings.TrimSpace(out)); s != 200 {
		t.Fatalf("signed URL: %d", s)
	}
	code, out, _ = run2("sign", "-c", cfgFile, "--prefix", "/gated/m/", "--expires", "1d", "--client-ip", "127.0.0.0/8")
	if code != 0 || !strings.Contains(out, "scope=/gated/m/") || !strings.Contains(out, "ip=127.0.0.0%2F8") {
		t.Fatalf("prefix: exit %d: %s", code, out)
	}
	q := strings.TrimSpace(out[strings.IndexByte(out, '?'):])
	if s := httpStatus(t, base+"/gated/m/a.bin"+q); s != 200 {
		t.Fatalf("prefix-signed shard: %d", s)
	}
	if s := httpStatus(t, base+"/gated/m/a.bin"); s != 403 {
		t.Fatalf("unsigned: %d", s)
	}
	code, out, _ = run2("sign", "-c", cfgFile, "/gated/m/a.bin", "--client-ip", "192.0.2.1")
	if code != 0 {
		t.Fatal(out)
	}
	if s := httpStatus(t, base+strings.TrimSpace(out)); s != 403 {
		t.Fatalf("signed for another address: %d", s)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/gated/../x"}, "is not a path as the site reads it"},
		{[]string{"/gated/m", "--prefix"}, "must end in \"/\""},
		{[]string{"/gated/m/a.bin", "--key-id", "k9"}, "no signing key \"k9\""},
		{[]string{"/gated/m/a.bin", "--expires", "-5m"}, "neither a positive duration"},
		{[]string{"/gated/m/a.bin", "--expires", "2001-01-01T00:00:00Z"}, "not in the future"},
		{[]string{"/gated/m/a.bin", "--client-ip", "nowhere"}, "is not an address or prefix"},
		{[]string{}, "Usage: engine sign"},
	} {
		code, _, errs := run2(append([]string{"sign", "-c", cfgFile}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("sign %v: exit %d, %q; want %q", tc.args, code, errs, tc.want)
		}
	}
	noKeys := filepath.Join(t.TempDir(), "e.toml")
	os.WriteFile(noKeys, []byte(fmt.Sprintf("root = %q\n", root)), 0o644)
	if code, _, errs := run2("sign", "-c", noKeys, "/x"); code != 2 || !strings.Contains(errs, "has no [signing] keys") {
		t.Errorf("no keys: exit %d %q", code, errs)
	}
}

// TestFetchSigned: one signed URL is enough for engine fetch (its ranges
// over several connections, and the tree the file's Link names) and for
// aria2c's ranges; a file of 100 GB (sparse) answers ranges at its end
// to the same URL. Without the signature, nothing is served.
func TestFetchSigned(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "gated"), 0o755)
	want := bigRandom(t, filepath.Join(root, "gated/model.bin"), 48<<20+4321, 3)
	sparse := filepath.Join(root, "gated/huge.bin")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("END"), 100e9-3)
	f.Close()
	cfgFile, extra := signedSite(t, root)
	srv := startServer(t, root, extra)
	base := "http://" + srv.Addr()
	_, q, _ := run2("sign", "-c", cfgFile, "/gated/", "--prefix", "--expires", "10m")
	q = strings.TrimSpace(q)[len("/gated/"):]

	out := filepath.Join(t.TempDir(), "model.bin")
	code, r, errs := fetchJSON(t, base+"/gated/model.bin"+q, "-o", out, "--connections", "4")
	if code != 0 || !r.Verified || fileDigest(t, out) != want {
		t.Fatalf("signed fetch: exit %d\n%s\n%+v", code, errs, r)
	}
	out2 := filepath.Join(t.TempDir(), "model.bin")
	if code, _, _ := fetchJSON(t, base+"/gated/model.bin", "-o", out2); code == 0 {
		t.Fatal("an unsigned fetch succeeded")
	}

	// aria2c: four connections, each asking its own ranges of the one URL.
	aria := testtool.Require(t, "aria2c")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, aria, "-q", "-x4", "-s4", "-k1M", "--allow-overwrite=true", "-d", dir, "-o", "m.bin", base+"/gated/model.bin"+q)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("aria2c: %v\n%s", err, b)
	}
	if got, wantSum := sha256Of(t, filepath.Join(dir, "m.bin")), sha256Of(t, filepath.Join(root, "gated/model.bin")); got != wantSum {
		t.Fatalf("aria2c's copy: %s, want %s", got, wantSum)
	}

	// 100 GB: ranges at its start and end.
	for rng, body := range map[string]string{"bytes=0-2": "\x00\x00\x00", "bytes=99999999997-": "END", "bytes=-3": "END"} {
		req, _ := http.NewRequest("GET", base+"/gated/huge.bin"+q, nil)
		req.Header.Set("Range", rng)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 206 || string(b) != body {
			t.Fatalf("range %s: %d %q", rng, resp.StatusCode, b)
		}
	}
	if s := httpStatus(t, base+"/gated/huge.bin", "Range", "bytes=-3"); s != 403 {
		t.Fatalf("an unsigned range: %d", s)
	}
}

func sha256Of(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return fmt.Sprintf("%x", h.Sum(nil))
}
