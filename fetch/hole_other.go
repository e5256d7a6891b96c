//go:build !linux

package fetch

import "os"

// hole is hole_linux.go's sparse-file check; elsewhere every group is
// read.
func hole(*os.File, int64, int64) bool { return false }

// startWriteback is a Linux hint; elsewhere the checkpoint flushes all.
func startWriteback(*os.File, int64, int64) {}

// freeBytes is Linux-only here: elsewhere the download is not refused
// for space ahead of time.
func freeBytes(string) int64 { return -1 }

// allocated is Linux-only here.
func allocated(string) int64 { return 0 }

// noFollow is O_NOFOLLOW where the platform has it (hole_linux.go).
const noFollow = 0

// lockPart is Linux-only here: elsewhere two fetches of one PATH are not
// kept apart.
func lockPart(*os.File) error { return nil }

// ownPart is Linux-only here.
func ownPart(*os.File) error { return nil }

// regularOnly is O_NONBLOCK where hole_linux.go has it.
const regularOnly = 0
