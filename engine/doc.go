// Package engine assembles the server: it loads the configuration's sites,
// certificates and routes, starts the reactors, the HTTP/3 listener and
// the capabilities (digests, ACME, passthrough, the admin listener), and
// wires each connection to its protocol driver.
//
// What stays here is what binds those together: the drivers, HTTP/1.1
// (http1.go) and HTTP/2 (http2.go) on the reactor loops over a
// transport.Stream chosen once per connection (conn.go), HTTP/3
// (http3.go) on quic-go; the per-loop context they share (loopctx.go);
// the one decision every request goes through, and the one accounting of
// its answer (decide.go); the proxy's client sides (proxy_h*.go); the TCP passthrough relay on the reactor (passthrough.go);
// and the WebTransport diagnostics endpoint (webtransport.go).
// Capabilities live in packages that never import this one: routing,
// files, digests, proxy, reframe, passthrough, acme, accesslog, admin,
// transport, reactor, config.
//
// The invariant: a client can hold nothing forever. Every state in which
// the server waits for a peer has a deadline and a size bound
// (deadlines.go lists them), and a response goes out with the length and
// digest of the bytes on disk or not at all (the connection is reset).
package engine
