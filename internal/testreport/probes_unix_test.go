//go:build unix

package main

import (
	"syscall"
	"testing"
)

// TestProbes runs the real probes, which leave the limit as it was.
func TestProbes(t *testing.T) {
	m := probeMachine()
	var before, after syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before)
	t.Logf("%d CPUs, euid %d, %s/%s; sparse files: %v; lowering RLIMIT_NOFILE: %v",
		m.cpus, m.euid, m.goos, m.goarch, m.sparse(), m.lowerNofile())
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after)
	if before != after {
		t.Errorf("RLIMIT_NOFILE %+v after the probe, was %+v", after, before)
	}
}
