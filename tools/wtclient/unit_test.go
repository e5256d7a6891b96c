package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

// patternByte is the definition of docs/WEBTRANSPORT.md, computed the
// slow way: byte p mod 8 of the little-endian 64-bit (p div 8) ×
// 0x9E3779B97F4A7C15.
func patternByte(p uint64) byte {
	w := (p / 8) * 0x9E3779B97F4A7C15
	return byte(w >> (8 * (p % 8)))
}

func TestPatternDefinition(t *testing.T) {
	// Hand-computed: word 0 is 0; word 1 is the constant itself, whose
	// little-endian bytes are 15 7c 4a 7f b9 79 37 9e; word 2 is twice it
	// mod 2^64, 0x3C6EF372FE94F82A.
	want, _ := hex.DecodeString("0000000000000000" + "157c4a7fb979379e" + "2af894fe72f36e3c")
	got := make([]byte, 24)
	fillPattern(got, 0)
	if string(got) != string(want) {
		t.Fatalf("pattern 0..24 = %x, want %x", got, want)
	}
	for off := uint64(0); off < 24; off++ {
		for n := 0; n < 40; n++ {
			b := make([]byte, n)
			fillPattern(b, off)
			for i := range b {
				if b[i] != patternByte(off+uint64(i)) {
					t.Fatalf("fillPattern(%d bytes, off %d)[%d] = %#x, want %#x", n, off, i, b[i], patternByte(off+uint64(i)))
				}
			}
			if i := checkPattern(b, off); i != -1 {
				t.Fatalf("checkPattern of the pattern (off %d, %d bytes) = %d", off, n, i)
			}
		}
	}
	// Far offsets, where the multiplication wraps.
	b := make([]byte, 9)
	fillPattern(b, 1<<40+5)
	for i := range b {
		if b[i] != patternByte(1<<40+5+uint64(i)) {
			t.Fatalf("far byte %d wrong", i)
		}
	}
}

func TestCheckPattern(t *testing.T) {
	b := make([]byte, 20000) // more than checkPattern's block
	fillPattern(b, 803)
	for _, at := range []int{0, 7, 8191, 8192, 19999} {
		c := append([]byte(nil), b...)
		c[at] ^= 1
		if i := checkPattern(c, 803); i != at {
			t.Errorf("a flipped byte at %d: checkPattern = %d", at, i)
		}
	}
	// A byte missing, or repeated, shows at once.
	if i := checkPattern(b, 804); i != 0 {
		t.Errorf("the pattern one byte off: checkPattern = %d, want 0", i)
	}
	if i := checkPattern(b[1:], 803); i != 0 {
		t.Errorf("the pattern one byte short: checkPattern = %d, want 0", i)
	}
	var r patternReader
	head := make([]byte, 5)
	rest := make([]byte, 100)
	r.Read(head)
	r.Read(rest)
	if checkPattern(head, 0) != -1 || checkPattern(rest, 5) != -1 {
		t.Error("patternReader does not continue the pattern")
	}
}

func TestMakeDatagram(t *testing.T) {
	d := makeDatagram(3, 20)
	if len(d) != 20 || binary.BigEndian.Uint64(d) != 3 {
		t.Fatalf("datagram %x", d)
	}
	for i := 8; i < 20; i++ {
		if d[i] != patternByte(3*65536+uint64(i)) {
			t.Fatalf("byte %d = %#x, want pattern byte 3×65536+%d", i, d[i], i)
		}
	}
	if d := makeDatagram(9, 8); len(d) != 8 || binary.BigEndian.Uint64(d) != 9 {
		t.Fatalf("an 8-byte datagram %x", d)
	}
}

func TestDatagramTally(t *testing.T) {
	tl := newDatagramTally(10)
	corrupt := makeDatagram(5, 100)
	corrupt[50] ^= 0xff
	wrongSeq := makeDatagram(6, 100)
	binary.BigEndian.PutUint64(wrongSeq, 7) // seq 7 with seq 6's content
	for _, tc := range []struct {
		d    []byte
		want error
	}{
		{makeDatagram(0, 100), nil},
		{makeDatagram(1, 100), nil},
		{makeDatagram(1, 100), errDatagramDup},
		{makeDatagram(9, 8), nil}, // the header alone
		{makeDatagram(10, 100), errDatagramRange},
		{makeDatagram(1<<60, 100), errDatagramRange},
		{[]byte{0, 0, 0, 0, 0, 0, 0}, errDatagramShort},
		{nil, errDatagramShort},
		{corrupt, errDatagramContent},
		{wrongSeq, errDatagramContent},
		{makeDatagram(5, 100), nil}, // the good copy after a corrupt one
	} {
		if err := tl.add(tc.d); err != tc.want {
			t.Errorf("add(%d bytes, seq %x): %v, want %v", len(tc.d), tc.d[:min(8, len(tc.d))], err, tc.want)
		}
	}
	st := tl.finish(10)
	want := DatagramStats{Received: 4, Duplicates: 1, Corrupt: 4, OutOfRange: 2, Lost: 6, Bytes: 308}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}

	// Unknown count: nothing is out of range, loss is against the want.
	tl = newDatagramTally(-1)
	tl.add(makeDatagram(1<<40, 16))
	if st := tl.finish(3); st.Received != 1 || st.OutOfRange != 0 || st.Lost != 2 {
		t.Errorf("unknown count: %+v", st)
	}
	if st := tl.finish(0); st.Lost != 0 {
		t.Errorf("more received than wanted: lost %d, want 0", st.Lost)
	}
}

func TestParseSinkReply(t *testing.T) {
	sum := strings.Repeat("0123456789abcdef", 4)
	n, got, err := parseSinkReply([]byte("1048576 " + sum + "\n"))
	if err != nil || n != 1048576 || hex.EncodeToString(got[:]) != sum {
		t.Fatalf("= %d, %x, %v", n, got, err)
	}
	if n, _, err := parseSinkReply([]byte("0 " + strings.ToUpper(sum) + "\n")); err != nil || n != 0 {
		t.Errorf("upper-case hex: %d, %v", n, err)
	}
	for _, bad := range []string{
		"",
		"\n",
		"1048576 " + sum,                     // no newline
		"1048576 " + sum + "\n\n",            // two lines
		"1048576 " + sum + "\nmore",          // trailing bytes
		"1048576  " + sum + "\n",             // two spaces
		"1048576\t" + sum + "\n",             // tab
		" 1048576 " + sum + "\n",             // leading space
		"-1 " + sum + "\n",                   // sign
		"+1 " + sum + "\n",                   // sign
		"0x10 " + sum + "\n",                 // hex count
		"99999999999999999999 " + sum + "\n", // overflow
		"10 " + sum[:62] + "\n",              // short digest
		"10 " + sum + "00\n",                 // long digest
		"10 " + sum[:63] + "g\n",             // not hex
		"10 " + sum + " \n",                  // trailing space
		"10\n",                               // no digest
		"10 " + sum + "\r\n",                 // CRLF
	} {
		if _, _, err := parseSinkReply([]byte(bad)); err == nil {
			t.Errorf("parseSinkReply(%q) accepted", bad)
		}
	}
}

func TestParseDatagramsLine(t *testing.T) {
	sent, size, err := parseDatagramsLine([]byte("1000 1200\n"))
	if err != nil || sent != 1000 || size != 1200 {
		t.Fatalf("= %d, %d, %v", sent, size, err)
	}
	for _, bad := range []string{"", "1000 1200", "1000\n", "1000 1200 1\n", "a 1\n", "1 -1\n", "1  2\n", "1 2\n\n"} {
		if _, _, err := parseDatagramsLine([]byte(bad)); err == nil {
			t.Errorf("parseDatagramsLine(%q) accepted", bad)
		}
	}
}

func TestParseReprDigest(t *testing.T) {
	var sum [32]byte
	for i := range sum {
		sum[i] = byte(i * 7)
	}
	b64 := base64.StdEncoding.EncodeToString(sum[:])
	for _, good := range []string{
		"blake3=:" + b64 + ":",
		"sha-256=:" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + ":, blake3=:" + b64 + ":",
		"blake3=:" + b64 + ":,sha-512=:AA==:",
		"  blake3=:" + b64 + ":  ",
	} {
		got, err := parseReprDigest(good)
		if err != nil || got != sum {
			t.Errorf("parseReprDigest(%q) = %x, %v", good, got, err)
		}
	}
	short := base64.StdEncoding.EncodeToString(sum[:31])
	unpadded := base64.RawStdEncoding.EncodeToString(sum[:])
	for _, bad := range []string{
		"",
		"blake3",
		"blake3=",
		"blake3=::",
		"blake3=" + b64,             // not a byte sequence
		"blake3=:" + b64,            // unterminated
		"blake3=" + b64 + ":",       // unopened
		"blake3=:" + short + ":",    // 31 bytes
		"blake3=:" + b64 + "AAAA:",  // 35 bytes
		"blake3=:" + unpadded + ":", // no padding
		"blake3=:" + strings.ReplaceAll(b64, "+", "-") + ":", // base64url
		"blake3=:!!" + b64[2:] + ":",                         // not base64
		"sha-256=:" + b64 + ":",                              // no blake3
		"blake3=:" + b64 + ":, blake3=:" + b64 + ":",         // twice
		"blake3=:" + b64 + ":;x=1",                           // parameters
		"blake3=:" + b64 + ":, garbage",                      // malformed member
		"=:" + b64 + ":",                                     // no key
	} {
		if _, err := parseReprDigest(bad); err == nil {
			t.Errorf("parseReprDigest(%q) accepted", bad)
		}
	}
}
