//go:build unix

package precompress

import (
	"io/fs"
	"os"
	"syscall"
)

// chown gives f the owner and group of the file it was made from, so a
// server that may read the file may read its sidecar. Only root may give
// a file away: for anyone else this changes nothing, and that is fine
// (the permission bits were copied).
func chown(f *os.File, from fs.FileInfo) {
	if st, ok := from.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		f.Chown(int(st.Uid), int(st.Gid))
	}
}
