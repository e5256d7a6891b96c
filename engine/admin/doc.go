// Package admin is the [admin] listener: /metrics, /healthz and, when
// asked, /debug/pprof/, served by net/http apart from the reactors, with
// bounded connections, timeouts and header size, and answered only for a
// Host no web page can rebind to it (loopback literals, localhost, the
// listen address).
//
// It imports nothing of the engine's.
package admin
