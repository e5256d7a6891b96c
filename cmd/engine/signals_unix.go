//go:build unix

package main

import "syscall"

// sigReopenLogs asks serve to reopen its access log (after logrotate).
const sigReopenLogs = syscall.SIGUSR1

// sigUpgrade asks serve to start the binary again on its sockets and
// drain (nginx's USR2).
const sigUpgrade = syscall.SIGUSR2

// sigReload asks serve to read its configuration again.
const sigReload = syscall.SIGHUP

// signalProcess sends sig to process pid.
func signalProcess(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }
