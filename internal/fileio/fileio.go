package fileio

import (
	"errors"
	"io"
)

// ErrShrank means a file ended before the bytes promised for it (a
// response's length, a digest's size): it changed while being read. A
// response that meets it is cut off, never finished short.
var ErrShrank = errors.New("fileio: file shrank while being read")

// ReaderAt reads an open descriptor with pread, without owning it.
type ReaderAt int

func (f ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := Pread(int(f), p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}
