// Package selfsigned makes in-memory ECDSA P-256 server certificates for
// loopback use: `engine serve --self-signed`, the bench self-check and the
// comparison harness. It does not write files or manage a CA; PEM hands
// the bytes to callers that must.
//
// Invariant: every certificate is freshly generated, self-signed and
// names the loopback addresses; none is trusted by anything but a client
// told to skip verification.
package selfsigned
