// Package preflight probes the kernel fast paths the engine relies on
// (kernel TLS for each cipher, sendfile into kTLS, record types, rekey,
// BBR, UDP GSO, socket buffer limits, eBPF steering, the open-files limit)
// by doing each operation for real on loopback sockets, and reports what
// is there, what is missing and how to fix it. It does not serve: it
// imports nothing under engine/, so the server depends on it and never the
// other way round.
//
// Every probe has a three-way answer: nil (available), an error matching
// ErrNotSupported (conclusively missing, with what was tried and the
// remedy), or any other error (could not tell). Probes decide by doing,
// never by comparing kernel version numbers.
//
// Invariant: probing has no lasting effect on the system. Sockets, files
// and keys made for a probe are closed before it returns.
package preflight
