// Package wt serves WebTransport over HTTP/3 (draft-ietf-webtrans-http3)
// on quic-go's http3 hooks: extended CONNECT sessions, the streams and
// datagrams bound to them, and the capsules that close and drain them. It
// carries bytes for the engine's diagnostics endpoint; it does not serve
// files or know sites, and it offers no WebTransport flow control (its
// limits are a session's streams, bytes, datagram size and idle time).
//
// The invariant: every stream and datagram belongs to exactly one session
// of one connection, and a session that ends resets all of its streams,
// so nothing a client opened outlives the session that bounds it.
//
// It also speaks WebTransport as a client (ClientConn, ClientSession, on
// quic-go's raw HTTP/3 client connection), for engine bench and tests:
// the same wire numbers, and the same rule for a session that ends.
package wt
