package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/engine"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/internal/testtool"
)

func run2(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDigestCommand(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a.bin"), bytes.Repeat([]byte("a"), 5000), 0o644)
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.WriteFile(filepath.Join(root, "sub", "b c.txt"), []byte("b"), 0o644)
	os.WriteFile(filepath.Join(root, "new\nline"), []byte("n"), 0o644)

	code, out, errs := run2("digest", "--root", root)
	if code != 0 || strings.Count(out, "\n") != 3 {
		t.Fatalf("digest: %d\n%s\n%s", code, out, errs)
	}
	// The reference: b3sum's own lines for the same files, escapes
	// included.
	t.Run("b3sum", func(t *testing.T) {
		cmd := exec.Command(testtool.Require(t, "b3sum"), "--", "a.bin", "new\nline", "sub/b c.txt")
		cmd.Dir = root
		want, err := cmd.Output()
		if err != nil {
			t.Fatalf("b3sum: %v", err)
		}
		if out != string(want) {
			t.Errorf("engine digest and b3sum differ:\n%s\n%s", out, want)
		}
	})
	mf := filepath.Join(root, "B3SUMS")
	if code, _, errs := run2("digest", "--root", root, "-o", mf); code != 0 {
		t.Fatalf("digest -o: %d %s", code, errs)
	}
	written, _ := os.ReadFile(mf)
	if string(written) != out {
		t.Errorf("-o wrote %q, want %q (the manifest itself left out)", written, out)
	}
	if code, out, _ := run2("digest", "--root", root, "--check", mf); code != 0 || !strings.Contains(out, "all 3 files match") {
		t.Errorf("check of an unchanged tree: %d %s", code, out)
	}
	os.WriteFile(filepath.Join(root, "a.bin"), bytes.Repeat([]byte("a"), 4999), 0o644)
	os.Remove(filepath.Join(root, "sub", "b c.txt"))
	code, out, _ = run2("digest", "--root", root, "--check", mf)
	if code != 1 || !strings.Contains(out, "FAILED a.bin: blake3") || !strings.Contains(out, "FAILED sub/b c.txt: missing") ||
		!strings.Contains(out, "2 of 3 files FAILED") {
		t.Errorf("check of a changed tree: %d\n%s", code, out)
	}
	os.WriteFile(mf, []byte("not a manifest\n"), 0o644)
	if code, _, errs := run2("digest", "--root", root, "--check", mf); code != 2 || !strings.Contains(errs, "line 1") {
		t.Errorf("malformed manifest: %d %s", code, errs)
	}
	if code, _, _ := run2("digest", "--root", filepath.Join(root, "nope")); code != 2 {
		t.Errorf("missing root: %d", code)
	}
}

// TestDigestOutboard: engine digest --outboard writes every file's tree
// beside it (FILE.obao), each the tree of the digest the manifest lists,
// and leaves the sidecars out of the manifest, on the first run and the
// next one alike.
func TestDigestOutboard(t *testing.T) {
	root := t.TempDir()
	files := map[string][]byte{
		"big.bin":       bytes.Repeat([]byte("0123456789"), (3*integrity.GroupSize+5)/10),
		"sub/small.txt": []byte("small"),
		"empty":         nil,
	}
	for name, b := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
		os.WriteFile(filepath.Join(root, name), b, 0o644)
	}
	mf := filepath.Join(root, "B3SUMS")
	for run := 1; run <= 2; run++ {
		code, _, errs := run2("digest", "--root", root, "--outboard", "-o", mf)
		if code != 0 || !strings.Contains(errs, "3 files (and 3 outboard trees)") {
			t.Fatalf("run %d: digest --outboard: %d\n%s", run, code, errs)
		}
		f, err := os.Open(mf)
		if err != nil {
			t.Fatal(err)
		}
		entries, err := integrity.ReadManifest(f)
		f.Close()
		if err != nil || len(entries) != len(files) {
			t.Fatalf("run %d: manifest of %d entries (%v), want %d: the sidecars must not be listed", run, len(entries), err, len(files))
		}
		for _, e := range entries {
			data := files[e.Path]
			tree, err := os.ReadFile(filepath.Join(root, e.Path+".obao"))
			if err != nil {
				t.Fatalf("run %d: %s: no tree beside it: %v", run, e.Path, err)
			}
			o, err := integrity.ParseOutboard(tree, e.Digest, int64(len(data)))
			if err != nil {
				t.Fatalf("run %d: %s.obao: %v", run, e.Path, err)
			}
			for i := range o.Groups() {
				off, n := o.Group(i)
				if err := o.Verify(i, data[off:off+n]); err != nil {
					t.Fatalf("run %d: %s: %v", run, e.Path, err)
				}
			}
		}
		left, _ := filepath.Glob(filepath.Join(root, ".*tmp-*"))
		if len(left) > 0 {
			t.Errorf("run %d: temporary files left: %v", run, left)
		}
	}
	if code, _, _ := run2("digest", "--root", root, "--outboard", "--check", mf); code != 2 {
		t.Errorf("--outboard with --check: exit %d, want 2 (usage)", code)
	}
}

// TestDigestSHA256: engine digest --sha256 writes a SHA256SUMS that
// sha256sum itself checks, from the same read as the BLAKE3 manifest,
// and leaves both manifests out of the tree.
func TestDigestSHA256(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.WriteFile(filepath.Join(root, "a.bin"), bytes.Repeat([]byte("a"), 300000), 0o644)
	os.WriteFile(filepath.Join(root, "sub", "b c.txt"), []byte("b"), 0o644)
	os.WriteFile(filepath.Join(root, "back\\slash"), []byte("c"), 0o644)
	code, _, errs := run2("digest", "--root", root, "-o", filepath.Join(root, "B3SUMS"), "--sha256", filepath.Join(root, "SHA256SUMS"))
	if code != 0 {
		t.Fatalf("digest --sha256: %d %s", code, errs)
	}
	written, _ := os.ReadFile(filepath.Join(root, "SHA256SUMS"))
	if strings.Count(string(written), "\n") != 3 || strings.Contains(string(written), "SUMS") {
		t.Fatalf("SHA256SUMS:\n%s", written)
	}
	cmd := exec.Command("sha256sum", "--strict", "-c", "SHA256SUMS")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	if code, _, _ := run2("digest", "--root", root, "--sha256", filepath.Join(root, "S"), "--check", filepath.Join(root, "B3SUMS")); code != 2 {
		t.Errorf("--sha256 with --check: exit %d, want 2", code)
	}
}

// badServer serves body with the given headers, optionally lying.
func badServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(h))
	t.Cleanup(s.Close)
	return s.URL
}

func TestVerifyCommand(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	sum, _, _ := integrity.Sum(bytes.NewReader(body))
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f.bin"), body, 0o644)
	mf := filepath.Join(dir, "B3SUMS")
	f, _ := os.Create(mf)
	integrity.WriteManifest(f, []integrity.Entry{{Digest: sum, Path: "f.bin"}})
	f.Close()

	serve := func(b []byte, header string, length int, cut bool) string {
		return badServer(t, func(w http.ResponseWriter, r *http.Request) {
			if header != "" {
				w.Header().Set("Repr-Digest", header)
			}
			w.Header().Set("Content-Length", strconv.Itoa(length))
			if rg := r.Header.Get("Range"); rg != "" {
				var a, z int
				fmt.Sscanf(rg, "bytes=%d-%d", &a, &z)
				w.Header().Set("Content-Length", strconv.Itoa(z-a+1))
				w.WriteHeader(206)
				w.Write(b[a : z+1])
				return
			}
			if cut {
				w.Write(b[:len(b)/2])
				panic(http.ErrAbortHandler) // the connection closes early
			}
			w.Write(b)
		})
	}
	corrupt := bytes.Clone(body)
	corrupt[123456] ^= 1
	good := serve(body, sum.HeaderValue(), len(body), false)
	_, goodPort, _ := net.SplitHostPort(strings.TrimPrefix(good, "http://"))
	sha := integrity.SHA256(sha256.Sum256(body))
	shaHex := sha.String()
	// A server that links trees but never hashes.
	linking := badServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", `</f.bin.obao>; rel="blake3-outboard"`)
		http.ServeContent(w, r, "f.bin", time.Time{}, bytes.NewReader(body))
	})
	// The corrupted copy beside the manifest, under the name it lists.
	cdir := t.TempDir()
	corruptFile := filepath.Join(cdir, "f.bin")
	os.WriteFile(corruptFile, corrupt, 0o644)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"ok by Repr-Digest", []string{good + "/f.bin"}, 0, "OK    " + good + "/f.bin  1048576 bytes  blake3 " + sum.String() + " (the server's Repr-Digest: integrity in transit, not authenticity)"},
		{"ok by manifest", []string{good + "/f.bin", "--manifest", mf}, 0, "(manifest)"},
		{"one corrupted byte", []string{serve(corrupt, sum.HeaderValue(), len(body), false) + "/f.bin"}, 1, "digest mismatch"},
		{"one corrupted byte, manifest", []string{serve(corrupt, "", len(body), false) + "/f.bin", "--manifest", mf}, 1, "digest mismatch"},
		{"truncated", []string{serve(body, sum.HeaderValue(), len(body), true) + "/f.bin"}, 1, "body shorter than promised"},
		{"too long", []string{serve(body, sum.HeaderValue(), len(body)-10, false) + "/f.bin"}, 1, ""},
		{"no digest", []string{serve(body, "", len(body), false) + "/f.bin"}, 3, "NOT VERIFIED"},
		{"wrong algorithm", []string{serve(body, "sha-256=:AAAA:", len(body), false) + "/f.bin"}, 3, "no digest to check against"},
		{"not hashed yet", []string{linking + "/f.bin", "--wait", "500ms"}, 3, "NOT HASHED YET"},
		{"sha-256 given", []string{good + "/f.bin", "--sha256", shaHex}, 0, "and sha-256"},
		{"sha-256 given, wrong", []string{good + "/f.bin", "--sha256", strings.Repeat("0", 64)}, 1, "SHA-256 mismatch"},
		{"the server's sha-256 member", []string{serve(body, sum.HeaderValue()+", "+sha.HeaderValue(), len(body), false) + "/f.bin"}, 0, "and sha-256"},
		{"the server's sha-256 member, wrong", []string{serve(body, sum.HeaderValue()+", sha-256=:"+base64.StdEncoding.EncodeToString(make([]byte, 32))+":", len(body), false) + "/f.bin"}, 1, "SHA-256 mismatch"},
		{"local file", []string{filepath.Join(dir, "f.bin"), "--manifest", mf}, 0, "(manifest " + mf + ")"},
		{"local file, corrupted", []string{corruptFile, "--manifest", mf}, 1, "digest mismatch"},
		{"local file, sha-256", []string{filepath.Join(dir, "f.bin"), "--sha256", shaHex}, 0, "(sha-256)"},
		{"local file, no manifest", []string{filepath.Join(dir, "f.bin")}, 3, "NOT VERIFIED"},
		{"--resolve", []string{"http://files.example:" + goodPort + "/f.bin", "--resolve", "files.example:" + goodPort + ":127.0.0.1"}, 0, "OK"},
		{"malformed header", []string{serve(body, "blake3=notbase64", len(body), false) + "/f.bin"}, 1, "malformed Repr-Digest"},
		{"404", []string{badServer(t, http.NotFound) + "/f.bin", "--manifest", mf}, 1, "unexpected status 404"},
		{"range ok", []string{good + "/f.bin", "--manifest", mf, "--range", "1000-99999"}, 0, "bytes 1000-99999 of the local file"},
		{"range corrupted", []string{serve(corrupt, "", len(body), false) + "/f.bin", "--manifest", mf, "--range", "100000-199999"}, 1, "digest mismatch"},
		{"range without local manifest", []string{good + "/f.bin", "--range", "0-9"}, 2, ""},
		{"h3 from a server without HTTP/3", []string{good + "/f.bin", "--protocol", "h3", "--timeout", "2s"}, 1, "FAIL"},
		{"h2 refused by an h1 server", []string{good + "/f.bin", "--protocol", "h2"}, 1, "did not speak the requested protocol"},
	}
	for _, tt := range tests {
		code, out, errs := run2(append([]string{"verify"}, tt.args...)...)
		if code != tt.code || !strings.Contains(out+errs, tt.want) {
			t.Errorf("%s: exit %d, want %d; output:\n%s%s", tt.name, code, tt.code, out, errs)
		}
	}
}

// startServer runs an engine serving root on a loopback port until the
// test ends; extra is more TOML, flags are name, value pairs as serve's.
func startServer(t *testing.T, root, extra string, flags ...string) *engine.Server {
	t.Helper()
	cfg, err := config.Parse("t.toml", root, []byte(fmt.Sprintf("root = %q\nlisten = \"127.0.0.1:0\"\n%s", root, extra)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(flags); i += 2 {
		cfg.SetFlag(flags[i], flags[i+1])
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := engine.New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv
}

// verifyUntilOK runs engine with args until it succeeds, for up to 10 s:
// the first responses for a file come before its digest is known.
func verifyUntilOK(args ...string) (code int, out, errs string) {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, out, errs = run2(args...)
		if code == 0 || time.Now().After(deadline) {
			return code, out, errs
		}
	}
}

// TestVerifyAgainstEngine: engine verify downloads from the engine itself
// and checks what it advertises; a file corrupted on disk after it was
// hashed is caught by the manifest check.
func TestVerifyAgainstEngine(t *testing.T) {
	root := t.TempDir()
	body := bytes.Repeat([]byte("model weights "), 300000)
	os.WriteFile(filepath.Join(root, "w.bin"), body, 0o644)
	srv := startServer(t, root, "")
	url := "http://" + srv.Addr() + "/w.bin"
	// The first request starts hashing: verify waits for the digest
	// (the engine links trees), and never calls the file a failure.
	code, out, _ := run2("verify", url)
	if code != 0 || !strings.HasPrefix(out, "OK    "+url) || !strings.Contains(out, "(the server's Repr-Digest") {
		t.Fatalf("verify against the engine: exit %d\n%s", code, out)
	}
	mf := filepath.Join(t.TempDir(), "B3SUMS")
	run2("digest", "--root", root, "-o", mf)
	if code, out, _ := run2("verify", url, "--manifest", mf); code != 0 {
		t.Errorf("with a manifest: %s", out)
	}
}

// TestVerifyOverHTTP3: engine verify --protocol h3 downloads from the
// engine over QUIC and checks its Repr-Digest, and --protocol h2 over TLS
// on the same port.
func TestVerifyOverHTTP3(t *testing.T) {
	root := t.TempDir()
	body := bytes.Repeat([]byte("release artifact "), 200000)
	os.WriteFile(filepath.Join(root, "a.bin"), body, 0o644)
	srv := startServer(t, root, "[kernel]\nktls = \"auto\"\n", "self-signed", "true")
	url := "https://" + srv.Addr() + "/a.bin"
	for _, proto := range []string{"h3", "h2"} {
		code, out, errs := verifyUntilOK("verify", url, "--protocol", proto, "-k")
		if code != 0 || !strings.Contains(out, "3400000 bytes") || !strings.Contains(out, "(the server's Repr-Digest") {
			t.Errorf("--protocol %s: exit %d\n%s%s", proto, code, out, errs)
		}
	}
	if st := srv.Stats(); st.H3Streams == 0 {
		t.Error("no HTTP/3 response was served")
	}
}

// TestBenchCommand: engine bench verifies against a manifest (whole files
// and ranges, checked against the same bytes of the local file), refuses
// to run with nothing to verify against unless told --length-only, and
// prints bytes verified against bytes received.
func TestBenchCommand(t *testing.T) {
	root := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	os.WriteFile(filepath.Join(root, "f.bin"), data, 0o644)
	if code, _, errs := run2("digest", "--root", root, "-o", filepath.Join(root, "B3SUMS")); code != 0 {
		t.Fatal(errs)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(root)))
	defer srv.Close()
	u := srv.URL + "/f.bin"
	short := []string{"--duration", "600ms", "--samples", "2", "--warmup", "0s"}
	bench := func(args ...string) (int, string, string) {
		return run2(append(append([]string{"bench", u}, short...), args...)...)
	}

	code, out, errs := bench("--manifest", filepath.Join(root, "B3SUMS"))
	if code != 0 || !strings.Contains(out, "2 of 2 accepted") || !strings.Contains(out, "verified of") || !strings.Contains(out, "(100.0%)") {
		t.Errorf("bench with a manifest: %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = bench("--manifest", filepath.Join(root, "B3SUMS"), "--range", "1000-200999")
	if code != 0 || !strings.Contains(out, "Content-Range, length and BLAKE3 of the same bytes of the local file") {
		t.Errorf("bench of a range: %d\n%s\n%s", code, out, errs)
	}
	// The local copy differs from what is served: every range is wrong.
	local := t.TempDir()
	changed := bytes.Clone(data)
	changed[5000] ^= 1
	os.WriteFile(filepath.Join(local, "f.bin"), changed, 0o644)
	if code, _, errs := run2("digest", "--root", local, "-o", filepath.Join(local, "B3SUMS")); code != 0 {
		t.Fatal(errs)
	}
	code, out, _ = bench("--manifest", filepath.Join(local, "B3SUMS"), "--range", "1000-200999")
	if code != 1 || !strings.Contains(out, "0 of 2 accepted") || !strings.Contains(out, "digest") {
		t.Errorf("bench of a range that differs from the local file: %d\n%s", code, out)
	}

	code, _, errs = bench()
	if code != 2 || !strings.Contains(errs, "--length-only") {
		t.Errorf("bench with nothing to verify against: %d %s", code, errs)
	}
	code, out, errs = bench("--length-only")
	if code != 0 || !strings.Contains(out, "checked: length only") {
		t.Errorf("bench --length-only: %d\n%s\n%s", code, out, errs)
	}
}

// TestVerifyCACertResolve: a server under test with its own certificate,
// reached by name: --cacert trusts it, --resolve sends the name to the
// loopback address; without --cacert the certificate is refused.
func TestVerifyCACertResolve(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f.bin"), bytes.Repeat([]byte("x"), 100000), 0o644)
	cert, err := selfsigned.New("files.test", 24*time.Hour, "files.test")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := selfsigned.PEM(cert)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o644)
	os.WriteFile(keyFile, keyPEM, 0o600)
	srv := startServer(t, root, fmt.Sprintf("[kernel]\nktls = \"auto\"\n[[sites]]\ndomain = \"files.test\"\n[sites.tls]\ncert = %q\nkey = %q\n", certFile, keyFile))
	_, port, _ := net.SplitHostPort(srv.Addr())
	url := "https://files.test:" + port + "/f.bin"
	resolve := "files.test:" + port + ":127.0.0.1"
	if code, out, errs := run2("verify", url, "--resolve", resolve, "--cacert", certFile); code != 0 {
		t.Fatalf("with --cacert and --resolve: exit %d\n%s%s", code, out, errs)
	}
	if code, out, _ := run2("verify", url, "--resolve", resolve); code != 1 || !strings.Contains(out, "certificate") {
		t.Errorf("without --cacert: exit %d, want 1 naming the certificate\n%s", code, out)
	}
	if code, _, _ := run2("verify", url, "--resolve", "files.test:"+port+":not-an-ip"); code != 2 {
		t.Errorf("--resolve to a name: exit %d, want 2", code)
	}
}
