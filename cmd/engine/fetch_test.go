package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/fetch"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/nginxtest"
)

// bigRandom writes size random bytes to path (1 MiB at a time) and
// returns their BLAKE3.
func bigRandom(t *testing.T, path string, size int64, seed byte) integrity.Digest {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{seed})
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		b := buf[:min(int64(len(buf)), left)]
		rng.Read(b)
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	d, _, err := integrity.Sum(f)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func fileDigest(t *testing.T, path string) integrity.Digest {
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

// fetchJSON runs engine fetch with --json and returns its exit status,
// summary and error output.
func fetchJSON(t *testing.T, args ...string) (int, *fetch.Result, string) {
	t.Helper()
	code, out, errs := run2(append([]string{"fetch", "--json"}, args...)...)
	var r struct {
		fetch.Result
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("fetch %v: exit %d, no JSON summary (%v)\n%s\n%s", args, code, err, out, errs)
	}
	return code, &r.Result, errs + r.Error
}

// TestFetchFromEngine: 1 GiB over 8 connections from the engine, byte
// for byte, every group checked against the tree the engine links, the
// digest trusted as the server's (and said so) or the manifest's; over
// HTTP/2 and HTTP/3 too.
func TestFetchFromEngine(t *testing.T) {
	root := t.TempDir()
	want := bigRandom(t, filepath.Join(root, "model.bin"), 1<<30, 1)
	srv := startServer(t, root, "")
	u := "http://" + srv.Addr() + "/model.bin"
	out := filepath.Join(t.TempDir(), "model.bin")
	// The first answer may be 503 for the tree until the engine has
	// hashed the file: fetch waits for it (Retry-After).
	code, r, errs := fetchJSON(t, u, "-o", out, "--connections", "8")
	if code != 0 || !r.Verified {
		t.Fatalf("exit %d\n%s\n%+v", code, errs, r)
	}
	if got := fileDigest(t, out); got != want {
		t.Fatalf("fetched file's BLAKE3 %s, want %s", got, want)
	}
	if !strings.Contains(r.Trusted, "Repr-Digest") || !strings.Contains(r.Trusted, "not authenticity") {
		t.Errorf("trusted %q: it must say the digest came from the server", r.Trusted)
	}
	if r.Fetched != 1<<30 || r.Refetched != 0 || r.Groups != (1<<30)/integrity.GroupSize {
		t.Errorf("fetched %d (not kept %d) in %d groups", r.Fetched, r.Refetched, r.Groups)
	}
	t.Logf("1 GiB over 8 connections: %.0f MiB/s", r.MiBps)

	// With a manifest: the digest trusted is the manifest's.
	mf := filepath.Join(t.TempDir(), "B3SUMS")
	os.WriteFile(mf, []byte(want.String()+"  model.bin\n"), 0o644)
	os.Remove(out)
	code, r, errs = fetchJSON(t, u, "-o", out, "--manifest", mf)
	if code != 0 || !strings.Contains(r.Trusted, "manifest") {
		t.Fatalf("with a manifest: exit %d, trusted %q\n%s", code, r.Trusted, errs)
	}
	// A manifest that disagrees with the server: nothing verifies.
	wrong := want
	wrong[3] ^= 1
	os.WriteFile(mf, []byte(wrong.String()+"  model.bin\n"), 0o644)
	os.Remove(out)
	if code, _, errs := fetchJSON(t, u, "-o", out, "--manifest", mf); code != 1 {
		t.Fatalf("a manifest the server contradicts: exit %d, want 1\n%s", code, errs)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a file that did not verify was put in place")
	}
	os.Remove(out + ".part")
	os.Remove(out + ".part.state")
	os.Remove(out + ".part.obao")
}

// TestFetchProtocols: the same over HTTP/2 and HTTP/3 (TLS, a
// self-signed certificate, -k).
func TestFetchProtocols(t *testing.T) {
	root := t.TempDir()
	want := bigRandom(t, filepath.Join(root, "f.bin"), 64<<20+12345, 2)
	srv := startServer(t, root, "", "self-signed", "true")
	for _, proto := range []string{"h1", "h2", "h3"} {
		out := filepath.Join(t.TempDir(), "f.bin")
		code, r, errs := fetchJSON(t, "https://"+srv.Addr()+"/f.bin", "-o", out, "-k", "--protocol", proto, "--connections", "4")
		if code != 0 || fileDigest(t, out) != want {
			t.Fatalf("%s: exit %d\n%s\n%+v", proto, code, errs, r)
		}
	}
}

// TestFetchFromNginx: a directory with engine digest --outboard sidecars,
// served by nginx (no Repr-Digest, no Link): fetched with the manifest's
// digest and the sidecar trees, byte for byte; without a digest, fetch
// refuses to call anything verified.
func TestFetchFromNginx(t *testing.T) {
	root := t.TempDir()
	want := bigRandom(t, filepath.Join(root, "weights.bin"), 1<<30, 3)
	if code, _, errs := run2("digest", "--root", root, "--outboard", "-o", filepath.Join(root, "B3SUMS")); code != 0 {
		t.Fatalf("digest --outboard: %d %s", code, errs)
	}
	addr := nginxtest.Start(t, "server { listen %[2]s; root "+root+"; sendfile on; }")
	out := filepath.Join(t.TempDir(), "weights.bin")
	code, r, errs := fetchJSON(t, "http://"+addr+"/weights.bin", "-o", out, "--connections", "8", "--manifest", "http://"+addr+"/B3SUMS")
	if code != 0 || fileDigest(t, out) != want {
		t.Fatalf("exit %d\n%s\n%+v", code, errs, r)
	}
	t.Logf("1 GiB over 8 connections from nginx: %.0f MiB/s", r.MiBps)
	out2 := filepath.Join(t.TempDir(), "weights.bin")
	if code, _, errs := fetchJSON(t, "http://"+addr+"/weights.bin", "-o", out2); code != 1 || !strings.Contains(errs, "no digest") {
		t.Fatalf("no digest anywhere: exit %d, want 1 naming the missing digest\n%s", code, errs)
	}
}

// lyingProxy relays to target, breaking every range response but the
// probe's (bytes=0-0) in the way named: a byte flipped in the middle, the
// body cut in half, the whole file with 200, or a stall.
func lyingProxy(t *testing.T, target, how string) string {
	t.Helper()
	tu, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(tu)
	rp.ModifyResponse = func(resp *http.Response) error {
		rg := resp.Request.Header.Get("Range")
		v, _ := strings.CutPrefix(rg, "bytes=")
		a, b, _ := strings.Cut(v, "-")
		x, _ := strconv.ParseInt(a, 10, 64)
		y, _ := strconv.ParseInt(b, 10, 64)
		if resp.StatusCode != 206 || y == 0 {
			return nil
		}
		at := x + (y-x)/2
		if how == "whole" {
			// The whole file, streamed from the start as it comes.
			resp.Body.Close()
			f, err := http.Get(target + resp.Request.URL.Path)
			if err != nil {
				return err
			}
			resp.StatusCode, resp.Status, resp.Body, resp.ContentLength = 200, "200 OK", f.Body, f.ContentLength
			resp.Header.Del("Content-Range")
			resp.Header.Set("Content-Length", strconv.FormatInt(f.ContentLength, 10))
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		switch how {
		case "flip":
			body[at-x] ^= 1
		case "truncate":
			body = body[:len(body)/2]
		case "stall":
			select { // until the client gives up on it
			case <-resp.Request.Context().Done():
			case <-time.After(time.Minute):
			}
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if how != "truncate" {
			resp.ContentLength = int64(len(body))
		}
		return nil
	}
	s := &http.Server{Handler: rp}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return "http://" + l.Addr().String()
}

// TestFetchThroughLiars: a proxy in front of the engine that flips a
// byte, cuts a range short, answers a range with the whole file, or
// stalls: the download comes out byte for byte from the engine as a
// mirror, and the proxy is named with what it did.
func TestFetchThroughLiars(t *testing.T) {
	root := t.TempDir()
	want := bigRandom(t, filepath.Join(root, "f.bin"), 96<<20, 4)
	srv := startServer(t, root, "")
	direct := "http://" + srv.Addr()
	if code, _, errs := verifyUntilOK("verify", direct+"/f.bin"); code != 0 { // hashed: the proxy passes the digest on
		t.Fatalf("verify: %s", errs)
	}
	for _, how := range []string{"flip", "truncate", "whole", "stall"} {
		t.Run(how, func(t *testing.T) {
			liar := lyingProxy(t, direct, how)
			out := filepath.Join(t.TempDir(), "f.bin")
			// A stall is a group that takes 3 s: long enough that a loaded
			// machine's honest source is not taken for one.
			code, r, errs := fetchJSON(t, liar+"/f.bin", "--mirror", direct+"/f.bin", "-o", out, "--connections", "8", "--timeout", "3s")
			if code != 0 || fileDigest(t, out) != want {
				t.Fatalf("exit %d\n%s\n%+v", code, errs, r)
			}
			var liarReport *fetch.SourceReport
			for i := range r.Sources {
				if strings.HasPrefix(r.Sources[i].URL, liar) {
					liarReport = &r.Sources[i]
				}
			}
			if liarReport == nil {
				t.Fatalf("no report for the liar: %+v", r.Sources)
			}
			// Half the connections start on the liar, and every range it
			// answers is broken: it must be caught every time.
			t.Logf("%s: liar %+v; groups retried %d, bytes not kept %d", how, *liarReport, r.Retried, r.Refetched)
			if liarReport.Failures == 0 {
				t.Errorf("the liar's failures were not counted: %+v", *liarReport)
			}
			switch how {
			case "flip":
				if liarReport.WrongGroups == 0 || r.Retried == 0 {
					t.Errorf("wrong groups %d, fetched again %d: want both", liarReport.WrongGroups, r.Retried)
				}
			case "whole":
				if !strings.Contains(liarReport.Dropped, "whole file") {
					t.Errorf("a range answered with the whole file: dropped %q", liarReport.Dropped)
				}
			}
		})
	}
}

// TestFetchUsage: mistakes on the command line are refused before any
// request, each with its reason.
func TestFetchUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"http://127.0.0.1:1/f.bin", "--connections", "100000"}, "--connections 100000 is out of range"},
		{[]string{"http://127.0.0.1:1/f.bin", "--timeout", "0s"}, "positive duration"},
		{[]string{"http://127.0.0.1:1/f.bin", "--timeout", "-1s"}, "positive duration"},
		{[]string{"http://127.0.0.1:1/f.bin", "-o", dir}, "is a directory"},
		{[]string{"http://127.0.0.1:1/a/%2E%2E"}, "names no file"},
		{[]string{"http://127.0.0.1:1/a/..%5C..%5Cx"}, "names no file"},
		{[]string{"http://127.0.0.1:1/f.bin", "--digest", strings.Repeat("0", 64), "--manifest", "m"}, "give one"},
		{[]string{"ftp://127.0.0.1/f.bin"}, "not an http(s) URL"},
	} {
		code, out, errs := run2(append([]string{"fetch"}, tt.args...)...)
		if code != 2 || !strings.Contains(out+errs, tt.want) {
			t.Errorf("fetch %v: exit %d, want 2 saying %q\n%s%s", tt.args, code, tt.want, out, errs)
		}
	}
}
