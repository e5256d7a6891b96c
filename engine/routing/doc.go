// Package routing is the one rule for matching a host name against the
// names a configuration gives: an exact name, then the longest "*."
// wildcard, then "*". Sites, certificates and proxy and passthrough
// routes all look names up through a Table, so they cannot disagree on
// which name a request or handshake is for; Host and SNI values are
// normalized here too (lowercase, no port, no trailing dot).
//
// It imports nothing of the engine's.
package routing
