package integrity

import (
	"io/fs"
	"syscall"
)

// changedSince reports whether the change time of a file moved between
// two stats of it: bytes rewritten in place with the size and
// modification time kept.
func changedSince(before, after fs.FileInfo) bool {
	b, ok1 := before.Sys().(*syscall.Stat_t)
	a, ok2 := after.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && b.Ctim != a.Ctim
}
