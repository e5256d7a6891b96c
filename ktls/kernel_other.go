//go:build !linux

package ktls

import (
	"errors"
	"fmt"
)

var errNoKernelTLS = fmt.Errorf("ktls: kernel TLS is Linux-only: %w", errors.ErrUnsupported)

func EnableULP(int) error                { return errNoKernelTLS }
func SetTX(int, Keys, uint64) error      { return errNoKernelTLS }
func SetRX(int, Keys, uint64) error      { return errNoKernelTLS }
func SendRecord(int, byte, []byte) error { return errNoKernelTLS }

// RecordTypeOOB has no meaning without kernel TLS.
func RecordTypeOOB(byte) []byte { return nil }
