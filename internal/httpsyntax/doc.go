// Package httpsyntax holds the syntax rules HTTP/1.1 and HTTP/2 share:
// what a Host or :authority may be, what a request path may hold. No I/O,
// no allocation.
//
// Invariant: each rule is written once, here; a protocol package that
// needs it calls it rather than keeping a copy, so h1 and h2 cannot drift
// apart on what a valid host is.
package httpsyntax
