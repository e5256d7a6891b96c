// Package h2 is the HTTP/2 server connection state machine (RFC 9113):
// it is fed whole frames, hands complete requests to a Handler, and
// produces output on demand through a Sink: control frames and response
// heads as bytes, DATA frames as a 9-byte header plus a range of the
// response body that the Sink reads itself (from a file, by pread or
// sendfile). Frames are parsed with x/net/http2's Framer and header
// blocks with its hpack package; flow control, stream states, the RFC
// 9218 priority scheduler and the flood limits are ours.
//
// It does no I/O and knows nothing of sockets or goroutines: a Conn is
// owned by one goroutine (the reactor loop that owns the connection).
//
// Invariant: output leaves in the order it was produced, and every header
// block is encoded at the moment it is queued, so the peer's HPACK decoder
// sees blocks in the order our encoder made them.
package h2
