// Package passthrough relays TLS it does not terminate: the routes with
// tls_termination = false (Table), what they counted and why a
// connection was not relayed (Counters, Reason), and the QUIC relay
// (Router): it reads every datagram of the UDP socket, sends a client's
// flow to the upstream its Initial's SNI names, tells the engine's own
// HTTP/3 connections from relayed ones by connection IDs it tags
// (OwnCIDs), and drops flows whose upstream or client has gone quiet.
// The TCP relay's bytes move on the engine's reactor (splice), which
// uses this package's table and counters.
//
// It imports nothing of the engine's but its configuration and routing.
package passthrough
