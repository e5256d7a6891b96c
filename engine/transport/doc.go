// Package transport is the one door between the HTTP drivers and the
// socket: a Stream carries a connection's plaintext over plain TCP, over
// TLS sealed in userspace, or over TLS the kernel seals (after promotion).
//
// A driver reads plaintext (Input, Consume), and writes heads and frames
// (Write), bodies (WriteBody with a Body: a file range, memory, or any
// source that can copy its bytes), or output made on demand (WriteFrom
// with a Producer, HTTP/2's frames as the socket drains). The stream
// chooses how the bytes move: sendfile or by reference where the kernel
// sends, read straight into records sealed in place where userspace
// seals. It counts each response's body bytes and promotes the connection
// to kernel TLS after promote_after, for every driver alike.
//
// The invariant: records leave in sequence order under the key in force.
// Nothing is sealed while the reactor still writes records sealed earlier
// or while a promotion is pending, and after promotion nothing is sealed
// in userspace again. Drivers never see records, keys or the sealer.
//
// A Stream is owned by its reactor loop's goroutine; only the TLS
// handshake runs elsewhere, and it reaches the Stream through Conn.Post.
package transport
