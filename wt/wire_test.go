package wt

import (
	"testing"

	"github.com/quic-go/quic-go"
)

func TestStreamCodes(t *testing.T) {
	// The draft's examples: 0 and the first codes after a skipped
	// GREASE value.
	for _, tc := range []struct {
		n    uint32
		want uint64
	}{{0, 0x52e4a40fa8db}, {1, 0x52e4a40fa8dc}, {0x1d, 0x52e4a40fa8f8}, {0x1e, 0x52e4a40fa8fa}, {0xffffffff, 0x52e5ac983162}} {
		if got := StreamCode(tc.n); uint64(got) != tc.want {
			t.Errorf("StreamCode(%#x) = %#x, want %#x", tc.n, uint64(got), tc.want)
		}
	}
	for _, n := range []uint32{0, 1, 0x1d, 0x1e, 0x1f, 0x104, 1 << 20, 0xfffffffe, 0xffffffff} {
		h := StreamCode(n)
		if (uint64(h)-0x21)%0x1f == 0 {
			t.Errorf("StreamCode(%#x) = %#x, a reserved codepoint", n, uint64(h))
		}
		if got, ok := AppCode(h); !ok || got != n {
			t.Errorf("AppCode(StreamCode(%#x)) = %#x, %v", n, got, ok)
		}
	}
	for _, h := range []quic.StreamErrorCode{0, 0x10c, 0x52e4a40fa8da, 0x52e5ac983163, 0x52e4a40fa8f9} {
		if n, ok := AppCode(h); ok {
			t.Errorf("AppCode(%#x) = %#x, want none", uint64(h), n)
		}
	}
}

func TestCapsules(t *testing.T) {
	b := appendClose(nil, 0x102, "limit")
	want := []byte{0x68, 0x43, 9, 0, 0, 1, 2, 'l', 'i', 'm', 'i', 't'}
	if string(b) != string(want) {
		t.Errorf("appendClose = %x, want %x", b, want)
	}
	long := appendClose(nil, 1, string(make([]byte, 5000)))
	if len(long) != 2+2+4+1024 {
		t.Errorf("a long message was not cut to 1024 bytes: %d", len(long))
	}
	if d := appendDrain(nil); string(d) != "\x80\x00\x78\xae\x00" {
		t.Errorf("appendDrain = %x", d)
	}
}
