//go:build !linux

package edgecache

import (
	"errors"
	"fmt"
)

func freeBytes(string) (int64, error) {
	return 0, fmt.Errorf("edgecache: free space: %w", errors.ErrUnsupported)
}
