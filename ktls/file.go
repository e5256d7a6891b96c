package ktls

import (
	"errors"
)

// ErrFileShrank means a file ended before the bytes a response promised.
var ErrFileShrank = errors.New("ktls: file shorter than the response promised")

// FileSealer produces the TLS records carrying a range of a file: pread
// into a buffer, seal in place, hand back a batch of records for one
// write. It has the method set of the reactor's Source.
type FileSealer struct {
	s        *Sealer
	fd       int
	off, end int64
	buf      []byte
	first    bool // the next record starts a response body: keep it short
	release  func([]byte)
}

// BatchPlaintext is how much file content one batch carries.
const BatchPlaintext = 8 * MaxPlaintext

// BatchSize is the buffer a FileSealer needs for one batch.
func BatchSize(s *Sealer) int { return BatchPlaintext + (BatchPlaintext/MaxPlaintext+1)*s.Overhead() }

// firstRecord bounds the first record of a response body, so the client
// can start on the bytes before a full 16 KiB record has arrived.
const firstRecord = 4096

// NewFileSealer seals n bytes of fd from off with s, using buf (BatchSize
// bytes) and giving it to release when done. first makes the first record
// short.
func NewFileSealer(s *Sealer, fd int, off, n int64, buf []byte, first bool, release func([]byte)) *FileSealer {
	return &FileSealer{s: s, fd: fd, off: off, end: off + n, buf: buf, first: first, release: release}
}

// Next returns the next batch of sealed records, or nil when done.
func (f *FileSealer) Next(max int) ([]byte, error) {
	if f.off >= f.end {
		return nil, nil
	}
	batch := f.buf[:0]
	plain := 0
	for f.off < f.end && plain < BatchPlaintext && (plain == 0 || plain < max) {
		n := int(min(int64(MaxPlaintext), f.end-f.off, int64(BatchPlaintext-plain)))
		if f.first {
			n = min(n, firstRecord)
			f.first = false
		}
		start := len(batch)
		if cap(batch)-start < n+f.s.Overhead() {
			break
		}
		p := start + f.s.Prefix()
		got, err := preadFull(f.fd, batch[p:p+n], f.off)
		if err != nil {
			return nil, err
		}
		if got < n {
			return nil, ErrFileShrank
		}
		if batch, err = f.s.SealAt(batch, start, n, RecordApplicationData); err != nil {
			return nil, err
		}
		f.off += int64(n)
		plain += n
	}
	return batch, nil
}

// Release gives the buffer back.
func (f *FileSealer) Release() {
	if f.release != nil && f.buf != nil {
		f.release(f.buf)
	}
	f.buf = nil
}
