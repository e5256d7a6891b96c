package integrity

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/testtool"
)

// oddTree makes files b3sum has opinions about: names with spaces,
// newlines, backslashes and non-ASCII, an empty file, exact multiples of
// BLAKE3's 1024-byte chunk, and a sparse multi-GiB file.
func oddTree(t *testing.T, sparse int64) string {
	t.Helper()
	dir := t.TempDir()
	rng := rand.NewChaCha8([32]byte{9})
	write := func(name string, n int) {
		b := make([]byte, n)
		rng.Read(b)
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("plain.txt", 100)
	write("with space.bin", 5000)
	write("new\nline.txt", 10)
	write(`back\slash.txt`, 10)
	write("both\\and\nboth", 10)
	write("ünïcødé.dat", 2048)
	write("empty", 0)
	write("chunk1024", 1024)
	write("chunk8k", 8*1024)
	write("chunk1M", 1024*1024)
	write("chunk1M+1", 1024*1024+1)
	write("sub/dir/nested.bin", 70000)
	if sparse > 0 {
		f, err := os.Create(filepath.Join(dir, "sparse.img"))
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt([]byte("start"), 0)
		f.WriteAt([]byte("middle"), sparse/2)
		f.Truncate(sparse)
		f.Close()
	}
	return dir
}

func walk(t *testing.T, dir string) []string {
	var rel []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			r, _ := filepath.Rel(dir, p)
			rel = append(rel, r)
		}
		return nil
	})
	sort.Strings(rel)
	return rel
}

// TestManifestMatchesB3sum: our digests and manifest text equal b3sum's,
// byte for byte, for the whole odd tree.
func TestManifestMatchesB3sum(t *testing.T) {
	b3sum := testtool.Require(t, "b3sum")
	dir := oddTree(t, 3<<30)
	files := walk(t, dir)
	var entries []Entry
	for _, rel := range files {
		f, err := os.Open(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		d, err := SumRange(f, 0, st.Size())
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, Entry{Digest: d, Path: rel})
	}
	var ours bytes.Buffer
	WriteManifest(&ours, entries)
	cmd := exec.Command(b3sum, append([]string{"--"}, files...)...)
	cmd.Dir = dir
	theirs, err := cmd.Output()
	if err != nil {
		t.Fatalf("b3sum: %v", err)
	}
	if ours.String() != string(theirs) {
		t.Errorf("manifest differs from b3sum's:\nours:\n%s\nb3sum:\n%s", ours.String(), theirs)
	}
	// And b3sum --check accepts ours; ReadManifest reads b3sum's back.
	mf := filepath.Join(t.TempDir(), "B3SUMS")
	os.WriteFile(mf, ours.Bytes(), 0o644)
	check := exec.Command(b3sum, "--check", mf)
	check.Dir = dir
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("b3sum --check on our manifest: %v\n%s", err, out)
	}
	back, err := ReadManifest(bytes.NewReader(theirs))
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(entries) {
		t.Fatalf("read %d entries, want %d", len(back), len(entries))
	}
	for i := range back {
		if back[i] != entries[i] {
			t.Errorf("entry %d = %v, want %v", i, back[i], entries[i])
		}
	}
}

func TestReadManifestErrors(t *testing.T) {
	good := strings.Repeat("ab", 32)
	tests := []struct {
		in   string
		line int
		msg  string
	}{
		{good + "  a\nnot a line\n", 2, "expected 64 hex digits"},
		{good + " a\n", 1, "two spaces"},
		{strings.Repeat("zz", 32) + "  a\n", 1, "not 64 hex digits"},
		{good + "  a\n" + good + "  a\n", 2, `"a" already listed on line 1`},
		{good + "  /etc/passwd\n", 1, "leaves the manifest's root"},
		{good + "  ../up\n", 1, "leaves the manifest's root"},
		{good + "  a/../../b\n", 1, "leaves the manifest's root"},
		{`\` + good + `  bad\q` + "\n", 1, `unknown escape \q`},
		{`\` + good + `  trail\` + "\n", 1, "lone backslash"},
		{good + "  \n", 1, "expected 64 hex digits"},
	}
	for _, tt := range tests {
		_, err := ReadManifest(strings.NewReader(tt.in))
		var me *ManifestError
		if !errors.As(err, &me) || me.Line != tt.line || !strings.Contains(me.Msg, tt.msg) {
			t.Errorf("ReadManifest(%q) = %v, want line %d %q", tt.in, err, tt.line, tt.msg)
		}
	}
	es, err := ReadManifest(strings.NewReader(good + "  ./x\n\n" + good + "  with  two spaces\r\n"))
	if err != nil || len(es) != 2 || es[0].Path != "x" || es[1].Path != "with  two spaces" {
		t.Errorf("lenient forms: %v %v", es, err)
	}
}

func TestReader(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10000)
	want, _, _ := Sum(bytes.NewReader(data))
	bad := want
	bad[0] ^= 1
	tests := []struct {
		name string
		body []byte
		size int64
		want *Digest
		err  error
	}{
		{"ok", data, int64(len(data)), &want, nil},
		{"ok unknown size", data, -1, &want, nil},
		{"ok no digest", data, int64(len(data)), nil, nil},
		{"truncated", data[:len(data)-1], int64(len(data)), &want, ErrTruncated},
		{"too long", append(bytes.Clone(data), 'x'), int64(len(data)), &want, ErrTooLong},
		{"corrupted", append([]byte{'X'}, data[1:]...), int64(len(data)), &want, ErrMismatch},
		{"wrong digest", data, int64(len(data)), &bad, ErrMismatch},
	}
	for _, tt := range tests {
		r := NewReader(bytes.NewReader(tt.body), tt.size, tt.want)
		_, err := io.Copy(io.Discard, r)
		if !errors.Is(err, tt.err) || !errors.Is(r.Err(), tt.err) {
			t.Errorf("%s: copy err %v, Err %v; want %v", tt.name, err, r.Err(), tt.err)
		}
	}
	// A connection that breaks mid-body is a truncation.
	r := NewReader(io.MultiReader(bytes.NewReader(data[:100]), errReader{}), int64(len(data)), &want)
	if _, err := io.Copy(io.Discard, r); !errors.Is(err, ErrTruncated) {
		t.Errorf("broken body: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestCacheSaveLoad(t *testing.T) {
	c := NewCache(3)
	for i := 0; i < 5; i++ {
		c.Put(FileID{Dev: 1, Ino: uint64(i), Size: 10, MtimeNs: 99, CtimeNs: 7}, Digest{byte(i)})
	}
	if c.Len() != 3 {
		t.Errorf("len %d, want 3 (bounded)", c.Len())
	}
	c.PutSHA256(FileID{Dev: 1, Ino: 4, Size: 10, MtimeNs: 99, CtimeNs: 7}, SHA256{0xaa})
	p := filepath.Join(t.TempDir(), "cache")
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	c2 := NewCache(10)
	if err := c2.Load(p); err != nil {
		t.Fatal(err)
	}
	if d, ok := c2.Get(FileID{Dev: 1, Ino: 4, Size: 10, MtimeNs: 99, CtimeNs: 7}); !ok || d[0] != 4 {
		t.Errorf("loaded %v %v", d, ok)
	}
	if s, ok := c2.GetSHA256(FileID{Dev: 1, Ino: 4, Size: 10, MtimeNs: 99, CtimeNs: 7}); !ok || s[0] != 0xaa {
		t.Errorf("SHA-256 loaded %v %v", s, ok)
	}
	if _, ok := c2.GetSHA256(FileID{Dev: 1, Ino: 3, Size: 10, MtimeNs: 99, CtimeNs: 7}); ok {
		t.Error("a SHA-256 never computed came back")
	}
	if _, ok := c2.Get(FileID{Dev: 1, Ino: 0, Size: 10, MtimeNs: 99, CtimeNs: 7}); ok {
		t.Error("evicted entry came back")
	}
	if _, ok := c2.Get(FileID{Dev: 1, Ino: 4, Size: 10, MtimeNs: 100, CtimeNs: 7}); ok {
		t.Error("a different mtime matched")
	}
	// Bytes rewritten in place with the size and mtime kept (rsync
	// --inplace -t): only the change time differs, and it must not match.
	if _, ok := c2.Get(FileID{Dev: 1, Ino: 4, Size: 10, MtimeNs: 99, CtimeNs: 8}); ok {
		t.Error("a different change time matched")
	}
	os.WriteFile(p, []byte(cacheHeader+"\n1 2 3\n"), 0o644)
	if err := NewCache(0).Load(p); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("malformed cache file: %v", err)
	}
	// A cache saved by an engine that keyed digests without the change
	// time is not trusted: its digests may belong to older bytes.
	os.WriteFile(p, []byte("1 4 10 99 "+strings.Repeat("ab", 32)+"\n"), 0o644)
	if err := NewCache(0).Load(p); !errors.Is(err, ErrCacheVersion) {
		t.Errorf("cache of the previous version: %v, want ErrCacheVersion", err)
	}
	if err := NewCache(0).Load(filepath.Join(t.TempDir(), "none")); err != nil {
		t.Errorf("missing file: %v", err)
	}
}

func TestHeaderAndETag(t *testing.T) {
	d, _, _ := Sum(strings.NewReader("abc"))
	if h := d.HeaderValue(); !strings.HasPrefix(h, "blake3=:") || !strings.HasSuffix(h, ":") || len(h) != len("blake3=::")+44 {
		t.Errorf("header %q", h)
	}
	if e := d.ETag(); !strings.HasPrefix(e, `"b3-`) || strings.ContainsAny(e[1:len(e)-1], `"+/=`) {
		t.Errorf("etag %q", e)
	}
}

func FuzzManifest(f *testing.F) {
	good := strings.Repeat("ab", 32)
	f.Add(good + "  a\n\\" + good + "  b\\nc\\\\d\n")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, s string) {
		es, err := ReadManifest(strings.NewReader(s))
		if err != nil {
			var me *ManifestError
			if !errors.As(err, &me) || me.Line < 1 {
				t.Fatalf("error %v without a line", err)
			}
			return
		}
		// What was read writes back and reads again to the same.
		var b bytes.Buffer
		WriteManifest(&b, es)
		again, err := ReadManifest(&b)
		if err != nil || len(again) != len(es) {
			t.Fatalf("round trip: %v (%d vs %d)", err, len(again), len(es))
		}
		sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
		for i := range es {
			if es[i] != again[i] {
				t.Fatalf("round trip changed %q", es[i].Path)
			}
		}
	})
}

// TestHashTree: every file hashed in parallel, sorted; files that vanish
// or change mid-run are reported by name, not skipped.
func TestHashTree(t *testing.T) {
	dir := oddTree(t, 0)
	os.WriteFile(filepath.Join(dir, "goes.away"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "grows.log"), []byte("x"), 0o644)
	os.Symlink("plain.txt", filepath.Join(dir, "link"))
	var last Progress
	var mu sync.Mutex
	entries, errs, err := HashTree(dir, TreeOptions{
		Workers: 3,
		Skip:    func(rel string) bool { return rel == "plain.txt" },
		Progress: func(p Progress) {
			mu.Lock()
			if p.Files > last.Files {
				last = p
			}
			mu.Unlock()
		},
		beforeHash: func(rel string) {
			switch rel {
			case "goes.away":
				os.Remove(filepath.Join(dir, rel))
			case "grows.log":
				f, _ := os.OpenFile(filepath.Join(dir, rel), os.O_WRONLY|os.O_APPEND, 0)
				go func() { time.Sleep(time.Millisecond); f.Write(make([]byte, 1<<20)); f.Close() }()
				time.Sleep(5 * time.Millisecond)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]error{}
	for _, e := range errs {
		got[e.Path] = e.Err
	}
	if !errors.Is(got["goes.away"], ErrVanished) {
		t.Errorf("vanished file: %v", got["goes.away"])
	}
	for _, e := range entries {
		if e.Path == "plain.txt" || e.Path == "link" || e.Path == "goes.away" {
			t.Errorf("%s should not be in the manifest", e.Path)
		}
		if e.Path == "new\nline.txt" {
			f, _ := os.Open(filepath.Join(dir, e.Path))
			want, _, _ := Sum(f)
			f.Close()
			if want != e.Digest {
				t.Error("wrong digest")
			}
		}
	}
	if !sort.SliceIsSorted(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path }) {
		t.Error("entries not sorted")
	}
	if last.Files != last.TotalFiles || last.TotalFiles != len(entries)+len(errs) {
		t.Errorf("progress %+v for %d entries and %d errors", last, len(entries), len(errs))
	}
	if _, _, err := HashTree(filepath.Join(dir, "nope"), TreeOptions{}); err == nil {
		t.Error("a missing root is not an error")
	}
	// A file that grows while hashed: reported as changed (when the
	// append won the race) or hashed at its new length; never a digest of
	// bytes that are not there.
	if e, ok := got["grows.log"]; ok && !errors.Is(e, ErrChanged) {
		t.Errorf("grows.log: %v", e)
	}
}
