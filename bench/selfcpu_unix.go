//go:build unix

package bench

import (
	"syscall"
	"time"
)

// selfCPU is the user and system CPU time this process (every thread of
// it, no child process) has used so far; ok is false where it cannot be
// read.
func selfCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
