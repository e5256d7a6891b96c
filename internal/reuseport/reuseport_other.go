//go:build !linux

package reuseport

import (
	"errors"
	"fmt"
	"os"
)

var errNotLinux = fmt.Errorf("reuseport: SO_REUSEPORT groups and eBPF steering are Linux-only: %w", errors.ErrUnsupported)

type objects struct{}

func (objects) close() error { return nil }

func listen(string, bool) (int, string, error)    { return -1, "", errNotLinux }
func steer([]int, map[int]int) (*Steering, error) { return nil, errNotLinux }
func closeFd(int)                                 {}
func boundToLoopback(int) bool                    { return false }
func files(*Steering) ([]*os.File, error)         { return nil, errNotLinux }
func adopt([]*os.File) (*Steering, error)         { return nil, errNotLinux }
