package main

import "encoding/binary"

// patternMul is the multiplier of the diagnostics pattern
// (docs/WEBTRANSPORT.md, "Pattern"). This is a second, independent
// implementation of the definition: the client must not share the
// server's code, or a bug in it would check itself.
const patternMul = 0x9E3779B97F4A7C15

// fillPattern writes the pattern bytes that start at offset off into b:
// byte p is byte p mod 8 of the little-endian uint64 (p div 8) × patternMul.
func fillPattern(b []byte, off uint64) {
	var w [8]byte
	word := ^uint64(0) // the word w holds, none yet
	for i := range b {
		p := off + uint64(i)
		if p/8 != word {
			word = p / 8
			binary.LittleEndian.PutUint64(w[:], word*patternMul)
		}
		b[i] = w[p%8]
	}
}

// checkPattern returns the index of the first byte of b that differs from
// the pattern at offset off, or -1 when all match.
func checkPattern(b []byte, off uint64) int {
	var want [8192]byte
	for i := 0; i < len(b); i += len(want) {
		n := min(len(want), len(b)-i)
		fillPattern(want[:n], off+uint64(i))
		for j := range n {
			if b[i+j] != want[j] {
				return i + j
			}
		}
	}
	return -1
}

// patternReader is an endless reader of the pattern from offset 0.
type patternReader struct{ off uint64 }

func (r *patternReader) Read(b []byte) (int, error) {
	fillPattern(b, r.off)
	r.off += uint64(len(b))
	return len(b), nil
}
