// Package reframe holds the rules by which the reverse proxy re-frames a
// request for its upstream and a response for its client, never passing
// either raw: the HTTP/1.1 request head for the upstream (Head: the
// client's method, path and end-to-end fields, forwarding fields written
// anew), the hop-by-hop fields dropped each way, the trailers that may
// pass, and the paths an upstream could read otherwise (UnsafePath).
//
// It imports nothing of the engine's.
package reframe
