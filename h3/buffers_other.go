//go:build !linux

package h3

import "net"

// SetBuffers asks for size-byte socket buffers and returns what was
// granted, as far as the platform tells.
func SetBuffers(c *net.UDPConn, size int) (rx, tx int) {
	if c.SetReadBuffer(size) != nil || c.SetWriteBuffer(size) != nil {
		return 0, 0
	}
	return size, size
}
