package edgecache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zeebo/blake3"
)

func open(t *testing.T, dir string, max int64) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, MaxSize: max})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func payload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// readAll reads a fill from the start as a reader does: what has landed,
// then waits for more, until the end or the fill's error.
func readAll(f *Fill) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := f.ReadAt(buf, int64(len(out)))
		out = append(out, buf[:n]...)
		switch {
		case err == io.EOF:
			return out, nil
		case err != nil:
			return out, err
		case n == 0:
			select {
			case <-f.Wait(int64(len(out))):
			case <-time.After(20 * time.Second):
				return out, errors.New("no progress")
			}
		}
	}
}

// fill writes body in chunks as the leader, then commits.
func fill(t *testing.T, s *Store, key string, body []byte) *Object {
	t.Helper()
	f, leader, err := begin(s, key)
	if err != nil || !leader {
		t.Fatalf("Begin(%q): leader %v, %v", key, leader, err)
	}
	defer f.Release(true)
	f.Write(body)
	o, err := f.Commit(Meta{Status: 200, Header: [][2]string{{"Content-Type", "application/octet-stream"}}})
	if err != nil {
		t.Fatalf("Commit(%q): %v", key, err)
	}
	return o
}

// TestFillReaders: readers that join a fill at any point read every byte
// as it lands, the same bytes, and the object is complete only at Commit.
func TestFillReaders(t *testing.T) {
	s := open(t, t.TempDir(), 0)
	body := payload(10<<20, 1)
	f, leader, err := begin(s, "GET models/a.bin")
	if err != nil || !leader {
		t.Fatalf("Begin: leader %v, %v", leader, err)
	}
	var wg sync.WaitGroup
	results := make([][]byte, 5)
	errs := make([]error, 5)
	join := func(i int) {
		g, leader, err := begin(s, "GET models/a.bin")
		if err != nil || leader || g != f {
			t.Errorf("reader %d: leader %v, same fill %v, %v", i, leader, g == f, err)
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Release(false)
			results[i], errs[i] = readAll(g)
		}()
	}
	join(0)
	for off, i := 0, 1; off < len(body); off += 256 << 10 {
		f.Write(body[off:min(off+256<<10, len(body))])
		if off%(2<<20) == 0 && i < 5 {
			join(i)
			i++
		}
		if s.Lookup("GET models/a.bin") != nil {
			t.Fatal("the object is complete before its fill was committed")
		}
	}
	o, err := f.Commit(Meta{Status: 200})
	f.Release(true)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil || !bytes.Equal(results[i], body) {
			t.Errorf("reader %d: %d bytes, equal %v, %v", i, len(results[i]), bytes.Equal(results[i], body), errs[i])
		}
	}
	sum := blake3.Sum256(body)
	if got := s.Lookup("GET models/a.bin"); got != o || o.Meta.Size != int64(len(body)) || o.Meta.BLAKE3 != hex.EncodeToString(sum[:]) {
		t.Fatalf("Lookup after Commit: %+v", got)
	}
	if b, _ := os.ReadFile(o.Path); !bytes.Equal(b, body) {
		t.Fatal("the object's data file is not the body")
	}
	// The next Begin for the key starts a new fill (a revalidation's).
	g, leader, _ := begin(s, "GET models/a.bin")
	if !leader || g == f {
		t.Fatal("Begin after Commit joined the old fill")
	}
	g.Release(true)
	if s.Lookup("GET models/a.bin") != o {
		t.Fatal("a fill released without Commit replaced the object")
	}
}

// TestFillDigest: bytes that do not match the origin's digest never
// become an object, and readers that streamed them see the error.
func TestFillDigest(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 0)
	body := payload(3<<20, 2)
	good := sha256.Sum256(body)
	bad := sha256.Sum256([]byte("another object"))
	for _, tc := range []struct {
		name string
		want [][]byte // each stated
		err  error
	}{
		{"match", [][]byte{good[:]}, nil},
		{"mismatch", [][]byte{bad[:]}, ErrDigestMismatch},
		{"the second mismatches", [][]byte{good[:], bad[:]}, ErrDigestMismatch},
		{"unreadable", [][]byte{good[:], nil}, ErrDigestMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "GET " + tc.name
			f, _, _ := begin(s, key)
			for _, w := range tc.want {
				f.Expect("sha-256", w)
			}
			r, _, _ := begin(s, key)
			done := make(chan error, 1)
			go func() {
				defer r.Release(false)
				_, err := readAll(r)
				done <- err
			}()
			f.Write(body)
			o, err := f.Commit(Meta{Status: 200})
			f.Release(true)
			if !errors.Is(err, tc.err) || !errors.Is(<-done, tc.err) {
				t.Fatalf("Commit: %v; reader: want %v", err, tc.err)
			}
			if tc.err == nil {
				if o == nil || o.Meta.Verified != "sha-256" || o.Meta.SHA256 != hex.EncodeToString(good[:]) {
					t.Fatalf("object %+v", o)
				}
				return
			}
			if s.Lookup(key) != nil {
				t.Fatal("a mismatched fill became an object")
			}
		})
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "partial")); len(ents) != 0 {
		t.Fatalf("partial files left: %v", ents)
	}
}

// TestEvict: past max_size the least recently used objects go; min_free
// is kept on the file system; purge by key and by prefix.
func TestEvict(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 3<<20)
	for i := range 3 {
		fill(t, s, fmt.Sprintf("GET /m/%d", i), payload(1<<20, uint64(i)))
	}
	s.Lookup("GET /m/0") // used: /m/1 is now the least recent
	fill(t, s, "GET /m/3", payload(1<<20, 3))
	if s.Lookup("GET /m/1") != nil || s.Lookup("GET /m/0") == nil || s.Len() != 3 || s.Size() != 3<<20 {
		t.Fatalf("after the 4th MiB under a 3 MiB bound: /m/1 kept %v, /m/0 kept %v, %d objects, %d bytes",
			s.Lookup("GET /m/1") != nil, s.Lookup("GET /m/0") != nil, s.Len(), s.Size())
	}
	// Too big for the bound: not kept, and nothing else lost for it.
	f, _, _ := begin(s, "GET /huge")
	f.Write(payload(4<<20, 9))
	if _, err := f.Commit(Meta{}); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("4 MiB under a 3 MiB bound: %v, want ErrNoRoom", err)
	}
	f.Release(true)
	// min_free: the file system has 2 MiB free, 1.5 MiB must stay free.
	s.cfg.MaxSize, s.cfg.MinFree = 0, 3<<19
	s.free = func(string) (int64, error) { return 2 << 20, nil }
	fill(t, s, "GET /m/4", payload(1<<20, 4)) // evicts the LRU to keep 1.5 MiB free
	if s.Len() != 3 {
		t.Fatalf("%d objects after a store under min_free; want one evicted for it", s.Len())
	}
	if n, _ := s.Purge("GET /m/4", false); n != 1 || s.Lookup("GET /m/4") != nil {
		t.Fatalf("purge by key removed %d", n)
	}
	if n, _ := s.Purge("GET /m/", true); n != 2 || s.Len() != 0 {
		t.Fatalf("purge by prefix removed %d, %d left", n, s.Len())
	}
	s2 := open(t, dir, 0)
	if s2.Len() != 0 {
		t.Fatalf("purged objects came back after a restart: %d", s2.Len())
	}
}

// TestReopen: complete objects survive a restart in their order of use;
// what is not complete (a partial fill, data without metadata, metadata
// without its data or of another size) is removed.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 0)
	a := fill(t, s, "GET /a", payload(100, 1))
	b := fill(t, s, "GET /b", payload(200, 2))
	c := fill(t, s, "GET /c", payload(300, 3))
	old := time.Now().Add(-time.Hour)
	for i, o := range []*Object{b, a, c} { // c used last, then a, then b
		dir, name := s.name(o.Meta.Key)
		at := old.Add(time.Duration(i) * time.Minute)
		os.Chtimes(filepath.Join(dir, name+".meta"), at, at)
	}
	// The states a crash can leave.
	f, _, _ := begin(s, "GET /cut")
	f.Write(payload(50, 4))                                                   // a fill cut short
	os.WriteFile(filepath.Join(filepath.Dir(a.Path), "0123abcd"), nil, 0o600) // data no metadata names
	os.Remove(b.Path)                                                         // metadata whose data is gone
	os.WriteFile(c.Path, []byte("short"), 0o600)                              // data of another size
	s2 := open(t, dir, 0)
	if s2.Len() != 1 || s2.Lookup("GET /a") == nil {
		t.Fatalf("after reopening: %d objects (want /a alone)", s2.Len())
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "partial")); len(ents) != 0 {
		t.Fatalf("partial files left: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(a.Path), "0123abcd")); !os.IsNotExist(err) {
		t.Fatal("a data file no metadata names was kept")
	}
}

// TestKillDuringFill: a process storing objects is killed (SIGKILL) at
// random moments, 15 times; after each, every object the store opens
// with is whole: its bytes' size and BLAKE3 are its metadata's.
func TestKillDuringFill(t *testing.T) {
	if os.Getenv("EDGECACHE_FILLER") != "" {
		filler(os.Getenv("EDGECACHE_FILLER"))
		return
	}
	dir := t.TempDir()
	seen := 0
	for round := range 15 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringFill$")
		cmd.Env = append(os.Environ(), "EDGECACHE_FILLER="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(50+rand.IntN(250)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		s := open(t, dir, 0)
		s.mu.Lock()
		objs := make([]*Object, 0, len(s.objects))
		for _, o := range s.objects {
			objs = append(objs, o)
		}
		s.mu.Unlock()
		for _, o := range objs {
			b, err := os.ReadFile(o.Path)
			sum := blake3.Sum256(b)
			if err != nil || int64(len(b)) != o.Meta.Size || hex.EncodeToString(sum[:]) != o.Meta.BLAKE3 {
				t.Fatalf("round %d: object %q is not whole after a kill: %d bytes of %d, %v", round, o.Meta.Key, len(b), o.Meta.Size, err)
			}
		}
		seen += len(objs)
	}
	if seen == 0 {
		t.Fatal("no object was ever complete: the filler never got far enough to test anything")
	}
}

// filler stores objects of 64 KiB to 4 MiB in dir until it is killed.
func filler(dir string) {
	s, err := Open(Config{Dir: dir, MaxSize: 64 << 20})
	if err != nil {
		panic(err)
	}
	for i := 0; ; i++ {
		f, leader, err := begin(s, "GET /k/"+strconv.Itoa(i%40))
		if err != nil || !leader {
			panic(fmt.Sprint(leader, err))
		}
		body := payload(64<<10+rand.IntN(4<<20), uint64(i))
		for off := 0; off < len(body); off += 32 << 10 {
			f.Write(body[off:min(off+32<<10, len(body))])
		}
		f.Commit(Meta{Status: 200})
		f.Release(true)
	}
}

// begin is Begin with the leader's Open.
func begin(s *Store, key string) (*Fill, bool, error) {
	f, leader := s.Begin(key)
	if leader {
		if err := f.Open(); err != nil {
			return nil, false, err
		}
	}
	return f, leader, nil
}

// TestReserve: fills under way claim their room; one that would take
// another's is refused until that one ends, whether by max_size or by
// min_free, and complete objects count as room (eviction frees them).
func TestReserve(t *testing.T) {
	s := open(t, t.TempDir(), 100<<20)
	fill(t, s, "GET /old", payload(1<<20, 1))
	a, _, _ := begin(s, "GET /a")
	b, _, _ := begin(s, "GET /b")
	if !a.Reserve(60<<20) || b.Reserve(60<<20) {
		t.Fatal("two claims of 60 MiB under a 100 MiB bound: want the first alone")
	}
	if !b.Reserve(40 << 20) {
		t.Fatal("40 MiB beside a 60 MiB claim under a 100 MiB bound: refused")
	}
	a.Abort(nil)
	a.Release(true)
	c, _, _ := begin(s, "GET /c")
	if !c.Reserve(60 << 20) {
		t.Fatal("a claim after the fill holding the room ended: refused")
	}
	b.Release(true)
	c.Release(true)
	// min_free: 100 MiB free, 50 MiB kept free; the complete object (1
	// MiB) counts as room.
	s.cfg.MaxSize, s.cfg.MinFree = 0, 50<<20
	s.free = func(string) (int64, error) { return 100 << 20, nil }
	d, _, _ := begin(s, "GET /d")
	e, _, _ := begin(s, "GET /e")
	if !d.Reserve(51<<20) || e.Reserve(1<<20) {
		t.Fatal("claims under min_free: want 51 MiB (with the old object's MiB) and then nothing more")
	}
	d.Release(true)
	e.Release(true)
}

// TestConcurrentCommits: fills committed at once never hold more than
// MaxSize between them (each makes room with the others' bytes in
// view), and the index's size is the objects' on disk.
func TestConcurrentCommits(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 3<<20)
	var fills []*Fill
	for i := range 12 {
		f, _, err := begin(s, fmt.Sprintf("GET /c/%d", i))
		if err != nil {
			t.Fatal(err)
		}
		f.Write(payload(1<<20, uint64(i)))
		fills = append(fills, f)
	}
	var wg sync.WaitGroup
	for _, f := range fills {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.Commit(Meta{Status: 200})
			f.Release(true)
		}()
	}
	wg.Wait()
	if s.Size() > 3<<20 || s.Len() > 3 {
		t.Fatalf("12 concurrent commits of 1 MiB under a 3 MiB bound: %d bytes, %d objects", s.Size(), s.Len())
	}
	if s2 := open(t, dir, 3<<20); s2.Size() != s.Size() || s2.Len() != s.Len() {
		t.Fatalf("on disk: %d bytes in %d objects; the index said %d in %d", s2.Size(), s2.Len(), s.Size(), s.Len())
	}
}

// TestPurgeFill: a purge that names a fill under way keeps its bytes
// from being stored; its readers still get them.
func TestPurgeFill(t *testing.T) {
	s := open(t, t.TempDir(), 0)
	f, _, _ := begin(s, "GET /p/a")
	body := payload(1<<20, 7)
	f.Write(body)
	if n, fills := s.Purge("GET /p/", true); n != 0 || fills != 1 {
		t.Fatalf("purge: %d objects, %d fills; want 0 and 1", n, fills)
	}
	r, _ := s.Begin("GET /p/a")
	if _, err := f.Commit(Meta{Status: 200}); !errors.Is(err, ErrPurged) {
		t.Fatalf("commit of a purged fill: %v, want ErrPurged", err)
	}
	f.Release(true)
	if got, err := readAll(r); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a reader of the purged fill: %v, bytes match %v", err, bytes.Equal(got, body))
	}
	r.Release(false)
	if s.Lookup("GET /p/a") != nil || s.Len() != 0 {
		t.Fatal("a fill purged while under way was stored")
	}
}
