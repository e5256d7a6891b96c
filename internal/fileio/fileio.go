package fileio

import (
	"errors"
	"io"
)

// ErrShrank means a file ended before the bytes promised for it (a
// response's length, a digest's size): it changed while being read. A
// response that meets it is cut off, never finished short.
var ErrShrank = errors.New("fileio: file shrank while being read")

// ErrChanged means a file's bytes were rewritten (its change time moved)
// while a response promised the old ones: the response is cut off, never
// finished with bytes its digest does not describe.
var ErrChanged = errors.New("fileio: file changed while being sent")

// Version is what tells a file's bytes rewritten in place from the same
// bytes: its change, modification time and link count when a response
// for it was promised. The zero Version is never checked.
type Version struct {
	CtimeNs, MtimeNs int64
	Nlink            uint64
}

// changedFrom decides from the file's state now: the change time moved
// and either the modification time moved too, or the names did not (so
// what moved the change time was not a rename over it, an unlink or a
// new link, which leave the bytes of an open descriptor alone, but a
// write whose mtime was put back, as rsync --inplace -t does, or a
// chmod, taken for a change too).
func (v Version) changedFrom(ctimeNs, mtimeNs int64, nlink uint64) bool {
	if ctimeNs == v.CtimeNs {
		return false
	}
	return mtimeNs != v.MtimeNs || nlink == v.Nlink
}

// ReaderAt reads an open descriptor with pread, without owning it.
type ReaderAt int

func (f ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := Pread(int(f), p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}
