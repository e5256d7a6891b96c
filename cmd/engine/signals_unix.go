//go:build unix

package main

import "syscall"

// sigReopenLogs asks serve to reopen its access log (after logrotate).
const sigReopenLogs = syscall.SIGUSR1

// sigUpgrade asks serve to start the binary again on its sockets and
// drain (nginx's USR2).
const sigUpgrade = syscall.SIGUSR2
