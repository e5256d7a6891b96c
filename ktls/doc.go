// Package ktls is TLS around crypto/tls's handshake and after it. It
// drives a crypto/tls server handshake on a goroutine fed one whole
// record at a time (ServerConfig, StartHandshake, Handshake.Feed), so the
// handshake never reads past the record that ends it, and takes the
// traffic secrets from a per-connection key log. After the handshake it
// is the TLS 1.3 (and 1.2) record layer (Sealer, with SealAt to seal in
// place; Opener) and the kernel's transmit side (TCP_ULP "tls",
// SOL_TLS/TLS_TX, records of any type through TLS_SET_RECORD_TYPE,
// rekey). preflight uses it to prove kernel TLS works: the crypto_info
// layout for each suite, the socket options, and an opener that decrypts
// what the kernel wrote.
//
// crypto/tls still does the handshake's messages and cryptography. ktls
// does not decide what to seal or when to promote a connection to the
// kernel (engine/transport does both, after promote_after body bytes) and
// knows nothing of HTTP.
//
// Invariant: a record sequence number is never reused with the same key;
// Sealer and Opener count records and refuse to go past the AEAD limit.
package ktls
