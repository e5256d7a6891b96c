package main

import "syscall"

// dieWithParent: should this harness die without stopping them, the
// servers follow.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
