//go:build !unix

package engine

import (
	"errors"
	"time"
)

func startSuccessor(string, []string, *Sockets, time.Duration) (int, error) {
	return 0, errors.New("binary upgrade needs a Unix system")
}

func signalReload(int) error { return errors.New("no signals here") }
