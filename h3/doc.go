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
package h3
