//go:build !linux

package main

import (
	"errors"
)

func readProcAttrs(pid int) (procAttrs, error) {
	return procAttrs{}, errors.ErrUnsupported
}

func cpuAffinity() string { return "unknown (not Linux)" }
