//go:build !linux

package edgecache

import (
	"errors"
	"fmt"
	"os"
)

// fileIno is 0 where inode numbers are not known: the check of an
// object's file identity is left out there.
func fileIno(os.FileInfo) uint64 { return 0 }

func freeBytes(string) (int64, error) {
	return 0, fmt.Errorf("edgecache: free space: %w", errors.ErrUnsupported)
}
