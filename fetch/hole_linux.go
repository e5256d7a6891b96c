package fetch

import (
	"os"

	"golang.org/x/sys/unix"
)

// hole reports whether bytes [off, off+n) of f were never written: a hole
// of a sparse file (lseek SEEK_DATA finds no data before off+n). A group
// there is fetched without reading it first.
func hole(f *os.File, off, n int64) bool {
	next, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	return err == unix.ENXIO || err == nil && next >= off+n
}
