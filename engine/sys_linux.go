package engine

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/mediaship/engine/integrity"
)

// fdReaderAt reads an open descriptor with pread, without owning it.
type fdReaderAt int

func (f fdReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := unix.Pread(int(f), p, off)
	if err != nil {
		return max(n, 0), os.NewSyscallError("pread", err)
	}
	if n < len(p) {
		return n, ioEOF
	}
	return n, nil
}

// fdIdentity is the identity of an open file now.
func fdIdentity(fd int) (integrity.FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return integrity.FileID{}, os.NewSyscallError("fstat", err)
	}
	return integrity.FileID{Dev: st.Dev, Ino: st.Ino, Size: st.Size, MtimeNs: st.Mtim.Nano()}, nil
}
