//go:build !linux

package passthrough

import "net"

func enableGRO(*net.UDPConn) bool { return false }
func groSegment([]byte) int       { return 0 }
func gsoControl(int) []byte       { return nil }

// readUDP reads datagrams from c and hands each to fn, until a read
// fails.
func readUDP(c *net.UDPConn, fn func(d, oob []byte)) error {
	buf := make([]byte, 1<<16)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		fn(buf[:n], nil)
	}
}
