package edgecache

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fileIno is fi's inode number.
func fileIno(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// freeBytes is the space an unprivileged writer may still use on dir's
// file system.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, os.NewSyscallError("statfs", err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
