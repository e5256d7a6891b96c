package bench

import (
	"encoding/binary"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/wt"
)

// datagram is datagram seq of size bytes, as the server makes it.
func datagram(seq uint64, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, seq)
	wt.Pattern(b[8:], int64(seq)*dgSeqStride+8)
	return b
}

func TestDatagramTally(t *testing.T) {
	flip := func(b []byte, i int) []byte { b[i] ^= 1; return b }
	tests := []struct {
		name     string
		count    int64
		in       [][]byte
		want     []bool // add's answers
		kind     string
		received int64
		dups     int64
		corrupt  int64
		complete bool
	}{
		{"all, in order", 3, [][]byte{datagram(0, 100), datagram(1, 100), datagram(2, 100)}, []bool{true, true, true}, "", 3, 0, 0, true},
		{"all, reordered", 3, [][]byte{datagram(2, 100), datagram(0, 100), datagram(1, 100)}, []bool{true, true, true}, "", 3, 0, 0, true},
		{"one lost is no failure", 3, [][]byte{datagram(0, 100), datagram(2, 100)}, []bool{true, true}, "", 2, 0, 0, false},
		{"all lost", 5, nil, nil, "", 0, 0, 0, false},
		{"smaller datagrams (the path carries less)", 2, [][]byte{datagram(0, 1200), datagram(1, 600)}, []bool{true, true}, "", 2, 0, 0, true},
		{"repeated", 3, [][]byte{datagram(0, 100), datagram(0, 100), datagram(1, 100)}, []bool{true, false, true}, "datagram-duplicate", 2, 1, 0, false},
		{"a byte wrong", 3, [][]byte{datagram(0, 100), flip(datagram(1, 100), 99)}, []bool{true, false}, "datagram-corrupt", 1, 0, 1, false},
		{"a sequence number wrong", 3, [][]byte{flip(datagram(1, 100), 7)}, []bool{false}, "datagram-corrupt", 0, 0, 1, false},
		{"beyond count", 3, [][]byte{datagram(3, 100)}, []bool{false}, "datagram-corrupt", 0, 0, 1, false},
		{"too short", 3, [][]byte{datagram(0, 15)}, []bool{false}, "datagram-corrupt", 0, 0, 1, false},
		{"larger than announced", 3, [][]byte{datagram(0, 1201)}, []bool{false}, "datagram-corrupt", 0, 0, 1, false},
		{"corrupt wins over repeated", 3, [][]byte{datagram(0, 100), datagram(0, 100), datagram(5, 100)}, []bool{true, false, false}, "datagram-corrupt", 1, 1, 1, false},
		{"count of 130 (three bitmap words)", 130, [][]byte{datagram(129, 64), datagram(64, 64), datagram(129, 64)}, []bool{true, true, false}, "datagram-duplicate", 2, 1, 0, false},
	}
	var d dgTally // reused, as a worker does
	for _, tt := range tests {
		d.reset(tt.count, 1200)
		for i, b := range tt.in {
			if got := d.add(b); got != tt.want[i] {
				t.Errorf("%s: add(datagram %d) = %t, want %t", tt.name, i, got, tt.want[i])
			}
		}
		c := d.counts(tt.count)
		if k := d.kind(); k != tt.kind || c.received != tt.received || c.dups != tt.dups || c.corrupt != tt.corrupt || d.complete() != tt.complete {
			t.Errorf("%s: kind %q, received %d, dups %d, corrupt %d, complete %t; want %q, %d, %d, %d, %t (%s)",
				tt.name, k, c.received, c.dups, c.corrupt, d.complete(), tt.kind, tt.received, tt.dups, tt.corrupt, tt.complete, d.firstBad)
		}
		if p := c.public(); p.Lost != tt.count-tt.received || p.Expected != tt.count {
			t.Errorf("%s: lost %d of %d, want %d of %d", tt.name, p.Lost, p.Expected, tt.count-tt.received, tt.count)
		}
	}
}

func TestDatagramCounts(t *testing.T) {
	var a dgCounts
	a.add(dgCounts{expected: 100, sent: 100, received: 90})
	a.add(dgCounts{expected: 100, sent: -1, received: 100}) // no line: sent unknown, not negative
	a.add(dgCounts{expected: 200, sent: 150, received: 150, dups: 1, corrupt: 2})
	p := a.public()
	want := DatagramCounts{Expected: 400, Sent: 250, Received: 340, Lost: 60, LossPercent: 15, Duplicates: 1, Corrupt: 2}
	if *p != want {
		t.Errorf("public() = %+v, want %+v", *p, want)
	}
	if (dgCounts{}).public().LossPercent != 0 {
		t.Error("no datagram asked for: loss must be 0, not NaN")
	}
}

func TestParseDatagramLine(t *testing.T) {
	tests := []struct {
		in       string
		sent     int64
		size     int
		wantFail bool
	}{
		{"100 1200\n", 100, 1200, false},
		{"0 16\n", 0, 16, false},
		{"100 1200", 0, 0, true}, // no newline: cut short
		{"101 1200\n", 0, 0, true},
		{"100 1201\n", 0, 0, true},
		{"100 15\n", 0, 0, true},
		{"-1 100\n", 0, 0, true},
		{"100\n", 0, 0, true},
		{"100 1200 7\n", 0, 0, true},
		{"x 1200\n", 0, 0, true},
		{"", 0, 0, true},
	}
	for _, tt := range tests {
		sent, size, err := parseDatagramLine(tt.in, 100, 1200)
		if (err != nil) != tt.wantFail || sent != tt.sent || size != tt.size {
			t.Errorf("parseDatagramLine(%q) = %d, %d, %v; want %d, %d, failure %t", tt.in, sent, size, err, tt.sent, tt.size, tt.wantFail)
		}
	}
}

func TestWebTransportExpectations(t *testing.T) {
	const base = "https://127.0.0.1:4433/.well-known/engine/diagnostics"
	var d integrity.Digest
	d[0] = 7
	tests := []struct {
		query    string
		manifest []integrity.Entry
		mode     string
		size     int64
		count    int64
		digest   bool
		err      string
	}{
		{"?mode=source&bytes=1000", nil, "source", 1000, 0, false, ""},
		{"?mode=source&file=/media/a.bin", []integrity.Entry{{Path: "media/a.bin", Digest: d}}, "source", -1, 0, true, ""},
		{"?mode=source&file=media/a.bin", nil, "source", -1, 0, false, ""},
		{"?mode=source&file=b.bin", []integrity.Entry{{Path: "media/a.bin", Digest: d}}, "", 0, 0, false, "not in the manifest"},
		{"?mode=datagrams&rate=100&count=500", nil, "datagrams", -1, 500, false, ""},
		{"?mode=source&bytes=0", nil, "", 0, 0, false, "bytes="},
		{"?mode=source", nil, "", 0, 0, false, "expected mode=source"},
		{"?mode=datagrams&rate=100", nil, "", 0, 0, false, "count="},
		{"?mode=echo", nil, "", 0, 0, false, "expected mode=source"},
		{"", nil, "", 0, 0, false, "expected mode=source"},
	}
	for _, tt := range tests {
		c := Config{URLs: []string{base + tt.query}, Protocol: "webtransport", Manifest: tt.manifest, RangeLast: -1, ExpectSize: -1}
		if err := c.withDefaults(); err != nil {
			t.Fatal(err)
		}
		exp, _, err := c.expectations()
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: error %v, want one with %q", tt.query, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.query, err)
			continue
		}
		e := exp[0]
		if e.wt.mode != tt.mode || e.size != tt.size || e.wt.count != tt.count || (e.digest != nil) != tt.digest {
			t.Errorf("%s: mode %q, size %d, count %d, digest %t; want %q, %d, %d, %t", tt.query, e.wt.mode, e.size, e.wt.count, e.digest != nil, tt.mode, tt.size, tt.count, tt.digest)
		}
	}
	// http, another host, a range: refused.
	for _, c := range []Config{
		{URLs: []string{"http://127.0.0.1/x?mode=source&bytes=1"}, Protocol: "webtransport", RangeLast: -1},
		{URLs: []string{base + "?mode=source&bytes=1", "https://[::1]:4433/x?mode=source&bytes=1"}, Protocol: "webtransport", RangeLast: -1},
		{URLs: []string{base + "?mode=source&bytes=1"}, Protocol: "webtransport", RangeFirst: 0, RangeLast: 9},
	} {
		c.withDefaults()
		if _, _, err := c.expectations(); err == nil {
			u, _ := url.Parse(c.URLs[len(c.URLs)-1])
			t.Errorf("%v (range %d-%d): accepted", u, c.RangeFirst, c.RangeLast)
		}
	}
}

// FuzzParseDatagramLine: a line either fails or gives figures within
// the bounds, which written back parse the same.
func FuzzParseDatagramLine(f *testing.F) {
	f.Add("100 1200\n")
	f.Add("0 16\n")
	f.Add(" 7\t900 \n")
	f.Fuzz(func(t *testing.T, line string) {
		sent, size, err := parseDatagramLine(line, 100, 1200)
		if err != nil {
			return
		}
		if sent < 0 || sent > 100 || size < 16 || size > 1200 {
			t.Fatalf("parseDatagramLine(%q) = %d, %d: out of bounds", line, sent, size)
		}
		again := fmt.Sprintf("%d %d\n", sent, size)
		if s2, z2, err := parseDatagramLine(again, 100, 1200); err != nil || s2 != sent || z2 != size {
			t.Fatalf("round trip of %q: %d, %d, %v", again, s2, z2, err)
		}
	})
}
