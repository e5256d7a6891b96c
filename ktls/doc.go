// Package ktls is TLS after the handshake: the TLS 1.3 record layer (seal
// and open) and the kernel's transmit side (TCP_ULP "tls", SOL_TLS/TLS_TX,
// records of any type through TLS_SET_RECORD_TYPE).
//
// It does not do handshakes (crypto/tls does) and does not decide when to
// promote a connection (the engine's bulk policy does). This first part
// holds what preflight needs to prove kernel TLS works: the kernel's
// crypto_info layout for the three TLS 1.3 suites, the socket options, and
// a record opener that decrypts what the kernel wrote.
//
// Invariant: a record sequence number is never reused with the same key;
// Sealer and Opener count records and refuse to go past the AEAD limit.
package ktls
