//go:build unix

package main

import "syscall"

// sigReopenLogs asks serve to reopen its access log (after logrotate).
const sigReopenLogs = syscall.SIGUSR1
