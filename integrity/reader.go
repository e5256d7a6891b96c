package integrity

import (
	"errors"
	"fmt"
	"io"

	"github.com/zeebo/blake3"
)

// Named failures of a verified body.
var (
	ErrTruncated = errors.New("integrity: body shorter than promised")
	ErrTooLong   = errors.New("integrity: body longer than promised")
	ErrMismatch  = errors.New("integrity: digest mismatch")
)

// Reader counts and hashes a body as it is read, and checks it at the end
// against the expected length and digest (either may be unknown: -1 and
// nil). The error at EOF names what went wrong. No copy of the body is
// kept.
type Reader struct {
	r    io.Reader
	h    *blake3.Hasher
	n    int64
	size int64
	want *Digest
	done bool
	err  error
}

// NewReader wraps r. size < 0 means unknown; want nil means no digest to
// check (Sum still gives the digest of what was read).
func NewReader(r io.Reader, size int64, want *Digest) *Reader {
	return &Reader{r: r, h: blake3.New(), size: size, want: want}
}

func (v *Reader) Read(p []byte) (int, error) {
	if v.done {
		return 0, v.errOrEOF()
	}
	n, err := v.r.Read(p)
	if n > 0 {
		v.h.Write(p[:n])
		v.n += int64(n)
		if v.size >= 0 && v.n > v.size {
			v.done, v.err = true, fmt.Errorf("%w: more than %d bytes", ErrTooLong, v.size)
			return n, v.err
		}
	}
	if err == io.EOF {
		v.done = true
		v.finish()
		return n, v.errOrEOF()
	}
	if err != nil {
		v.done = true
		v.err = fmt.Errorf("%w after %d of %d bytes: %v", ErrTruncated, v.n, v.size, err)
		return n, v.err
	}
	return n, nil
}

func (v *Reader) finish() {
	if v.size >= 0 && v.n < v.size {
		v.err = fmt.Errorf("%w: %d of %d bytes", ErrTruncated, v.n, v.size)
		return
	}
	if v.want != nil {
		if got := v.Sum(); got != *v.want {
			v.err = fmt.Errorf("%w: got %s, want %s", ErrMismatch, got, *v.want)
		}
	}
}

func (v *Reader) errOrEOF() error {
	if v.err != nil {
		return v.err
	}
	return io.EOF
}

// N returns the bytes read so far.
func (v *Reader) N() int64 { return v.n }

// Sum returns the digest of the bytes read so far.
func (v *Reader) Sum() Digest {
	var d Digest
	v.h.Sum(d[:0])
	return d
}

// Err returns the verdict after EOF: nil when length and digest matched.
func (v *Reader) Err() error { return v.err }
