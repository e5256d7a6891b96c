// Package reactor owns sockets and moves bytes: one loop per worker, each a
// goroutine (locked to its OS thread and pinned to a CPU when Config.Pin
// is set) with its own epoll instance and its own SO_REUSEPORT listener.
// An eBPF sk_reuseport program (internal/reuseport) steers each new
// connection to the loop of the CPU that received it; without eBPF the
// kernel's hash spreads them.
//
// A connection is a small state machine driven by its loop: read into a
// pooled buffer, hand the bytes to the protocol Handler, write what the
// handler queued (memory with writev and MSG_MORE, files with sendfile),
// park on EPOLLOUT when the socket is full, resume. The package knows
// sockets, not HTTP.
//
// Invariant: a loop's state, and every Conn it owns, is touched only on the
// loop's goroutine. The one way in from elsewhere is Loop.Post, a queue
// woken by an eventfd.
package reactor
