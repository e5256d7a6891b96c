// Package h3 serves HTTP/3 with quic-go: a tuned QUIC listener on its own
// quic.Transport (Server), response bodies written as DATA frames straight
// onto the request stream (Body), and per-stream pacing with a token
// bucket through quic.SendStream.WriteWithLimit (Pacer).
//
// quic-go paces packets per connection with its own congestion controller
// (CUBIC, not pluggable upstream), batches with GSO where the
// kernel has it, uses ECN and runs DPLPMTUD. The engine does not claim
// BBR for HTTP/3.
//
// The package knows requests and streams; it knows neither sites nor the
// file layer, which the engine's handler brings.
//
// Invariant: nothing waits on a client without a bound. A Body write
// that the client does not take within the send timeout returns
// ErrStalled, and a connection with no request in the handler is closed
// IdleTimeout after its last one, whatever its streams are doing.
package h3
