package fetch

import (
	"fmt"
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

// freeBytes is the space left to an unprivileged writer on the file
// system holding dir; -1 when it cannot tell.
func freeBytes(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// allocated is the disk space path takes (its blocks, not its size: a
// part file is sparse until its groups arrive); 0 when it is not there.
func allocated(path string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// noFollow refuses a symbolic link where the part, state or tree file
// goes: a link planted in a shared download directory must not make a
// fetch (as root, say) write through it.
const noFollow = unix.O_NOFOLLOW

// lockPart takes the part file for this process alone (flock, released
// when the file closes): a second fetch of the same PATH is refused
// instead of writing beside the first.
func lockPart(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
}

// ownPart refuses a part file this process must not adopt: one that is
// not a regular file, has other names (a hard link: writing it would
// write them), or belongs to another user (who could change it under
// the fetch, and would own the file put in place). Its mode is set to
// 0644, whoever could write it before.
func ownPart(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("not a regular file")
	case st.Nlink != 1:
		return fmt.Errorf("it has %d names (a hard link)", st.Nlink)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("it belongs to user %d, not to this one (%d)", st.Uid, os.Geteuid())
	}
	return f.Chmod(0o644)
}

// regularOnly is the open flag that keeps a FIFO planted at a side file
// from blocking the open.
const regularOnly = unix.O_NONBLOCK
