//go:build !linux

package bench

// PinSelf does nothing here.
func PinSelf() string { return "Client and server are not pinned: the scheduler places them." }
