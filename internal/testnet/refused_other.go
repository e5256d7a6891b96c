//go:build !unix

package testnet

import "net"

// refusedAddr falls back to a port found free and closed again: another
// process may take it before the test connects.
func refusedAddr() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, func() {}, nil
}
