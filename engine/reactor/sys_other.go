//go:build !linux

package reactor

import (
	"errors"
	"fmt"
	"log/slog"
)

type event struct {
	tag                        int32
	readable, writable, hangup bool
}

type loopSys struct{ bufs [][]byte }

// errNotLinux stands in for a syscall's error: Listen adds the package.
var errNotLinux = fmt.Errorf("epoll is Linux-only: %w", errors.ErrUnsupported)

func newLoop(*Group, int, string, int, int) (*Loop, string, error) { return nil, "", errNotLinux }
func dupFd(int) (int, error)                                       { return -1, errNotLinux }
func epollAdd(int, int, int32) error                               { return errNotLinux }
func pauseListener(int, int) error                                 { return errNotLinux }
func resumeListener(int, int) error                                { return errNotLinux }
func epollWait(*Loop, []event, int64) (int, error)                 { return 0, errNotLinux }
func accept(int) (int, Addr, error)                                { return -1, Addr{}, errNotLinux }
func readFd(int, []byte) (int, error)                              { return 0, errNotLinux }
func writev(*Loop, int, [][]byte, bool) (int, error)               { return 0, errNotLinux }
func sendOOB(int, []byte, []byte) (int, error)                     { return 0, errNotLinux }
func sendfile(int, int, int64, int) (int, error)                   { return 0, errNotLinux }
func setCongestion(int, string) error                              { return errNotLinux }
func setPacing(int, uint64) error                                  { return errNotLinux }
func setRcvLowat(int, int) error                                   { return errNotLinux }
func setLingerZero(int)                                            {}
func connect(Addr) (int, error)                                    { return -1, errNotLinux }
func newPipe() ([2]int, error)                                     { return [2]int{}, errNotLinux }
func peekWaiting(int) waiting                                      { return waitingGone }
func spliceFd(int, int, int) (int, error)                          { return 0, errNotLinux }
func pipeEmpty(int) bool                                           { return false }
func connectErr(int) error                                         { return errNotLinux }
func shutdownWrite(int)                                            {}
func localAddr(int) (Addr, error)                                  { return Addr{}, errNotLinux }
func closeFd(int)                                                  {}
func wakeLoop(int)                                                 {}
func drainWake(int)                                                {}
func isAgain(error) bool                                           { return false }
func isIntr(error) bool                                            { return false }
func allowedCPUs() []int                                           { return nil }
func pinToCPU(int, *slog.Logger) func()                            { return func() {} }
