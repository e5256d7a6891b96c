//go:build !linux

package main

// pinSelf does nothing here.
func pinSelf() string { return "Client and server are not pinned: the scheduler places them." }
