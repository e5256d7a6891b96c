//go:build !linux

package main

import (
	"errors"
	"fmt"
)

type syscallObjects struct{}

func (syscallObjects) count([]int) (uint64, error) { return 0, errNoSyscallCounter }
func (syscallObjects) close() error                { return nil }

var errNoSyscallCounter = fmt.Errorf("syscalls are counted with eBPF on Linux only: %w", errors.ErrUnsupported)

func openSyscalls() (*syscallCounter, error) { return nil, errNoSyscallCounter }
