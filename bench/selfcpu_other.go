//go:build !unix

package bench

import "time"

// selfCPU is not read on this system: the report has no client CPU.
func selfCPU() (time.Duration, bool) { return 0, false }
