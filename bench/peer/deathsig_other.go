//go:build !linux

package peer

import "syscall"

// dieWithParent: only Linux has a parent-death signal; elsewhere a killed
// harness can leave its servers running.
func dieWithParent() *syscall.SysProcAttr { return nil }
