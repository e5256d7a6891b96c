//go:build !linux

package fileio

import "errors"

// Preadv is Linux-only.
func Preadv(int, [][]byte, int64) (int, error) { return 0, errors.ErrUnsupported }

// Pread is Linux-only.
func Pread(int, []byte, int64) (int, error) { return 0, errors.ErrUnsupported }
