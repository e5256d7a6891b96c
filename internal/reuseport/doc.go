// Package reuseport opens SO_REUSEPORT listening sockets and steers the
// connections of such a group by CPU: an eBPF sk_reuseport program
// (written with cilium/ebpf's asm package, so no C compiler is needed)
// sends each new connection to the listener serving the CPU whose softirq
// received it. It does not accept, read or write connections; the reactor
// does, and preflight uses Probe to tell whether serve will steer.
//
// Invariant: a Steering must stay open as long as its listeners. Closing
// it early drops the maps the attached program reads, and the group falls
// back to the kernel's hash.
//
// The sockets and the program are Linux-only; elsewhere every function
// returns an error wrapping errors.ErrUnsupported.
package reuseport
