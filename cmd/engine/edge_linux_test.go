package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/nginxtest"
)

// TestEdgeCacheKilled: the engine is killed (SIGKILL) while it stores an
// object from its origin (nginx, sending at 16 MB/s); the partial bytes
// it left are never served as the object: after a restart on the same
// cache directory the request is a miss, fetched again, byte-exact, and
// then a hit.
func TestEdgeCacheKilled(t *testing.T) {
	bin, err := engineBin()
	if err != nil {
		t.Fatal(err)
	}
	root, body, origin := objectOrigin(t, "16m")
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	conf := filepath.Join(dir, "engine.toml")
	os.WriteFile(conf, []byte(fmt.Sprintf("listen = \"127.0.0.1:0\"\nworkers = 1\nroot = %q\n[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [%q]\ncache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", root, origin, cache)), 0o644)
	serve := func() (*exec.Cmd, string) { return serveEngine(t, exec.Command(bin, "serve", "-c", conf), "/obj.bin") }
	cmd, u := serve()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, resp.Body, 8<<20); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGKILL) // in the middle of the fill
	cmd.Wait()
	resp.Body.Close()
	partial, _ := filepath.Glob(filepath.Join(cache, "partial", "*"))
	metas, _ := filepath.Glob(filepath.Join(cache, "objects", "*", "*.meta"))
	if len(partial) == 0 || len(metas) != 0 {
		t.Fatalf("after the kill: %d partial files, %d objects; want the fill's partial file and no object", len(partial), len(metas))
	}

	_, u = serve()
	for i, want := range []string{"engine; fwd=uri-miss; fwd-status=200; stored; detail=unverified", "engine; hit; detail=unverified"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(b, body) || resp.Header.Get("Cache-Status") != want {
			t.Fatalf("after the restart, request %d: %v, %d bytes (match %v), Cache-Status %q (want %q)", i+1, err, len(b), bytes.Equal(b, body), resp.Header.Get("Cache-Status"), want)
		}
	}
	if partial, _ := filepath.Glob(filepath.Join(cache, "partial", "*")); len(partial) != 0 {
		t.Fatalf("after the restart: %d partial files left", len(partial))
	}
}

// serveEngine starts cmd (an engine serve), stops it when the test ends,
// and returns it and the URL of path once it serves.
func serveEngine(t *testing.T, cmd *exec.Cmd, path string) (*exec.Cmd, string) {
	t.Helper()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	var logged strings.Builder
	var mu sync.Mutex
	go func() {
		re := regexp.MustCompile(`msg=serving addr=(\S+)`)
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			mu.Lock()
			logged.WriteString(s.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(s.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return cmd, "http://" + a + path
	case <-time.After(20 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the engine did not start:\n%s", logged.String())
	}
	return nil, ""
}

// TestEdgeCacheDiskFull: the disk fills while an object is stored (the
// engine runs with a file size limit, RLIMIT_FSIZE, below the object's
// size: its writes fail as on a full disk); the client still gets the
// whole object, byte-exact, its rest proxied from the origin as a range,
// and nothing is stored.
func TestEdgeCacheDiskFull(t *testing.T) {
	bin, err := engineBin()
	if err != nil {
		t.Fatal(err)
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) not found: %v", err)
	}
	root, body, origin := objectOrigin(t, "64m")
	dir := t.TempDir()
	conf := filepath.Join(dir, "engine.toml")
	os.WriteFile(conf, []byte(fmt.Sprintf("listen = \"127.0.0.1:0\"\nworkers = 1\nroot = %q\n[integrity]\nstate_dir = \"off\"\n[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [%q]\ncache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", root, origin, filepath.Join(dir, "cache"))), 0o644)
	_, u := serveEngine(t, exec.Command(prlimit, "--fsize=16777216", "--", bin, "serve", "-c", conf), "/obj.bin")
	for i := range 2 {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(b, body) || strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
			t.Fatalf("request %d with a full disk: %v, %d bytes (match %v), Cache-Status %q", i+1, err, len(b), bytes.Equal(b, body), resp.Header.Get("Cache-Status"))
		}
	}
	if metas, _ := filepath.Glob(filepath.Join(dir, "cache", "objects", "*", "*.meta")); len(metas) != 0 {
		t.Fatalf("%d objects stored on a full disk", len(metas))
	}

	// An object of unstated length (chunked): its rest comes as a
	// range too, chunked as its answer began.
	chunked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"chunked-1"`)
		if r.Header.Get("Range") != "" {
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
			return
		}
		for p := body; len(p) > 0; p = p[min(len(p), 1<<20):] {
			w.Write(p[:min(len(p), 1<<20)])
		}
	}))
	defer chunked.Close()
	os.WriteFile(conf, []byte(fmt.Sprintf("listen = \"127.0.0.1:0\"\nworkers = 1\nroot = %q\n[integrity]\nstate_dir = \"off\"\n[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [%q]\ncache = true\n[cache]\npath = %q\nmin_free = \"1MiB\"\n", root, strings.TrimPrefix(chunked.URL, "http://"), filepath.Join(dir, "cache2"))), 0o644)
	_, u = serveEngine(t, exec.Command(prlimit, "--fsize=16777216", "--", bin, "serve", "-c", conf), "/obj.bin")
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(b, body) || resp.ContentLength != -1 {
		t.Fatalf("an object of unstated length with a full disk: %v, %d bytes (match %v), length %d", err, len(b), bytes.Equal(b, body), resp.ContentLength)
	}
}

// objectOrigin starts nginx serving /obj.bin (64 MiB of random bytes)
// from root, fresh for an hour, at rate per connection.
func objectOrigin(t *testing.T, rate string) (root string, body []byte, addr string) {
	root = t.TempDir()
	os.Chmod(root, 0o755)
	body = make([]byte, 64<<20)
	rand.Read(body)
	os.WriteFile(filepath.Join(root, "obj.bin"), body, 0o644)
	addr = nginxtest.Start(t, fmt.Sprintf(`
    server {
        listen %%[2]s;
        root %[1]q;
        location / { expires 1h; limit_rate %[2]s; }
    }`, root, rate))
	return root, body, addr
}
