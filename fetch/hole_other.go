//go:build !linux

package fetch

import "os"

// hole is hole_linux.go's sparse-file check; elsewhere every group is
// read.
func hole(*os.File, int64, int64) bool { return false }

// startWriteback is a Linux hint; elsewhere the checkpoint flushes all.
func startWriteback(*os.File, int64, int64) {}
