//go:build !linux

package main

// readCPU: the machine's CPU time is read from Linux's /proc only.
func readCPU() cpuSnap { return cpuSnap{} }
