// Package h1 parses HTTP/1.1 request heads, frames request bodies
// (BodySkipper reads past a Content-Length or chunked body so the next
// request starts where it should) and writes HTTP/1.1 response heads.
//
// It does no I/O: the caller hands it bytes it has read and gets back a
// parsed request (whose fields are slices of those bytes) or a typed error
// carrying the status to answer with. The parser is strict in the ways RFC
// 9112 requires to stop request smuggling: obs-fold, bare CR and bare LF,
// whitespace before a colon, invalid token characters, repeated or invalid
// Content-Length and Transfer-Encoding together with Content-Length are all
// rejected rather than guessed at.
//
// Invariant: a parsed Request aliases the input buffer. It is valid only
// until the caller reuses or shifts that buffer.
package h1
