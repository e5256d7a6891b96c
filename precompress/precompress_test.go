package precompress

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/internal/testtool"
)

// text returns n bytes of something like a web page: repetitive, but not
// one repeated line.
func text(seed byte, n int) []byte {
	rng := rand.New(rand.NewChaCha8([32]byte{seed}))
	words := []string{"<div class=\"item\">", "</div>\n", "function", "return", "const ", "{\"name\": ", "\"value\"", ", ", "model", "weights"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.Bytes()[:n]
}

func random(seed byte, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

var mtime = time.Date(2025, 6, 7, 8, 9, 10, 123456789, time.UTC)

func put(t *testing.T, p string, data []byte, mt time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, time.Time{}, mt); err != nil {
		t.Fatal(err)
	}
}

// site makes a tree with a bit of everything; the names that get
// sidecars are returned with their content.
func site(t *testing.T) (string, map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	want := map[string][]byte{
		"index.html":     text(1, 20<<10),
		"app.js":         text(2, 8<<10),
		"sub/data.json":  text(3, 5<<10),
		"sub/deep/a.svg": text(4, 2<<10),
	}
	for name, b := range want {
		put(t, filepath.Join(dir, name), b, mtime)
	}
	put(t, filepath.Join(dir, "small.css"), text(5, 100), mtime)           // under 1 KiB
	put(t, filepath.Join(dir, "random.txt"), random(6, 4<<10), mtime)      // compressible type, incompressible bytes
	put(t, filepath.Join(dir, "photo.jpg"), text(7, 4<<10), mtime)         // not a compressible type
	put(t, filepath.Join(dir, "model.safetensors"), text(8, 4<<10), mtime) // nor this
	put(t, filepath.Join(dir, "release.tar.gz"), random(9, 4<<10), mtime)  // an archive, not a sidecar
	put(t, filepath.Join(dir, ".hidden.js"), text(10, 4<<10), mtime)       // dotfile
	put(t, filepath.Join(dir, ".git/config.json"), text(11, 4<<10), mtime) // dot directory
	put(t, filepath.Join(dir, "secret/.env.txt"), text(12, 4<<10), mtime)  // target of a link below
	outside := filepath.Join(t.TempDir(), "outside.js")
	put(t, outside, text(13, 4<<10), mtime)
	for link, target := range map[string]string{
		"link.js":   "app.js",           // inside: gets sidecars beside the link
		"out.js":    outside,            // leaves the tree
		"env.txt":   "secret/.env.txt",  // leads to a dotfile
		"loop":      ".",                // a directory: not followed
		"dangling":  "nothing-here.txt", // nothing
		"sub/up.js": "../app.js",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	want["link.js"] = want["app.js"]
	want["sub/up.js"] = want["app.js"]
	return dir, want
}

// decode decompresses with Go's decoders (the Debian tools check the
// same files in TestDebianToolsDecompress).
func decode(t *testing.T, p string) []byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader
	switch filepath.Ext(p) {
	case ".gz":
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	case ".br":
		r = brotli.NewReader(f)
	case ".zst":
		d, err := zstd.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		r = d
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return b
}

var suffixes = []string{".br", ".zst", ".gz"}

// sidecarsIn lists every file named like a sidecar, and every temporary.
func sidecarsIn(t *testing.T, dir string) (sidecars, temps []string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case strings.HasPrefix(d.Name(), tempPrefix):
			temps = append(temps, rel)
		case slices.Contains(suffixes, filepath.Ext(p)) && rel != "release.tar.gz":
			sidecars = append(sidecars, rel)
		}
		return nil
	})
	return sidecars, temps
}

func run(t *testing.T, dir string, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), dir, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Errors) > 0 {
		t.Fatalf("Run: errors %v", rep.Errors)
	}
	return rep
}

func counts(r *Report) [6]int {
	return [6]int{r.Written, r.UpToDate, r.NoGain, r.Removed, r.TooSmall, r.Outside}
}

func TestRun(t *testing.T) {
	dir, want := site(t)
	rep := run(t, dir, Config{Workers: 3})
	// written, up to date, no gain, removed, too small, outside
	if got, w := counts(rep), [6]int{18, 0, 3, 0, 1, 2}; got != w {
		t.Errorf("first run: %v, want %v (%+v)", got, w, rep)
	}
	if rep.Compressible != 8 { // want's six, small.css, random.txt
		t.Errorf("compressible = %d, want 8", rep.Compressible)
	}
	var sumIn int64
	for _, b := range want {
		sumIn += 3 * int64(len(b))
	}
	if rep.BytesIn != sumIn || rep.BytesOut <= 0 || rep.BytesOut >= sumIn/2 {
		t.Errorf("bytes in %d out %d, want in %d and out much less", rep.BytesIn, rep.BytesOut, sumIn)
	}
	got, temps := sidecarsIn(t, dir)
	var expect []string
	for name := range want {
		for _, s := range suffixes {
			expect = append(expect, filepath.FromSlash(name)+s)
		}
	}
	slices.Sort(got)
	slices.Sort(expect)
	if !slices.Equal(got, expect) || len(temps) > 0 {
		t.Fatalf("sidecars\n%v\nwant\n%v\ntemporaries %v", got, expect, temps)
	}
	for _, side := range got {
		orig := want[filepath.ToSlash(strings.TrimSuffix(side, filepath.Ext(side)))]
		p := filepath.Join(dir, side)
		if b := decode(t, p); !bytes.Equal(b, orig) {
			t.Errorf("%s does not decompress to its file", side)
		}
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if !st.ModTime().Equal(mtime) {
			t.Errorf("%s: mtime %v, want the file's %v", side, st.ModTime(), mtime)
		}
		if st.Mode().Perm() != 0o640 {
			t.Errorf("%s: mode %v, want the file's 0640", side, st.Mode().Perm())
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			t.Errorf("%s is a link", side)
		}
	}

	// A second run writes nothing and keeps every sidecar (same inode).
	before, _ := os.Stat(filepath.Join(dir, "index.html.br"))
	rep = run(t, dir, Config{})
	if got, w := counts(rep), [6]int{0, 18, 3, 0, 1, 2}; got != w {
		t.Errorf("second run: %v, want %v", got, w)
	}
	if after, _ := os.Stat(filepath.Join(dir, "index.html.br")); !os.SameFile(before, after) {
		t.Error("the second run replaced an up-to-date sidecar")
	}

	// A modified file gets new sidecars (beside the links to it too).
	changed := text(20, 9<<10)
	put(t, filepath.Join(dir, "app.js"), changed, mtime.Add(time.Minute))
	rep = run(t, dir, Config{})
	if got, w := counts(rep), [6]int{9, 9, 3, 0, 1, 2}; got != w {
		t.Errorf("after a change: %v, want %v", got, w)
	}
	for _, name := range []string{"app.js", "link.js", "sub/up.js"} {
		for _, s := range suffixes {
			p := filepath.Join(dir, name+s)
			if !bytes.Equal(decode(t, p), changed) {
				t.Errorf("%s not rewritten", name+s)
			}
			if st, _ := os.Stat(p); !st.ModTime().Equal(mtime.Add(time.Minute)) {
				t.Errorf("%s: mtime %v", name+s, st.ModTime())
			}
		}
	}

	// A file that shrank under the floor, and one whose new content
	// does not compress, lose their stale sidecars; an up-to-date
	// sidecar of a file under the floor now (a larger floor) stays.
	put(t, filepath.Join(dir, "sub/deep/a.svg"), text(21, 500), mtime.Add(time.Hour))
	put(t, filepath.Join(dir, "sub/data.json"), random(22, 5<<10), mtime.Add(time.Hour))
	put(t, filepath.Join(dir, "random.txt.gz"), []byte("stale"), mtime.Add(-time.Hour))
	rep = run(t, dir, Config{})
	if got, w := counts(rep), [6]int{0, 12, 6, 7, 2, 2}; got != w {
		t.Errorf("after shrinking: %v, want %v", got, w)
	}
	for _, p := range []string{"sub/deep/a.svg.br", "sub/data.json.gz", "random.txt.gz"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: stale sidecar not removed (%v)", p, err)
		}
	}
	rep = run(t, dir, Config{MinSize: 100 << 10})
	if rep.Removed != 0 || rep.UpToDate != 12 {
		t.Errorf("larger floor: removed %d, up to date %d; want 0 and 12", rep.Removed, rep.UpToDate)
	}
}

func TestRunOptions(t *testing.T) {
	dir, _ := site(t)
	// A dry run writes nothing and says what it would do.
	rep := run(t, dir, Config{DryRun: true, Codings: []files.Coding{files.Codings[0]}})
	if got, _ := sidecarsIn(t, dir); len(got) != 0 {
		t.Fatalf("a dry run wrote %v", got)
	}
	if len(rep.Planned) != 7 || !slices.Contains(rep.Planned, filepath.Join(dir, "index.html.br")) {
		t.Errorf("planned %v", rep.Planned)
	}
	// One coding, no floor, no margin: only .gz, for small.css too,
	// and for random.txt only if a byte shorter (it is not).
	rep = run(t, dir, Config{Codings: []files.Coding{files.Codings[2]}, MinSize: -1, MinSaving: -1})
	got, _ := sidecarsIn(t, dir)
	if rep.Written != 7 || rep.NoGain != 1 || len(got) != 7 || !slices.Contains(got, "small.css.gz") {
		t.Errorf("gzip only, no floor: %+v\n%v", rep, got)
	}
	for _, s := range got {
		if filepath.Ext(s) != ".gz" {
			t.Errorf("wrote %s", s)
		}
	}
	// A margin no text reaches: nothing kept.
	put(t, filepath.Join(dir, "index.html"), text(1, 20<<10), mtime.Add(time.Second))
	rep = run(t, dir, Config{Codings: []files.Coding{files.Codings[0]}, MinSaving: 99.9})
	if rep.Written != 0 || rep.NoGain != 7 {
		t.Errorf("99.9%% margin: %+v", rep)
	}
	if _, err := Run(context.Background(), dir, Config{MinSaving: 100}); err == nil {
		t.Error("a 100% margin accepted")
	}
}

func TestCheck(t *testing.T) {
	dir, _ := site(t)
	run(t, dir, Config{})
	rep, err := Check(dir, Config{})
	if err != nil || !rep.OK() || rep.Sidecars != 18 {
		t.Fatalf("check after a run: %v %+v", err, rep)
	}
	put(t, filepath.Join(dir, "index.html"), text(1, 20<<10), mtime.Add(time.Hour))    // sidecars older
	os.Chtimes(filepath.Join(dir, "app.js.gz"), time.Time{}, mtime.Add(time.Hour))     // one newer
	os.Remove(filepath.Join(dir, "sub/data.json"))                                     // orphans
	put(t, filepath.Join(dir, "sub", tempPrefix+"123"+tempSuffix), []byte("x"), mtime) // a leftover
	put(t, filepath.Join(dir, "other.tar.gz"), random(30, 100), mtime)                 // an archive
	put(t, filepath.Join(dir, "orphan.csv.zst"), random(31, 100), mtime)               // an orphan by name
	rep, err = Check(dir, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range rep.Problems {
		rel, _ := filepath.Rel(dir, p.Sidecar)
		got = append(got, p.Kind+" "+filepath.ToSlash(rel))
		if p.Kind == Older && (!p.FileMtime.Equal(mtime.Add(time.Hour)) || !p.SidecarMtime.Equal(mtime)) {
			t.Errorf("%+v: wrong times", p)
		}
	}
	want := []string{
		"newer app.js.gz",
		"older index.html.br", "older index.html.gz", "older index.html.zst",
		"orphaned orphan.csv.zst",
		"temporary sub/" + tempPrefix + "123" + tempSuffix,
		"orphaned sub/data.json.br", "orphaned sub/data.json.gz", "orphaned sub/data.json.zst",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || rep.OK() {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Only the codings asked about.
	rep, _ = Check(dir, Config{Codings: []files.Coding{files.Codings[0]}})
	for _, p := range rep.Problems {
		if p.Kind != Temporary && !strings.HasSuffix(p.Sidecar, ".br") {
			t.Errorf("br only: %+v", p)
		}
	}
	// A run repairs what it can: stale sidecars rewritten, the leftover
	// removed; orphans stay (they are reported, never guessed about).
	rep2 := run(t, dir, Config{})
	if rep2.TempsRemoved != 1 {
		t.Errorf("temporaries removed: %d", rep2.TempsRemoved)
	}
	rep, _ = Check(dir, Config{})
	if len(rep.Problems) != 4 {
		t.Errorf("after a run: %+v", rep.Problems)
	}
}

func TestCheckBadRoot(t *testing.T) {
	dir := t.TempDir()
	put(t, filepath.Join(dir, "f.txt"), []byte("x"), mtime)
	for _, root := range []string{filepath.Join(dir, "missing"), filepath.Join(dir, "f.txt")} {
		if _, err := Check(root, Config{}); err == nil || !strings.Contains(err.Error(), root) {
			t.Errorf("Check(%s) = %v, want an error naming it", root, err)
		}
		if _, err := Run(context.Background(), root, Config{}); err == nil || !strings.Contains(err.Error(), root) {
			t.Errorf("Run(%s) = %v, want an error naming it", root, err)
		}
	}
}

// TestAtomic: a compression that fails or is interrupted half-way leaves
// the old sidecar as it was and no temporary.
func TestAtomic(t *testing.T) {
	dir := t.TempDir()
	old := text(40, 300<<10)
	p := filepath.Join(dir, "big.json")
	put(t, p, old, mtime)
	run(t, dir, Config{Codings: []files.Coding{files.Codings[2]}})
	oldSide, _ := os.ReadFile(p + ".gz")

	// The file changes while it is compressed: an error, the old
	// sidecar stays.
	put(t, p, text(41, 300<<10), mtime.Add(time.Minute))
	rep, err := Run(context.Background(), dir, Config{Codings: []files.Coding{files.Codings[2]},
		midway: func(string) {
			f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte("more"))
			f.Close()
		}})
	if err != nil || len(rep.Errors) != 1 || !errors.Is(rep.Errors[0].Err, ErrChanged) || rep.Errors[0].Path != p+".gz" {
		t.Fatalf("changed mid-way: %v %+v", err, rep)
	}
	if b, _ := os.ReadFile(p + ".gz"); !bytes.Equal(b, oldSide) {
		t.Error("the old sidecar was replaced by a failed compression")
	}
	if _, temps := sidecarsIn(t, dir); len(temps) > 0 {
		t.Errorf("temporaries left: %v", temps)
	}

	// Interrupted: the run stops, the old sidecar stays.
	put(t, p, text(42, 300<<10), mtime.Add(2*time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rep, err = Run(ctx, dir, Config{Codings: []files.Coding{files.Codings[2]}, midway: func(string) { cancel() }})
	if !errors.Is(err, context.Canceled) || rep.Written != 0 || len(rep.Errors) != 0 {
		t.Fatalf("cancelled: %v %+v", err, rep)
	}
	if b, _ := os.ReadFile(p + ".gz"); !bytes.Equal(b, oldSide) {
		t.Error("the old sidecar was replaced by an interrupted compression")
	}
	if _, temps := sidecarsIn(t, dir); len(temps) > 0 {
		t.Errorf("temporaries left: %v", temps)
	}
	// The next run does it.
	if rep := run(t, dir, Config{Codings: []files.Coding{files.Codings[2]}}); rep.Written != 1 {
		t.Errorf("after the interruption: %+v", rep)
	}
}

// TestDebianToolsDecompress: the reference decoders (gzip, brotli and
// zstd from Debian) read every sidecar back to its file, a large one
// with long-distance matches included.
func TestDebianToolsDecompress(t *testing.T) {
	tools := map[string]string{".gz": testtool.Require(t, "gzip"), ".br": testtool.Require(t, "brotli"), ".zst": testtool.Require(t, "zstd")}
	dir, want := site(t)
	// 256 KiB with its first 64 KiB repeated at the end: matches
	// farther back than gzip's 32 KiB window.
	big := text(50, 192<<10)
	big = append(big, big[:64<<10]...)
	put(t, filepath.Join(dir, "big.csv"), big, mtime)
	want["big.csv"] = big
	run(t, dir, Config{})
	for name, orig := range want {
		for sfx, tool := range tools {
			p := filepath.Join(dir, name+sfx)
			out, err := exec.Command(tool, "-d", "-c", p).Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					err = errors.New(string(ee.Stderr))
				}
				t.Errorf("%s -d %s: %v", filepath.Base(tool), name+sfx, err)
				continue
			}
			if !bytes.Equal(out, orig) {
				t.Errorf("%s -d %s: %d bytes, not the file's %d", filepath.Base(tool), name+sfx, len(out), len(orig))
			}
		}
	}
}

func TestCompressible(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"index.html", true}, {"style.CSS", true}, {"app.js", true}, {"app.mjs", true}, {"app.js.map", true},
		{"data.json", true}, {"data.csv", true}, {"data.tsv", true}, {"README.md", true}, {"notes.txt", true},
		{"feed.xml", true}, {"logo.svg", true}, {"site.webmanifest", true}, {"feed.atom", true},
		{"x.wasm", true}, {"favicon.ico", true}, {"font.ttf", true}, {"cfg.yaml", true}, {"live.m3u8", true},
		{"photo.jpg", false}, {"photo.png", false}, {"photo.webp", false}, {"photo.avif", false},
		{"clip.mp4", false}, {"song.mp3", false}, {"font.woff2", false}, {"doc.pdf", false},
		{"a.zip", false}, {"a.gz", false}, {"a.tar.gz", false}, {"a.xz", false}, {"a.zst", false}, {"a.br", false},
		{"a.7z", false}, {"a.tar", false}, {"disk.iso", false}, {"model.safetensors", false}, {"model.gguf", false},
		{"blob.bin", false}, {"noext", false}, {"app.js.br", false}, {"app.js.gz", false}, {"data.json.zst", false},
	} {
		if got := Compressible(tt.name); got != tt.want {
			t.Errorf("Compressible(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseCodings(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		ok   bool
	}{
		{"br,zstd,gzip", []string{"br", "zstd", "gzip"}, true},
		{"gzip", []string{"gzip"}, true},
		{" GZ , zst,br,br", []string{"gzip", "zstd", "br"}, true},
		{"deflate", nil, false},
		{"", nil, false},
	} {
		cs, err := ParseCodings(tt.in)
		var got []string
		for _, c := range cs {
			got = append(got, c.Name)
		}
		if (err == nil) != tt.ok || !slices.Equal(got, tt.want) {
			t.Errorf("ParseCodings(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
