// Package acme obtains and renews certificates from an ACME CA (through
// certmagic) for the names a configuration marks acme = true: HTTP-01
// answers for the redirect listener, TLS-ALPN-01 handshakes, the
// certificates storage holds served from the first handshake after a
// restart, and a status per name for `engine preflight`.
//
// It imports nothing of the engine's.
package acme
