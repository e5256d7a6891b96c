//go:build !unix

package engine_test

import (
	"errors"
	"fmt"
)

// mkfifo reports that this OS has no named pipes in the file system.
func mkfifo(string) error {
	return fmt.Errorf("mkfifo: %w", errors.ErrUnsupported)
}
