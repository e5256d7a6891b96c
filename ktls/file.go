package ktls

import (
	"github.com/mediaship/engine/internal/fileio"
)

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
	slots    [BatchPlaintext/firstRecord + 1][]byte // preadv targets, kept here so Next allocates nothing
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

// Next returns the next batch of sealed records, or nil when done. One
// preadv fills every record's plaintext slot of the batch (the gaps are
// for headers and tags); then each record is sealed in place.
func (f *FileSealer) Next(max int) ([]byte, error) {
	if f.off >= f.end {
		return nil, nil
	}
	batch := f.buf[:0]
	slots := f.slots[:]
	records, plain := 0, 0
	pos := 0
	for f.off+int64(plain) < f.end && plain < BatchPlaintext && (plain == 0 || plain < max) && records < len(slots) {
		n := int(min(int64(MaxPlaintext), f.end-f.off-int64(plain), int64(BatchPlaintext-plain)))
		if f.first {
			n = min(n, firstRecord)
			f.first = false
		}
		if cap(f.buf)-pos < n+f.s.Overhead() {
			break
		}
		p := pos + f.s.Prefix()
		slots[records] = f.buf[p : p+n]
		records++
		plain += n
		pos += n + f.s.Overhead()
	}
	got, err := fileio.Preadv(f.fd, slots[:records], f.off)
	if err != nil {
		return nil, err
	}
	if got < plain {
		return nil, fileio.ErrShrank
	}
	for i := 0; i < records; i++ {
		if batch, err = f.s.SealAt(batch, len(batch), len(slots[i]), RecordApplicationData); err != nil {
			return nil, err
		}
		slots[i] = nil
	}
	f.off += int64(plain)
	return batch, nil
}

// Release gives the buffer back.
func (f *FileSealer) Release() {
	if f.release != nil && f.buf != nil {
		f.release(f.buf)
	}
	f.buf = nil
}
