package fetch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mediaship/engine/integrity"
)

// FuzzParseContentRange: any Content-Range value is refused or gives a
// range inside the file it states.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-0/1", "bytes 5-9/100", "bytes */0", "bytes 9-5/100", "bytes 0-99/100", "bytes -1-5/10", "bytes 0-9223372036854775807/9223372036854775807", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		a, b, size, err := parseContentRange(v)
		if err == nil && (a < 0 || b < a || b >= size) {
			t.Fatalf("parseContentRange(%q) = %d-%d/%d, accepted", v, a, b, size)
		}
	})
}

// FuzzOutboardLink: any Link field values give a target or nothing,
// without panicking; a target comes from between angle brackets.
func FuzzOutboardLink(f *testing.F) {
	for _, s := range []string{`</f.bin.obao>; rel="blake3-outboard"`, `<a>; rel=next, <b>; rel="blake3-outboard"`, `<>; rel=blake3-outboard`, `<x`, `;;;`, ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		_ = OutboardLink([]string{v, v})
	})
}

// FuzzLoadState: any state file is refused or describes exactly the file
// it was asked about; never a bitmap of another length.
func FuzzLoadState(f *testing.F) {
	want := newState(10*integrity.GroupSize, integrity.Digest{1}, integrity.GroupSize, 10)
	dir := f.TempDir()
	good := filepath.Join(dir, "good")
	if err := want.save(good, []byte{0xff, 0x03}); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(good)
	f.Add(b)
	f.Add([]byte("engine-fetch-state 1\nsize 1\nblake3 00\ngroup 1\nverified \n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "s")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := loadState(p, want)
		if err != nil {
			return
		}
		if st.size != want.size || st.root != want.root || st.group != want.group || len(st.done) != len(want.done) {
			t.Fatalf("accepted a state of another file: %+v", st)
		}
	})
}
