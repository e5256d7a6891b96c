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

// startWriteback starts writing bytes [off, off+n) of f to disk without
// waiting (sync_file_range SYNC_FILE_RANGE_WRITE): the checkpoint's flush
// then finds them written, instead of all of a second's bytes at once.
func startWriteback(f *os.File, off, n int64) {
	unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
