package files

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestCleanPath(t *testing.T) {
	tests := []struct {
		in, rel string
		slash   bool
		ok      bool
	}{
		{"/", "", true, true},
		{"/a.txt", "a.txt", false, true},
		{"/a/b/", "a/b", true, true},
		{"//a///b", "a/b", false, true},
		{"/./a/./b", "a/b", false, true},
		{"/a/.", "a", false, true},
		{"/space%20name", "space name", false, true},
		{"/%E2%82%AC", "\u20ac", false, true},
		{"/a%2Fb", "a/b", false, true},
		{"/%252e%252e", "%2e%2e", false, true},
		{"/..", "", false, false},
		{"/a/../b", "", false, false},
		{"/%2e%2e/x", "", false, false},
		{"/.%2e/x", "", false, false},
		{"/a/..%2f", "", false, false},
		{"/a%00b", "", false, false},
		{"/a%5cb", "", false, false},
		{"/a\\b", "", false, false},
		{"/a%", "", false, false},
		{"/a%4", "", false, false},
		{"/a%zz", "", false, false},
		{"a", "", false, false},
		{"", "", false, false},
		{"/...", "...", false, true},
		{"/..a", "..a", false, true},
	}
	for _, tt := range tests {
		rel, slash, err := CleanPath([]byte(tt.in), nil)
		if (err == nil) != tt.ok || (tt.ok && (string(rel) != tt.rel || slash != tt.slash)) {
			t.Errorf("CleanPath(%q) = %q, %v, %v; want %q, %v, ok=%v", tt.in, rel, slash, err, tt.rel, tt.slash, tt.ok)
		}
	}
}

func TestCleanPathAllocs(t *testing.T) {
	buf := make([]byte, 0, 64)
	in := []byte("/models/llama/weights%20v2.bin")
	if n := testing.AllocsPerRun(100, func() { CleanPath(in, buf) }); n != 0 {
		t.Errorf("CleanPath allocates %v times", n)
	}
}

func TestParseRange(t *testing.T) {
	tests := []struct {
		in     string
		size   int64
		want   []Range
		result rangeResult
	}{
		{"bytes=0-0", 10, []Range{{0, 1}}, rangeOK},
		{"bytes=0-", 10, []Range{{0, 10}}, rangeOK},
		{"bytes=-3", 10, []Range{{7, 3}}, rangeOK},
		{"bytes=-30", 10, []Range{{0, 10}}, rangeOK},
		{"bytes=5-100", 10, []Range{{5, 5}}, rangeOK},
		{"BYTES=1-2", 10, []Range{{1, 2}}, rangeOK},
		{"bytes=0-1, 4-5,8-", 10, []Range{{0, 2}, {4, 2}, {8, 2}}, rangeOK},
		{"bytes=0-1,,3-3", 10, []Range{{0, 2}, {3, 1}}, rangeOK},
		{"bytes=10-", 10, nil, rangeUnsatisfiable},
		{"bytes=-0", 10, nil, rangeUnsatisfiable},
		{"bytes=20-30, 40-", 10, nil, rangeUnsatisfiable},
		{"bytes=20-30, 1-1", 10, []Range{{1, 1}}, rangeOK},
		{"bytes=3-2", 10, nil, rangeIgnore},
		{"bytes=a-b", 10, nil, rangeIgnore},
		{"bytes=1", 10, nil, rangeIgnore},
		{"bytes=", 10, nil, rangeIgnore},
		{"bytes=--1", 10, nil, rangeIgnore},
		{"bytes=+1-2", 10, nil, rangeIgnore},
		{"items=0-1", 10, nil, rangeIgnore},
		{"bytes=0-1", 0, nil, rangeIgnore},
		{"bytes=0-9,0-9,0-9", 10, nil, rangeIgnore}, // more than the size
		{"bytes=0-,0-", 10, nil, rangeIgnore},       // twice the file: nginx serves it whole
		{"bytes=0-5,5-9", 10, nil, rangeIgnore},     // 11 bytes of 10
		{"bytes=0-4,5-9", 10, []Range{{0, 10}}, rangeOK},
		{"bytes=0-3,2-5", 100, []Range{{0, 6}}, rangeOK},
		{"bytes=50-59,0-9,10-19", 100, []Range{{0, 20}, {50, 10}}, rangeOK},
		{"bytes=-5,0-1", 100, []Range{{0, 2}, {95, 5}}, rangeOK},
		{"bytes=20-29,22-24", 100, []Range{{20, 10}}, rangeOK},
		{"bytes=0-0,2-2", 100, []Range{{0, 1}, {2, 1}}, rangeOK},
		{"bytes=0-99999999999999999999", 10, nil, rangeIgnore},
	}
	for _, tt := range tests {
		got, res := ParseRange([]byte(tt.in), tt.size, nil)
		if res != tt.result || (res == rangeOK && !slices.Equal(got, tt.want)) {
			t.Errorf("ParseRange(%q, %d) = %v %v, want %v %v", tt.in, tt.size, got, res, tt.want, tt.result)
		}
	}
}

func TestAcceptQ(t *testing.T) {
	tests := []struct {
		ae, coding string
		want       int
	}{
		{"br", "br", 1000},
		{"gzip, br;q=0.5", "br", 500},
		{"gzip;q=0.123", "gzip", 123},
		{"gzip;q=1.0", "gzip", 1000},
		{"gzip;q=0", "gzip", 0},
		{"x-gzip", "gzip", 1000},
		{"*", "zstd", 1000},
		{"*;q=0.2, br;q=0.9", "br", 900},
		{"*;q=0.2, br;q=0.9", "gzip", 200},
		{"identity", "br", 0},
		{"BR", "br", 1000},
		{"br;q=2", "br", 0},
		{"br;q=0.5555", "br", 0},
		{"br ; q=0.3", "br", 300},
		{"", "br", 0},
	}
	for _, tt := range tests {
		if got := acceptQ([]byte(tt.ae), tt.coding); got != tt.want {
			t.Errorf("acceptQ(%q, %s) = %d, want %d", tt.ae, tt.coding, got, tt.want)
		}
	}
}

type hdrs map[string]string

func (h hdrs) Get(name string) []byte {
	if v, ok := h[name]; ok {
		return []byte(v)
	}
	return nil
}

func TestPreconditions(t *testing.T) {
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	etag := `"abc"`
	lm := httpDate(mtime)
	before := httpDate(mtime.Add(-time.Second))
	after := httpDate(mtime.Add(time.Second))
	tests := []struct {
		h    hdrs
		want precondition
	}{
		{hdrs{}, condProceed},
		{hdrs{"if-match": `"abc"`}, condProceed},
		{hdrs{"if-match": `"x", "abc"`}, condProceed},
		{hdrs{"if-match": `W/"abc"`}, condFailed},
		{hdrs{"if-match": `*`}, condProceed},
		{hdrs{"if-match": `"x"`}, condFailed},
		{hdrs{"if-match": `garbage`}, condFailed},
		{hdrs{"if-unmodified-since": lm}, condProceed},
		{hdrs{"if-unmodified-since": before}, condFailed},
		{hdrs{"if-unmodified-since": "not a date"}, condProceed},
		{hdrs{"if-match": `"abc"`, "if-unmodified-since": before}, condProceed}, // If-Match wins
		{hdrs{"if-none-match": `"abc"`}, condNotModified},
		{hdrs{"if-none-match": `W/"abc"`}, condNotModified},
		{hdrs{"if-none-match": `"x"`}, condProceed},
		{hdrs{"if-modified-since": lm}, condNotModified},
		{hdrs{"if-modified-since": after}, condNotModified},
		{hdrs{"if-modified-since": before}, condProceed},
		{hdrs{"if-modified-since": "Sunday, 06-Nov-94 08:49:37 GMT"}, condProceed},
		{hdrs{"if-none-match": `"x"`, "if-modified-since": after}, condProceed}, // INM wins
		{hdrs{"if-match": `"x"`, "if-none-match": `"abc"`}, condFailed},
	}
	for _, tt := range tests {
		if got := evalPreconditions(tt.h, etag, `"old"`, "", mtime); got != tt.want {
			t.Errorf("evalPreconditions(%v) = %v, want %v", tt.h, got, tt.want)
		}
	}
	if !ifRangeAllows(hdrs{"if-range": `"abc"`}, etag, `"old"`, "", lm) || ifRangeAllows(hdrs{"if-range": `W/"abc"`}, etag, `"old"`, "", lm) ||
		!ifRangeAllows(hdrs{"if-range": lm}, etag, `"old"`, "", lm) || ifRangeAllows(hdrs{"if-range": before}, etag, `"old"`, "", lm) {
		t.Error("ifRangeAllows")
	}
	// Another tag of the same bytes (an edge cache object's origin's).
	if got := evalPreconditions(hdrs{"if-none-match": `"origin"`}, etag, `"old"`, `"origin"`, mtime); got != condNotModified {
		t.Errorf("If-None-Match with the other tag: %v", got)
	}
	if got := evalPreconditions(hdrs{"if-match": `"origin"`}, etag, `"old"`, `"origin"`, mtime); got != condProceed {
		t.Errorf("If-Match with the other tag: %v", got)
	}
	if !ifRangeAllows(hdrs{"if-range": `"origin"`}, etag, `"old"`, `"origin"`, lm) || ifRangeAllows(hdrs{"if-range": `"origin"`}, etag, `"old"`, "", lm) {
		t.Error("ifRangeAllows with the other tag")
	}
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-0", "bytes=-5", "bytes=1-,2-3", "bytes=5-1", "bytes=0-,0-", "bytes=9-9,0-1,2-3,-1"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, v string, size int64) {
		if size < 0 {
			return
		}
		rs, res := ParseRange([]byte(v), size, nil)
		if res != rangeOK {
			return
		}
		var total int64
		for i, r := range rs {
			if r.Off < 0 || r.Len <= 0 || r.Off+r.Len > size {
				t.Fatalf("range %+v outside size %d", r, size)
			}
			if i > 0 && r.Off <= rs[i-1].Off+rs[i-1].Len {
				t.Fatalf("ranges %+v and %+v overlap or touch: not coalesced", rs[i-1], r)
			}
			total += r.Len
		}
		if total > size || len(rs) > maxRanges {
			t.Fatalf("%d ranges, %d bytes of %d", len(rs), total, size)
		}
	})
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/%2e%2e/", "/a%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, _, err := CleanPath([]byte(p), nil)
		if err != nil {
			return
		}
		for _, seg := range slices.Collect(func(yield func(string) bool) {
			start := 0
			for i := 0; i <= len(rel); i++ {
				if i == len(rel) || rel[i] == '/' {
					if !yield(string(rel[start:i])) {
						return
					}
					start = i + 1
				}
			}
		}) {
			if seg == ".." || seg == "." || (seg == "" && len(rel) > 0) {
				t.Fatalf("CleanPath(%q) = %q has segment %q", p, rel, seg)
			}
		}
		for _, c := range rel {
			if c == 0 || c == '\\' {
				t.Fatalf("CleanPath(%q) = %q", p, rel)
			}
		}
	})
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want Kind
	}{
		{&os.PathError{Op: "openat2", Err: unix.ENOENT}, KindMissing},
		{&os.PathError{Op: "openat2", Err: unix.ENOTDIR}, KindMissing},
		{&os.PathError{Op: "openat2", Err: unix.ENAMETOOLONG}, KindMissing},
		{&os.PathError{Op: "openat2", Err: unix.EACCES}, KindForbidden},
		{&os.PathError{Op: "openat2", Err: unix.EPERM}, KindForbidden},
		{errEscapes, KindForbidden},
		{&os.PathError{Op: "openat2", Err: unix.ELOOP}, KindForbidden}, // a symbolic link loop: 403, not 500
		{&os.PathError{Op: "openat2", Err: unix.EIO}, KindError},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// BenchmarkServeHit measures the reactor's part of a cached small-file
// request: path cleaning, cache lookup, preconditions, the response plan.
func BenchmarkServeHit(b *testing.B) {
	dir := b.TempDir()
	os.WriteFile(dir+"/1k.bin", make([]byte, 1024), 0o644)
	c := NewCache(Config{})
	defer c.Close()
	root, err := NewRoot(dir, false)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	site := &Site{Root: root, Index: []string{"index.html"}, Precompressed: true}
	req := &Request{Path: []byte("/1k.bin"), Header: hdrs{"accept-encoding": "gzip, br"}}
	var s Scratch
	for !c.Serve(site, req, &s) {
		s.Fetch(c, site)
	}
	s.Reset()
	b.ReportAllocs()
	for b.Loop() {
		if !c.Serve(site, req, &s) {
			b.Fatal("miss after warm-up")
		}
		s.Reset()
	}
}

func TestErrorResponseKeepsStatus(t *testing.T) {
	// Every status the engine answers with has its page; an unknown one
	// would silently become 500.
	for _, code := range []int{301, 400, 403, 404, 405, 408, 412, 414, 416, 421, 431, 500, 501, 503, 505} {
		var r Response
		ErrorResponse(&r, code)
		if r.Status != code || r.ContentLength != int64(len(r.Parts[0].Mem)) {
			t.Errorf("ErrorResponse(%d) = status %d, length %d", code, r.Status, r.ContentLength)
		}
	}
}

// TestMissingPathsKeepFiles: a flood of requests for paths that do not
// exist must not push the files being served out of the cache (each
// eviction costs a reopen, and a rehash where digests are not persisted).
func TestMissingPathsKeepFiles(t *testing.T) {
	dir := t.TempDir()
	c := NewCache(Config{MaxEntries: 40})
	defer c.Close()
	root, err := NewRoot(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var names []string
	for i := 0; i < 20; i++ {
		n := "f" + string(rune('a'+i))
		os.WriteFile(dir+"/"+n, []byte(n), 0o644)
		names = append(names, n)
	}
	// Opened after every write: the directory is watched from the first
	// open, so no event of the writes can invalidate an entry.
	for _, n := range names {
		c.Open(root, n).Release()
	}
	for i := 0; i < 2000; i++ {
		e := c.Open(root, "missing-"+time.Duration(i).String())
		if e.Kind != KindMissing {
			t.Fatalf("kind %v", e.Kind)
		}
		e.Release()
	}
	for _, n := range names {
		e, _ := c.Lookup(root, []byte(n), nil)
		if e == nil {
			t.Errorf("%s was evicted by missing paths", n)
			continue
		}
		e.Release()
	}
	if l := c.Len(); l > 40 {
		t.Errorf("cache holds %d entries, bound 40", l)
	}
}

// TestListingLeavesOutUnrequestable: a name no request can name (a
// backslash: CleanPath refuses it) is not listed, so every link of a
// listing opens its file (TestBrowserDirectoryListing found the 400).
func TestListingLeavesOutUnrequestable(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"ok.txt", `back\slash.txt`} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := CleanPath(AppendPathEscaped([]byte("/"), n, false), nil)
		if (err == nil) != requestable(n) {
			t.Errorf("requestable(%q) = %v, but CleanPath of its link gives %v", n, requestable(n), err)
		}
	}
	root, err := NewRoot(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	out := string(listDirectory(root, "", false))
	if !strings.Contains(out, "ok.txt") || strings.Contains(out, "slash") {
		t.Errorf("listing shows ok.txt %v and the backslashed name %v, want only ok.txt:\n%s",
			strings.Contains(out, "ok.txt"), strings.Contains(out, "slash"), out)
	}
}
