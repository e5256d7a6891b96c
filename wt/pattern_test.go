package wt

import (
	"encoding/binary"
	"testing"
)

func TestPattern(t *testing.T) {
	// The definition, byte by byte, against the word-at-a-time fill at
	// every alignment.
	ref := func(p uint64) byte {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], (p/8)*0x9E3779B97F4A7C15)
		return w[p%8]
	}
	for off := int64(0); off < 20; off++ {
		for n := 0; n < 40; n++ {
			b := make([]byte, n)
			Pattern(b, off)
			for i := range b {
				if want := ref(uint64(off) + uint64(i)); b[i] != want {
					t.Fatalf("Pattern(len %d, off %d)[%d] = %#x, want %#x", n, off, i, b[i], want)
				}
			}
			if i := CheckPattern(b, off); i != -1 {
				t.Fatalf("CheckPattern(len %d, off %d) = %d, want -1", n, off, i)
			}
			if n > 0 {
				b[n/2] ^= 1
				if i := CheckPattern(b, off); i != n/2 {
					t.Fatalf("CheckPattern with byte %d flipped = %d", n/2, i)
				}
			}
		}
	}
	// A word repeated in place of its neighbour shows.
	b := make([]byte, 64)
	Pattern(b, 1<<40)
	copy(b[8:16], b[0:8])
	if CheckPattern(b, 1<<40) != 8 {
		t.Fatal("a repeated word was not found")
	}
	if ref(0) != 0 || ref(8) != 0x15 {
		t.Fatalf("pattern start %#x %#x", ref(0), ref(8))
	}
}

func BenchmarkCheckPattern(b *testing.B) {
	buf := make([]byte, 256<<10)
	Pattern(buf, 3)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if CheckPattern(buf, 3) != -1 {
			b.Fatal("pattern mismatch")
		}
	}
}
