//go:build !unix

package main

import (
	"errors"
	"syscall"
)

// sigReopenLogs is a signal number no process receives here: this OS has
// no SIGUSR1, so the access log is never reopened by signal.
// signal.Notify ignores a number out of range.
const sigReopenLogs = syscall.Signal(-1)

// sigUpgrade: no binary upgrade by signal here.
const sigUpgrade = syscall.Signal(-2)

const sigReload = syscall.Signal(-3)

func signalProcess(int, syscall.Signal) error {
	return errors.New("engine reload and engine upgrade signal the server: Unix only")
}
