//go:build !linux

package bench

import (
	"errors"
	"fmt"
	"syscall"
)

// readTCPInfo is Linux only: elsewhere the report says "not measured".
func readTCPInfo(syscall.RawConn) (tcpReading, error) {
	return tcpReading{}, fmt.Errorf("TCP_INFO is read on Linux only: %w", errors.ErrUnsupported)
}
