//go:build !linux

package preflight

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/mediaship/engine/ktls"
)

// host answers every probe with "not supported": the fast paths are Linux
// kernel features.
type host struct{}

func hostKernel() kernel { return host{} }

// errNotLinux stands in for an errno (see kernel): the probe that meets
// it adds what it tried.
var errNotLinux = fmt.Errorf("%w on this OS", errors.ErrUnsupported)

func (host) release() string                         { return "not Linux" }
func (host) tcpPair() (int, int, error)              { return -1, -1, errNotLinux }
func (host) udpSocket() (int, error)                 { return -1, errNotLinux }
func (host) closeFd(int)                             {}
func (host) setULP(int) error                        { return errNotLinux }
func (host) setTX(int, ktls.Keys, uint64) error      { return errNotLinux }
func (host) sendRecord(int, byte, []byte) error      { return errNotLinux }
func (host) write(int, []byte) error                 { return errNotLinux }
func (host) shutdownWrite(int) error                 { return errNotLinux }
func (host) readAll(int) ([]byte, error)             { return nil, errNotLinux }
func (host) memfd([]byte) (int, error)               { return -1, errNotLinux }
func (host) sendfile(int, int, int) error            { return errNotLinux }
func (host) setCongestion(int, string) error         { return errNotLinux }
func (host) congestion(int) (string, error)          { return "", errNotLinux }
func (host) setUDPSegment(int, int) error            { return errNotLinux }
func (host) forceBuffers(int, int) (int, int, error) { return 0, 0, errNotLinux }
func (host) readFile(string) ([]byte, error)         { return nil, errNotLinux }
func (host) exists(string) bool                      { return false }
func (host) nofile() (uint64, uint64, error)         { return 0, 0, errNotLinux }
func (host) steering() error                         { return errNotLinux }

func errnoName(e syscall.Errno) string { return "" }
