package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaship/engine/integrity"
)

// file is a test file with its tree and digest.
type file struct {
	data []byte
	tree []byte
	root integrity.Digest
}

func newFile(t *testing.T, size int, seed byte) *file {
	t.Helper()
	f := &file{data: make([]byte, size)}
	rand.NewChaCha8([32]byte{seed}).Read(f.data)
	tree := make(memAt, integrity.OutboardSize(int64(size)))
	root, err := integrity.SumOutboard(bytes.NewReader(f.data), int64(size), tree)
	if err != nil {
		t.Fatal(err)
	}
	f.tree, f.root = tree, root
	return f
}

type memAt []byte

func (m memAt) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }

// origin serves f at /f.bin (ranges, Repr-Digest) and its tree at
// /f.bin.obao, as engine digest --outboard sidecars behind any server.
func origin(f *file) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/f.bin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Repr-Digest", f.root.HeaderValue())
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "f.bin", time.Unix(1, 0), bytes.NewReader(f.data))
	})
	mux.HandleFunc("/f.bin.obao", func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "f.bin.obao", time.Unix(1, 0), bytes.NewReader(f.tree))
	})
	return mux
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// rangeStart is the first byte a request's Range asks for; -1 without.
func rangeStart(r *http.Request) int64 {
	v, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
	a, _, _ := strings.Cut(v, "-")
	n, err := strconv.ParseInt(a, 10, 64)
	if !ok || err != nil {
		return -1
	}
	return n
}

// covers reports whether r's range holds byte at.
func covers(r *http.Request, at int64) bool {
	v, _ := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
	a, b, _ := strings.Cut(v, "-")
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	return err1 == nil && err2 == nil && x <= at && at <= y && x > 0 // the probe's bytes=0-0 is left alone
}

// isRange reports whether r asks for a range other than the probe's
// first byte.
func isRange(r *http.Request) bool {
	return r.URL.Path == "/f.bin" && r.Header.Get("Range") != "" && r.Header.Get("Range") != "bytes=0-0"
}

// flipEvery passes h's responses with one byte flipped in the middle of
// every range body.
func flipEvery(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isRange(r) {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		body[len(body)/2] ^= 0x40
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(body)
	})
}

// flipAt passes h's responses, with one byte flipped at offset at in
// every range body that holds it.
func flipAt(h http.Handler, at int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/f.bin" || !covers(r, at) {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		body[at-rangeStart(r)] ^= 0x40
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(body)
	})
}

func runFetch(t *testing.T, cfg Config) (*Result, error) {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "out.bin")
	}
	if cfg.NewClient == nil {
		cfg.NewClient = func() *http.Client { return &http.Client{Transport: &http.Transport{DisableCompression: true}} }
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return Run(ctx, cfg)
}

func checkOut(t *testing.T, path string, f *file) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, f.data) {
		t.Fatalf("%s differs from the file (%d bytes, want %d)", path, len(got), len(f.data))
	}
	for _, leftover := range []string{".part", ".part.state", ".part.obao"} {
		if _, err := os.Stat(path + leftover); err == nil {
			t.Errorf("%s left behind", path+leftover)
		}
	}
}

// TestFetch: a file of many groups over several connections arrives
// byte-exact and verified, with the digest taken from where it was said
// to come from; sizes with no tree (one group) and no bytes work too.
func TestFetch(t *testing.T) {
	for _, size := range []int{0, 1000, integrity.GroupSize, 37*integrity.GroupSize + 999} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			f := newFile(t, size, 1)
			u := serve(t, origin(f)) + "/f.bin"
			out := filepath.Join(t.TempDir(), "out.bin")
			res, err := runFetch(t, Config{URL: u, Path: out, Connections: 4})
			if err != nil {
				t.Fatal(err)
			}
			checkOut(t, out, f)
			if !res.Verified || res.Blake3 != f.root.String() || !strings.Contains(res.Trusted, "Repr-Digest") || res.Refetched != 0 {
				t.Errorf("result %+v", res)
			}
			if res.Fetched != int64(size) {
				t.Errorf("fetched %d bytes, want %d", res.Fetched, size)
			}
		})
	}
}

// TestFetchTrust: a digest given by the caller is the one checked: a
// server whose Repr-Digest disagrees is not trusted, and bytes under a
// wrong trusted digest never verify.
func TestFetchTrust(t *testing.T) {
	f := newFile(t, 5*integrity.GroupSize, 2)
	u := serve(t, origin(f)) + "/f.bin"
	res, err := runFetch(t, Config{URL: u, Digest: &f.root, DigestFrom: "the test"})
	if err != nil || res.Trusted != "the test" {
		t.Fatalf("with the right digest: %v, trusted %q", err, res.Trusted)
	}
	wrong := f.root
	wrong[0] ^= 1
	_, err = runFetch(t, Config{URL: u, Digest: &wrong, DigestFrom: "the test"})
	if !errors.Is(err, ErrUnverified) {
		t.Fatalf("under a wrong digest: %v, want ErrUnverified", err)
	}
	noDigest := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "f.bin", time.Unix(1, 0), bytes.NewReader(f.data))
	})
	if _, err := runFetch(t, Config{URL: serve(t, noDigest) + "/f.bin"}); !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), "--digest") {
		t.Fatalf("no digest anywhere: %v, want ErrUnverified naming --digest", err)
	}
}

// TestFetchRepairs: each way a source can lie is detected, its bytes
// never written, the groups fetched from the honest mirror, and the liar
// named.
func TestFetchRepairs(t *testing.T) {
	f := newFile(t, 40*integrity.GroupSize+5, 3)
	good := origin(f)
	whole := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/f.bin" && rangeStart(r) > 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
			w.WriteHeader(200)
			w.Write(f.data)
			return
		}
		good.ServeHTTP(w, r)
	})
	wrongRange := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/f.bin" && rangeStart(r) > 0 {
			a := rangeStart(r)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a-1, a+9, len(f.data)))
			w.Header().Set("Content-Length", "11")
			w.WriteHeader(206)
			w.Write(f.data[a-1 : a+10])
			return
		}
		good.ServeHTTP(w, r)
	})
	short := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isRange(r) {
			// The promised length, then the connection cut halfway.
			rec := httptest.NewRecorder()
			good.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes()[:rec.Body.Len()/2])
			panic(http.ErrAbortHandler)
		}
		good.ServeHTTP(w, r)
	})
	var stalls atomic.Int32
	stall := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isRange(r) {
			stalls.Add(1)
			v, _ := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
			a, b, _ := strings.Cut(v, "-")
			x, _ := strconv.Atoi(a)
			y, _ := strconv.Atoi(b)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", x, y, len(f.data)))
			w.Header().Set("Content-Length", strconv.Itoa(y-x+1))
			w.WriteHeader(206)
			w.Write(f.data[x : x+10]) // a few bytes, then nothing
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		good.ServeHTTP(w, r)
	})
	for _, tt := range []struct {
		name    string
		liar    http.Handler
		dropped string // in the liar's report; "" when it may stay
		wrong   bool   // the liar's bytes failed their check
	}{
		{"a flipped byte", flipEvery(good), "", true},
		{"200 and the whole file", whole, "whole file", false},
		{"a wrong Content-Range", wrongRange, "Content-Range", false},
		{"a cut body", short, "", false},
		{"a stall", stall, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			liar := serve(t, tt.liar) + "/f.bin"
			honest := serve(t, good) + "/f.bin"
			out := filepath.Join(t.TempDir(), "out.bin")
			res, err := runFetch(t, Config{URL: liar, Mirrors: []string{honest}, Path: out, Connections: 4, Stall: time.Second})
			if err != nil {
				t.Fatalf("%v\n%+v", err, res)
			}
			checkOut(t, out, f)
			lr := res.Sources[0]
			if lr.URL != liar {
				t.Fatalf("sources %+v", res.Sources)
			}
			if lr.Failures == 0 {
				t.Errorf("the liar's failures were not counted: %+v", lr)
			}
			if tt.dropped != "" && !strings.Contains(lr.Dropped, tt.dropped) {
				t.Errorf("the liar: dropped %q, want it dropped for %q", lr.Dropped, tt.dropped)
			}
			if tt.wrong && (lr.WrongGroups == 0 || res.Retried == 0) {
				t.Errorf("wrong bytes not counted: liar %+v, groups retried %d", lr, res.Retried)
			}
			if res.Sources[1].Dropped != "" {
				t.Errorf("the honest mirror was dropped: %s", res.Sources[1].Dropped)
			}
		})
	}
	if stalls.Load() == 0 {
		t.Error("the stalling source was never asked for the stalled range")
	}
}

// TestFetchGivesUp: a lone source whose bytes always fail is dropped and
// the download fails as unverified, with nothing put in place.
func TestFetchGivesUp(t *testing.T) {
	f := newFile(t, 20*integrity.GroupSize, 4)
	u := serve(t, flipAt(origin(f), 5*integrity.GroupSize+7)) + "/f.bin"
	out := filepath.Join(t.TempDir(), "out.bin")
	res, err := runFetch(t, Config{URL: u, Path: out, Connections: 2})
	if !errors.Is(err, ErrUnverified) {
		t.Fatalf("%v, want ErrUnverified\n%+v", err, res)
	}
	// Named, with the range it kept sending wrong.
	if off := int64(5 * integrity.GroupSize); !strings.Contains(res.Sources[0].Dropped, fmt.Sprintf("bytes %d-%d", off, off+integrity.GroupSize-1)) {
		t.Errorf("the source: dropped %q, want it named with the bad range", res.Sources[0].Dropped)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a file that did not verify was put in place")
	}
	down := serve(t, http.NotFoundHandler()) + "/f.bin"
	if _, err := runFetch(t, Config{URL: down}); !errors.Is(err, ErrNetwork) {
		t.Fatalf("a source that has no such file: %v, want ErrNetwork", err)
	}
}

// TestFetchResume: a download interrupted part way continues from what
// was recorded; a group written but not recorded is checked again from
// the part file, a damaged one fetched again; a part file is never
// overwritten without --resume.
func TestFetchResume(t *testing.T) {
	f := newFile(t, 64*integrity.GroupSize, 5)
	var served atomic.Int64
	var cut atomic.Pointer[context.CancelFunc]
	good := origin(f)
	counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/f.bin" && rangeStart(r) >= 0 && r.Header.Get("Range") != "bytes=0-0" {
			if served.Add(1) == 4 {
				if c := cut.Load(); c != nil {
					// The client goes away with three ranges served; the
					// fourth never comes.
					(*c)()
					<-r.Context().Done()
					return
				}
			}
		}
		good.ServeHTTP(w, r)
	})
	u := serve(t, counting) + "/f.bin"
	out := filepath.Join(t.TempDir(), "out.bin")
	// The first run is cut after a few ranges.
	ctx, cancel := context.WithCancel(context.Background())
	cut.Store(&cancel)
	cfg := Config{URL: u, Path: out, Connections: 1, NewClient: func() *http.Client { return &http.Client{} },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	_, err := Run(ctx, cfg)
	cut.Store(nil)
	if err == nil {
		t.Fatal("the interrupted run finished")
	}
	st, err := loadState(out+".part.state", newState(int64(len(f.data)), f.root, integrity.GroupSize, 64))
	if err != nil {
		t.Fatal(err)
	}
	recorded := st.count()
	if recorded == 0 || recorded == 64 {
		t.Fatalf("%d groups recorded after the cut, want some", recorded)
	}
	// Without --resume the part file stays as it is.
	if _, err := runFetch(t, Config{URL: u, Path: out}); !errors.Is(err, ErrLocal) || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("a second run without --resume: %v", err)
	}
	// A group the state does not record, written whole: checked again
	// and kept. A recorded group damaged on disk is trusted (the state
	// says so), so damage one that is not recorded and written: fetched.
	var unrecorded []int64
	for i := range int64(64) {
		if !st.has(i) {
			unrecorded = append(unrecorded, i)
		}
	}
	part, err := os.OpenFile(out+".part", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	written := unrecorded[len(unrecorded)-1]
	part.WriteAt(f.data[written*integrity.GroupSize:(written+1)*integrity.GroupSize], written*integrity.GroupSize)
	damaged := unrecorded[0]
	part.WriteAt(bytes.Repeat([]byte{1}, 100), damaged*integrity.GroupSize)
	part.Close()
	served.Store(0)
	cfg.Resume = true
	res, err := runFetch(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkOut(t, out, f)
	if res.Resumed != recorded || res.Rechecked < 1 {
		t.Errorf("resumed %d (want %d), rechecked %d (want at least 1)", res.Resumed, recorded, res.Rechecked)
	}
	want := int64(len(f.data)) - (recorded+res.Rechecked)*integrity.GroupSize
	if res.Fetched != want || res.Refetched != 0 {
		t.Errorf("the resumed run fetched %d bytes (%d not kept), want exactly the %d not recorded or found", res.Fetched, res.Refetched, want)
	}
}

// TestFetchSHA256: a SHA-256 given is checked over the whole file once
// every group checked; a file whose SHA-256 differs is not put in place.
func TestFetchSHA256(t *testing.T) {
	f := newFile(t, 9*integrity.GroupSize+3, 6)
	u := serve(t, origin(f)) + "/f.bin"
	right := integrity.SHA256(sha256.Sum256(f.data))
	out := filepath.Join(t.TempDir(), "out.bin")
	res, err := runFetch(t, Config{URL: u, Path: out, SHA256: &right})
	if err != nil || res.SHA256 != right.String() {
		t.Fatalf("the right SHA-256: %v, result's %q", err, res.SHA256)
	}
	checkOut(t, out, f)
	wrong := right
	wrong[0] ^= 1
	out = filepath.Join(t.TempDir(), "out.bin")
	if _, err := runFetch(t, Config{URL: u, Path: out, SHA256: &wrong}); !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("a wrong SHA-256: %v, want ErrUnverified naming it", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a file whose SHA-256 differs was put in place")
	}
}

// TestFetchNoRoom: a file larger than the disk's free space is refused
// before a byte or a tree is fetched.
func TestFetchNoRoom(t *testing.T) {
	var asked atomic.Int32
	huge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "bytes=0-0" {
			asked.Add(1)
		}
		w.Header().Set("Content-Range", "bytes 0-0/4611686018427387903")
		w.Header().Set("Repr-Digest", integrity.Digest{1}.HeaderValue())
		w.WriteHeader(206)
		w.Write([]byte{0})
	})
	_, err := runFetch(t, Config{URL: serve(t, huge) + "/f.bin"})
	if !errors.Is(err, ErrLocal) || !strings.Contains(err.Error(), "free") {
		t.Fatalf("a 4 EiB file: %v, want ErrLocal naming the free space", err)
	}
	if asked.Load() != 0 {
		t.Errorf("%d requests after the probe, want none", asked.Load())
	}
}

// TestFetchRecordedChecked: groups a state file records are read back and
// checked before the file is put in place: a recorded group damaged on
// disk (or a state file that records groups never written) is fetched
// again, never renamed into place.
func TestFetchRecordedChecked(t *testing.T) {
	f := newFile(t, 16*integrity.GroupSize, 8)
	u := serve(t, origin(f)) + "/f.bin"
	dir := t.TempDir()
	out := filepath.Join(dir, "out.bin")
	// A state that records every group, over a part file of zeros but
	// for group 3, which holds its true bytes.
	st := newState(int64(len(f.data)), f.root, integrity.GroupSize, 16)
	for i := range int64(16) {
		st.set(i)
	}
	if err := st.save(out+".part.state", st.done); err != nil {
		t.Fatal(err)
	}
	part := make([]byte, len(f.data))
	copy(part[3*integrity.GroupSize:4*integrity.GroupSize], f.data[3*integrity.GroupSize:])
	if err := os.WriteFile(out+".part", part, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := runFetch(t, Config{URL: u, Path: out, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	checkOut(t, out, f)
	if res.Resumed != 1 || res.EndChecks != 16 || res.Fetched != 15*integrity.GroupSize {
		t.Errorf("resumed %d, checked at the end %d, fetched %d bytes; want 1 (the one group really there), 16, and the 15 groups that were not there", res.Resumed, res.EndChecks, res.Fetched)
	}
}

// TestFetchNoFollow: a symbolic link planted where the part, state or
// tree file goes is never written through.
func TestFetchNoFollow(t *testing.T) {
	f := newFile(t, 4*integrity.GroupSize, 9)
	u := serve(t, origin(f)) + "/f.bin"
	for _, name := range []string{".part", ".part.obao", ".part.state"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim")
			os.WriteFile(victim, []byte("keep me"), 0o644)
			out := filepath.Join(dir, "out.bin")
			if err := os.Symlink(victim, out+name); err != nil {
				t.Fatal(err)
			}
			runFetch(t, Config{URL: u, Path: out, Resume: true})
			if b, _ := os.ReadFile(victim); string(b) != "keep me" {
				t.Fatalf("written through a symbolic link at %s: the file it points to now holds %d bytes", out+name, len(b))
			}
		})
	}
}

// TestFetchOneAtATime: a second fetch of the same PATH while the first
// runs is refused, not run beside it.
func TestFetchOneAtATime(t *testing.T) {
	f := newFile(t, 8*integrity.GroupSize, 10)
	release := make(chan struct{})
	good := origin(f)
	held := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isRange(r) {
			<-release // the first fetch waits here, holding its part file
		}
		good.ServeHTTP(w, r)
	})
	u := serve(t, held) + "/f.bin"
	out := filepath.Join(t.TempDir(), "out.bin")
	first := make(chan error, 1)
	go func() {
		_, err := runFetch(t, Config{URL: u, Path: out, Resume: true})
		first <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(out + ".part"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first fetch made no part file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	_, err := runFetch(t, Config{URL: u, Path: out, Resume: true})
	close(release)
	if !errors.Is(err, ErrLocal) || !strings.Contains(err.Error(), "another engine fetch") {
		t.Errorf("a second fetch of the same path: %v, want ErrLocal naming the other fetch", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first fetch: %v", err)
	}
	checkOut(t, out, f)
}
