//go:build !linux

package fileio

import (
	"errors"
	"fmt"
)

var errNotLinux = fmt.Errorf("fileio: positional reads by descriptor are Linux-only: %w", errors.ErrUnsupported)

// Preadv is Linux-only.
func Preadv(int, [][]byte, int64) (int, error) { return 0, errNotLinux }

// Pread is Linux-only.
func Pread(int, []byte, int64) (int, error) { return 0, errNotLinux }

// Size is Linux-only.
func Size(int) (int64, error) { return 0, errNotLinux }

// Changed is Linux-only: elsewhere no file is served.
func Changed(int, Version) bool { return true }

// Stat is Linux-only.
func Stat(int, Version) (int64, bool, error) { return 0, true, errNotLinux }
