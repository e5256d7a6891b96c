package peer

import "syscall"

// dieWithParent: should the harness die without stopping them, the
// servers it started follow.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
