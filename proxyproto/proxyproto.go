// Package proxyproto writes the PROXY protocol version 2 header
// (haproxy.org/download/2.9/doc/proxy-protocol.txt, §2.2) that tells a
// TLS origin behind a passthrough relay the client's address: the relay
// sends it first on the upstream connection, before the client's bytes.
// It writes headers and does not read them (the engine accepts no PROXY
// headers from its own clients). Invariant: the header is binary and of
// a fixed layout per family, so the origin never mistakes client bytes
// for it or it for client bytes.
package proxyproto

import "net/netip"

// signature opens every version 2 header.
var signature = []byte{0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a}

// Transport is what the proxied connection runs over.
type Transport byte

const (
	TCP Transport = 1 // a TLS connection
	UDP Transport = 2 // QUIC
)

// AppendV2 appends a PROXY v2 header for a connection from src to dst
// (the client, and the address it reached the relay at). Addresses of
// different families are written as IPv6, IPv4 ones mapped; an invalid
// one makes a LOCAL header (no address: the origin uses the relay's).
func AppendV2(b []byte, t Transport, src, dst netip.AddrPort) []byte {
	b = append(b, signature...)
	if !src.IsValid() || !dst.IsValid() {
		return append(b, 0x20, 0x00, 0, 0) // version 2, LOCAL; UNSPEC; no address block
	}
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	b = append(b, 0x21) // version 2, PROXY
	if s.Is4() && d.Is4() {
		b = append(b, 0x10|byte(t), 0, 12)
		a, c := s.As4(), d.As4()
		b = append(b, a[:]...)
		b = append(b, c[:]...)
	} else {
		b = append(b, 0x20|byte(t), 0, 36)
		a, c := s.As16(), d.As16()
		b = append(b, a[:]...)
		b = append(b, c[:]...)
	}
	return append(b, byte(src.Port()>>8), byte(src.Port()), byte(dst.Port()>>8), byte(dst.Port()))
}
