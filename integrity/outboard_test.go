package integrity

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// baoInput is the input of Bao's test vectors: a 4-byte little-endian
// counter starting at 1, cut to n bytes.
func baoInput(n int) []byte {
	b := make([]byte, n+4)
	for i := 0; i*4 < n; i++ {
		binary.LittleEndian.PutUint32(b[i*4:], uint32(i+1))
	}
	return b[:n]
}

// memWriterAt is an io.WriterAt over a slice of fixed size.
type memWriterAt []byte

func (m memWriterAt) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }

func outboardOf(t testing.TB, data []byte, group int) ([]byte, Digest) {
	t.Helper()
	ob := make(memWriterAt, outboardSize(int64(len(data)), group))
	root, err := sumOutboard(bytes.NewReader(data), int64(len(data)), ob, group)
	if err != nil {
		t.Fatalf("sumOutboard(%d bytes, group %d): %v", len(data), group, err)
	}
	return ob, root
}

// TestOutboardBaoVectors checks the tree writer and reader against the
// outboard cases of Bao's published test vectors (standard Bao: groups of
// one chunk), corruptions included.
func TestOutboardBaoVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/bao-outboard-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Outboard []struct {
			InputLen            int    `json:"input_len"`
			OutputLen           int    `json:"output_len"`
			BaoHash             string `json:"bao_hash"`
			EncodedBlake3       string `json:"encoded_blake3"`
			OutboardCorruptions []int  `json:"outboard_corruptions"`
			InputCorruptions    []int  `json:"input_corruptions"`
		} `json:"outboard"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Outboard) == 0 {
		t.Fatal("no vectors")
	}
	for _, c := range v.Outboard {
		in := baoInput(c.InputLen)
		ob, root := outboardOf(t, in, 0)
		if root.String() != c.BaoHash {
			t.Errorf("len %d: root %s, want %s", c.InputLen, root, c.BaoHash)
		}
		if len(ob) != c.OutputLen {
			t.Errorf("len %d: outboard of %d bytes, want %d", c.InputLen, len(ob), c.OutputLen)
		}
		if got, _, _ := Sum(bytes.NewReader(ob)); got.String() != c.EncodedBlake3 {
			t.Errorf("len %d: outboard's BLAKE3 %s, want %s", c.InputLen, got, c.EncodedBlake3)
		}
		o, err := parseOutboard(ob, root, int64(c.InputLen), 0)
		if err != nil {
			t.Fatalf("len %d: parseOutboard: %v", c.InputLen, err)
		}
		for i := range o.Groups() {
			off, n := o.Group(i)
			if err := o.Verify(i, in[off:off+n]); err != nil {
				t.Errorf("len %d: group %d: %v", c.InputLen, i, err)
			}
		}
		for _, at := range c.OutboardCorruptions {
			bad := bytes.Clone(ob)
			bad[at] ^= 1
			if _, err := parseOutboard(bad, root, int64(c.InputLen), 0); err == nil {
				t.Errorf("len %d: outboard with a bit flipped at %d parsed", c.InputLen, at)
			}
		}
		for _, at := range c.InputCorruptions {
			bad := bytes.Clone(in)
			bad[at] ^= 1
			i := int64(at) / o.GroupSize()
			off, n := o.Group(i)
			if err := o.Verify(i, bad[off:off+n]); !errors.Is(err, ErrGroupMismatch) {
				t.Errorf("len %d: input with a bit flipped at %d: Verify(group %d) = %v, want ErrGroupMismatch", c.InputLen, at, i, err)
			}
		}
	}
}

// TestOutboardGroups checks the engine's own group size: the root is the
// file's BLAKE3 (Sum's, so Repr-Digest's and b3sum's), every group
// verifies alone, and a flipped byte, a short group, a wrong root or a
// cut tree is refused.
func TestOutboardGroups(t *testing.T) {
	src := rand.NewChaCha8([32]byte{37})
	rng := rand.New(src)
	for _, size := range []int{0, 1, 1024, GroupSize - 1, GroupSize, GroupSize + 1, 3*GroupSize + 5, 8 * GroupSize, 11*GroupSize - 7} {
		data := make([]byte, size)
		src.Read(data)
		want, _, _ := Sum(bytes.NewReader(data))
		ob, root := outboardOf(t, data, GroupLog)
		if root != want {
			t.Fatalf("size %d: outboard root %s, BLAKE3 %s", size, root, want)
		}
		if int64(len(ob)) != OutboardSize(int64(size)) {
			t.Fatalf("size %d: outboard %d bytes, OutboardSize says %d", size, len(ob), OutboardSize(int64(size)))
		}
		o, err := ParseOutboard(ob, root, int64(size))
		if err != nil {
			t.Fatalf("size %d: ParseOutboard: %v", size, err)
		}
		if o.Groups() != Groups(int64(size), GroupLog) {
			t.Fatalf("size %d: %d groups", size, o.Groups())
		}
		for i := range o.Groups() {
			off, n := o.Group(i)
			if err := o.Verify(i, data[off:off+n]); err != nil {
				t.Fatalf("size %d: group %d: %v", size, i, err)
			}
			bad := bytes.Clone(data[off : off+n])
			bad[rng.IntN(len(bad))] ^= 0x80
			if err := o.Verify(i, bad); !errors.Is(err, ErrGroupMismatch) {
				t.Errorf("size %d: group %d with a flipped byte: %v, want ErrGroupMismatch", size, i, err)
			}
			if err := o.Verify(i, data[off:off+n-1]); !errors.Is(err, ErrGroupMismatch) {
				t.Errorf("size %d: group %d one byte short: %v, want ErrGroupMismatch", size, i, err)
			}
			if o.Groups() > 1 {
				other := (i + 1) % o.Groups()
				ooff, on := o.Group(other)
				if on == n {
					if err := o.Verify(i, data[ooff:ooff+on]); err == nil {
						t.Errorf("size %d: group %d's bytes passed as group %d", size, other, i)
					}
				}
			}
		}
		wrong := root
		wrong[5] ^= 1
		wo, err := ParseOutboard(ob, wrong, int64(size))
		switch {
		case o.Groups() > 1 && err == nil:
			t.Errorf("size %d: outboard accepted under a wrong root", size)
		case o.Groups() == 1 && err != nil:
			t.Errorf("size %d: the 8-byte outboard of one group refused: %v", size, err)
		case o.Groups() == 1 && wo.Verify(0, data) == nil: // one group: its bytes are checked against the root
			t.Errorf("size %d: the one group verified under a wrong root", size)
		}
		if _, err := ParseOutboard(ob, root, int64(size)+1); err == nil {
			t.Errorf("size %d: outboard accepted for another size", size)
		}
		if len(ob) > 8 {
			if _, err := ParseOutboard(ob[:len(ob)-1], root, int64(size)); !errors.Is(err, ErrOutboardMalformed) {
				t.Errorf("size %d: cut outboard: %v, want ErrOutboardMalformed", size, err)
			}
			bad := bytes.Clone(ob)
			bad[len(bad)-1] ^= 1
			if _, err := ParseOutboard(bad, root, int64(size)); !errors.Is(err, ErrOutboardRoot) {
				t.Errorf("size %d: outboard with its last byte flipped: %v, want ErrOutboardRoot", size, err)
			}
		}
	}
}

// TestSumOutboardFile writes a tree through a file, as the digest store
// and engine digest --outboard do (pages written as they fill), and
// reads it back; a file shorter than promised is an error, not a tree.
func TestSumOutboardFile(t *testing.T) {
	data := make([]byte, 300*GroupSize+12345) // a tree of several 64 KiB pages
	rand.NewChaCha8([32]byte{1}).Read(data)
	f, err := os.Create(filepath.Join(t.TempDir(), "x.obao"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root, err := SumOutboard(bytes.NewReader(data), int64(len(data)), f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	mem, memRoot := outboardOf(t, data, GroupLog)
	if root != memRoot || !bytes.Equal(got, mem) {
		t.Fatalf("tree through a file differs from the tree in memory (%d and %d bytes)", len(got), len(mem))
	}
	if _, err := ParseOutboard(got, root, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	_, err = SumOutboard(bytes.NewReader(data[:1000]), int64(len(data)), make(memWriterAt, OutboardSize(int64(len(data)))))
	if !errors.Is(err, ErrShort) {
		t.Fatalf("SumOutboard of a short file: %v, want ErrShort", err)
	}
}

// FuzzParseOutboard feeds arbitrary trees, roots and sizes to the outboard
// reader: it must refuse or accept without panicking, and a tree it
// accepts must check groups without panicking.
func FuzzParseOutboard(f *testing.F) {
	for _, size := range []int{0, 5, GroupSize, 2*GroupSize + 1, 5 * GroupSize} {
		data := make([]byte, size)
		ob, root := outboardOf(f, data, GroupLog)
		f.Add(ob, root[:], int64(size), []byte{1, 2, 3})
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, make([]byte, 32), int64(-1), []byte{})
	f.Fuzz(func(t *testing.T, tree, root []byte, size int64, group []byte) {
		var r Digest
		copy(r[:], root)
		o, err := ParseOutboard(tree, r, size)
		if err != nil {
			return
		}
		for i := range min(o.Groups(), 4) {
			_, n := o.Group(i)
			_ = o.Verify(i, make([]byte, n))
			_ = o.Verify(i, group)
		}
		_ = o.Verify(-1, group)
		_ = o.Verify(o.Groups(), group)
	})
}

// BenchmarkDigestPass compares the digest pass with and without the
// outboard tree, over the same bytes in memory (the bound: the
// tree costs at most 5% of the pass). Run with -benchtime and -count and
// compare medians; a benchmark, never a test.
func BenchmarkDigestPass(b *testing.B) {
	data := make([]byte, 64<<20)
	rand.NewChaCha8([32]byte{2}).Read(data)
	b.Run("blake3", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			Sum(bytes.NewReader(data))
		}
	})
	b.Run("blake3+outboard", func(b *testing.B) {
		ob := make(memWriterAt, OutboardSize(int64(len(data))))
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			SumOutboard(bytes.NewReader(data), int64(len(data)), ob)
		}
	})
}
