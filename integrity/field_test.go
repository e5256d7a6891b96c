package integrity

import (
	"errors"
	"testing"
)

func TestParseHeaderValue(t *testing.T) {
	var d Digest
	for i := range d {
		d[i] = byte(i * 7)
	}
	good := d.HeaderValue()
	tests := []struct {
		in      string
		wantErr error
	}{
		{good, nil},
		{"sha-256=:AAAA:, " + good, nil},
		{" BLAKE3 = " + good[len("blake3="):], nil},
		{"", ErrNoFieldDigest},
		{"sha-256=:AAAA:", ErrNoFieldDigest},
		{"blake3=notbase64", ErrBadFieldDigest},
		{"blake3=:AAAA:", ErrBadFieldDigest}, // 3 bytes, not 32
		{"blake3=:!!:", ErrBadFieldDigest},
	}
	for _, tt := range tests {
		got, err := ParseHeaderValue(tt.in)
		if !errors.Is(err, tt.wantErr) || err != nil && tt.wantErr == nil {
			t.Errorf("ParseHeaderValue(%q) error = %v, want %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && got != d {
			t.Errorf("ParseHeaderValue(%q) = %s, want %s", tt.in, got, d)
		}
	}
}

// FuzzParseHeaderValue: whatever the field, either a digest that
// HeaderValue writes back to a field that parses to the same digest, or
// one of the two errors.
func FuzzParseHeaderValue(f *testing.F) {
	f.Add(Digest{1, 2, 3}.HeaderValue())
	f.Add("sha-256=:AAAA:, blake3=:AAAA:")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		d, err := ParseHeaderValue(v)
		if err != nil {
			if !errors.Is(err, ErrNoFieldDigest) && !errors.Is(err, ErrBadFieldDigest) {
				t.Fatalf("ParseHeaderValue(%q): unexpected error %v", v, err)
			}
			return
		}
		if again, err := ParseHeaderValue(d.HeaderValue()); err != nil || again != d {
			t.Fatalf("round trip of %q: %s, %v", v, again, err)
		}
	})
}
