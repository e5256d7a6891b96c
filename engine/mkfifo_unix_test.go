//go:build unix

package engine_test

import "syscall"

// mkfifo makes a named pipe, which a site must refuse to serve.
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
