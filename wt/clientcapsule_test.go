package wt

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

func TestCloseCapsule(t *testing.T) {
	long := strings.Repeat("é", 600) // 1200 bytes: cut to 1024
	tests := []struct {
		code    uint32
		msg     string
		wantMsg string
	}{
		{0, "", ""},
		{0x107, "file changed", "file changed"},
		{0xffffffff, long, long[:1024]},
	}
	for _, tt := range tests {
		b := appendClose(nil, tt.code, tt.msg)
		p := http3.NewCapsuleParser(bytes.NewReader(b))
		typ, r, err := p.Next()
		if err != nil || typ != capsuleClose {
			t.Fatalf("capsule of (%#x, %d bytes): type %#x, %v", tt.code, len(tt.msg), typ, err)
		}
		code, msg, err := parseCloseCapsule(r)
		if err != nil || code != tt.code || msg != tt.wantMsg {
			t.Errorf("parse(append(%#x, %d bytes)) = %#x, %d bytes, %v; want %#x, %d bytes", tt.code, len(tt.msg), code, len(msg), err, tt.code, len(tt.wantMsg))
		}
		if _, _, err := p.Next(); err != io.EOF {
			t.Errorf("after the capsule: %v, want EOF", err)
		}
	}
	// The drain capsule has no payload.
	p := http3.NewCapsuleParser(bytes.NewReader(appendDrain(nil)))
	if typ, r, err := p.Next(); err != nil || typ != capsuleDrain || r.Remaining() != 0 {
		t.Errorf("drain capsule: type %#x, %d bytes, %v", typ, r.Remaining(), err)
	}
}

func TestCloseCapsuleMalformed(t *testing.T) {
	capsule := func(payload []byte) []byte {
		b := quicvarint.Append(nil, uint64(capsuleClose))
		b = quicvarint.Append(b, uint64(len(payload)))
		return append(b, payload...)
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"no code", capsule(nil), ErrMalformedCapsule},
		{"short code", capsule([]byte{0, 1, 2}), ErrMalformedCapsule},
		{"message too long", capsule(make([]byte, 4+1025)), ErrMalformedCapsule},
		{"truncated", capsule([]byte{0, 0, 1, 7, 'x'})[:7], io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		p := http3.NewCapsuleParser(bytes.NewReader(tt.in))
		_, r, err := p.Next()
		if err == nil {
			_, _, err = parseCloseCapsule(r)
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

// FuzzCloseCapsule: any bytes either fail or parse as a close capsule
// within the draft's bounds that encodes to one parsing the same.
func FuzzCloseCapsule(f *testing.F) {
	f.Add(appendClose(nil, 0x107, "file changed"))
	f.Add(appendClose(nil, 0, ""))
	f.Add([]byte{0x80, 0, 0x28, 0x43, 3, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := http3.NewCapsuleParser(bytes.NewReader(b))
		typ, r, err := p.Next()
		if err != nil || typ != capsuleClose {
			return
		}
		code, msg, err := parseCloseCapsule(r)
		if err != nil {
			return
		}
		if len(msg) > maxCloseMessage {
			t.Fatalf("parsed a message of %d bytes", len(msg))
		}
		q := http3.NewCapsuleParser(bytes.NewReader(appendClose(nil, code, msg)))
		_, r2, _ := q.Next()
		if c2, m2, err := parseCloseCapsule(r2); err != nil || c2 != code || m2 != msg {
			t.Fatalf("round trip of (%#x, %q): (%#x, %q), %v", code, msg, c2, m2, err)
		}
	})
}

func TestAppCode(t *testing.T) {
	// The draft's mapping: first + N + N/0x1e, never on a reserved code
	// (0x1f × k + 0x21), and back.
	for _, n := range []uint32{0, 1, 0x1d, 0x1e, 0x1f, 0x104, 0x3c, 1 << 20, 0xfffffffe, 0xffffffff} {
		h := StreamCode(n)
		if (uint64(h)-0x21)%0x1f == 0 {
			t.Errorf("StreamCode(%#x) = %#x, a reserved code", n, h)
		}
		if got, ok := AppCode(h); !ok || got != n {
			t.Errorf("AppCode(StreamCode(%#x)) = %#x, %t", n, got, ok)
		}
	}
	if StreamCode(0) != 0x52e4a40fa8db || StreamCode(0xffffffff) != 0x52e5ac983162 {
		t.Errorf("range %#x..%#x, want 0x52e4a40fa8db..0x52e5ac983162", StreamCode(0), StreamCode(0xffffffff))
	}
	for _, h := range []quic.StreamErrorCode{0, 0x10c, 0x52e4a40fa8da, 0x52e5ac983163, StreamCode(0x1d) + 1} {
		if n, ok := AppCode(h); ok {
			t.Errorf("AppCode(%#x) = %#x, want none", h, n)
		}
	}
}

// fakeStream is the bytes a stream starts with.
type fakeStream struct{ r *bytes.Reader }

func (f *fakeStream) Read(b []byte) (int, error) { return f.r.Read(b) }
func (f *fakeStream) Peek(b []byte) (int, error) {
	n, err := f.r.ReadAt(b, f.r.Size()-int64(f.r.Len()))
	return n, err
}
func (f *fakeStream) SetReadDeadline(time.Time) error { return nil }

func TestReadHeader(t *testing.T) {
	hdr := func(v ...uint64) []byte {
		var b []byte
		for _, x := range v {
			b = quicvarint.Append(b, x)
		}
		return append(b, "data"...)
	}
	tests := []struct {
		name    string
		in      []byte
		want    uint64
		id      uint64
		ok      bool
		err     bool
		rest    string // what is left to read
		restAll bool   // nothing was consumed
	}{
		{"uni session 0", hdr(UniType, 0), UniType, 0, true, false, "data", false},
		{"uni session 8", hdr(UniType, 8), UniType, 8, true, false, "data", false},
		{"bidi session 1<<40", hdr(BidiSignal, 1<<40), BidiSignal, 1 << 40, true, false, "data", false},
		{"control stream", hdr(0x00), UniType, 0, false, false, "", true},
		{"QPACK encoder", hdr(0x02), UniType, 0, false, false, "", true},
		{"no session ID", quicvarint.Append(nil, UniType), UniType, 0, false, true, "", false},
		{"empty", nil, UniType, 0, false, true, "", false},
	}
	for _, tt := range tests {
		f := &fakeStream{bytes.NewReader(tt.in)}
		id, ok, err := readHeader(f, tt.want)
		if id != tt.id || ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("%s: readHeader = %d, %t, %v; want %d, %t, error %t", tt.name, id, ok, err, tt.id, tt.ok, tt.err)
			continue
		}
		rest, _ := io.ReadAll(f)
		if tt.restAll && !bytes.Equal(rest, tt.in) || !tt.restAll && !tt.err && string(rest) != tt.rest {
			t.Errorf("%s: left %q to read", tt.name, rest)
		}
	}
}
