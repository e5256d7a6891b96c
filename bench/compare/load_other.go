//go:build !linux

package main

// readCPU: the machine's CPU time is read from Linux's /proc only.
func readCPU() cpuSnap { return cpuSnap{} }

// readServer: a process tree's CPU time and wake-ups are read from
// Linux's /proc, and its syscalls counted with eBPF on Linux, only.
func readServer(int, *syscallCounter) serverReading { return serverReading{} }
