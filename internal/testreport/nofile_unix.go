//go:build unix

package main

import "syscall"

// lowerNofile lowers the soft RLIMIT_NOFILE by one and restores it, as
// TestAcceptOutOfDescriptors does.
func lowerNofile() error {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		return err
	}
	lower := old
	lower.Cur--
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lower); err != nil {
		return err
	}
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
}
