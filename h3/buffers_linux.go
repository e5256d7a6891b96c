package h3

import (
	"net"

	"golang.org/x/sys/unix"
)

// SetBuffers asks for size-byte socket buffers, forcing past
// net.core.rmem_max and wmem_max where the process has CAP_NET_ADMIN, and
// returns what the kernel granted (it reports double the request).
func SetBuffers(c *net.UDPConn, size int) (rx, tx int) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0
	}
	raw.Control(func(fd uintptr) {
		for _, o := range []struct{ opt, force int }{{unix.SO_RCVBUF, unix.SO_RCVBUFFORCE}, {unix.SO_SNDBUF, unix.SO_SNDBUFFORCE}} {
			if cur, _ := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, o.opt); cur/2 >= size {
				continue
			}
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o.force, size) != nil {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o.opt, size)
			}
		}
		rx, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		tx, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	return rx / 2, tx / 2
}
