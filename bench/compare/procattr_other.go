//go:build !linux

package main

import (
	"errors"
	"syscall"
)

// dieWithParent: only Linux has a parent-death signal; elsewhere a killed
// harness can leave its servers running.
func dieWithParent() *syscall.SysProcAttr { return nil }

func readProcAttrs(pid int) (procAttrs, error) {
	return procAttrs{}, errors.ErrUnsupported
}

func cpuAffinity() string { return "unknown (not Linux)" }
