//go:build !linux

package engine

import (
	"errors"
	"math"
	"net/netip"
	"os"
)

// processCPU is not measured here: NaN leaves the metric out.
func processCPU() float64 { return math.NaN() }

var errNoHandover = errors.New("engine: passed sockets are Linux-only")

func sockType(*os.File) int                        { return -1 }
func localAddrOf(*os.File) (netip.AddrPort, error) { return netip.AddrPort{}, errNoHandover }
func dupFile(*os.File) (int, error)                { return -1, errNoHandover }
func boundToLoopback(*os.File) bool                { return false }
func dupFdFile(int, string) (*os.File, error)      { return nil, errNoHandover }

func rawFd(*os.File, func(int)) error { return errNoHandover }
func monotonicUsec() int64            { return 0 }
func closeFd(int)                     {}

func socketInodes([]*os.File) map[uint64]bool         { return nil }
func holders(map[uint64]bool) map[int]bool            { return nil }
func killHolders(map[uint64]bool, map[int]bool) []int { return nil }
