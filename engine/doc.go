// Package engine assembles the server: it loads sites (roots, TLS
// certificates, digests) from a config.Config, starts the reactors and the
// HTTP/3 listener, and wires each connection to its protocol driver.
//
// The drivers live here: HTTP/1.1 (http1.go) and HTTP/2 (http2.go) run on
// the reactor loops over a transport.Stream chosen once per connection
// (conn.go); HTTP/3 (http3.go) runs on quic-go. Every driver answers from
// the same file layer (engine/files) and writes the same response fields
// (respfields.go). Records, keys, sealing and promotion to kernel TLS
// belong to engine/transport; a driver frames bytes and hands the stream
// bodies, and never knows which transport carries them.
//
// The invariant: a client can hold nothing forever. Every state in which
// the server waits for a peer has a deadline and a size bound
// (deadlines.go lists them), and a response goes out with the length and
// digest of the bytes on disk or not at all (the connection is reset).
package engine
