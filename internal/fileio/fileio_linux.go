package fileio

import (
	"os"

	"golang.org/x/sys/unix"
)

// Preadv fills bufs from the file at off with as few preadv(2) calls as
// it takes; it returns fewer bytes than asked only at the end of the file.
func Preadv(fd int, bufs [][]byte, off int64) (int, error) {
	total := 0
	for len(bufs) > 0 {
		n, err := unix.Preadv(fd, bufs, off+int64(total))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, os.NewSyscallError("preadv", err)
		}
		if n == 0 {
			break
		}
		total += n
		for n > 0 && len(bufs) > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
			} else {
				bufs[0] = bufs[0][n:]
				n = 0
			}
		}
	}
	return total, nil
}

// Pread fills p from the file at off with as few pread(2) calls as it
// takes; it returns fewer bytes than asked only at the end of the file.
func Pread(fd int, p []byte, off int64) (int, error) {
	total := 0
	for total < len(p) {
		n, err := unix.Pread(fd, p[total:], off+int64(total))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, os.NewSyscallError("pread", err)
		}
		if n == 0 {
			break
		}
		total += n
	}
	return total, nil
}

// Size is the file's size now (fstat(2)).
func Size(fd int) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, os.NewSyscallError("fstat", err)
	}
	return st.Size, nil
}

// Changed reports whether the open file's bytes may have been rewritten
// in place since it was at version v (fstat(2); Version says how it
// decides). An fstat that fails counts as changed.
func Changed(fd int, v Version) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) != nil || v.changedFrom(st.Ctim.Nano(), st.Mtim.Nano(), uint64(st.Nlink))
}

// Stat returns the file's size now (fstat(2)), and whether it changed
// since version v (as Changed says).
func Stat(fd int, v Version) (size int64, changed bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, true, os.NewSyscallError("fstat", err)
	}
	return st.Size, v.changedFrom(st.Ctim.Nano(), st.Mtim.Nano(), uint64(st.Nlink)), nil
}
