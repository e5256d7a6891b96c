//go:build unix

package testnet

import (
	"fmt"
	"net/netip"
	"os"
	"syscall"
)

// refusedAddr binds a TCP socket to a free loopback port and never calls
// listen(2): the kernel answers a SYN there with a reset.
func refusedAddr() (string, func(), error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return "", nil, os.NewSyscallError("socket", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return "", nil, os.NewSyscallError("bind", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return "", nil, os.NewSyscallError("getsockname", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("getsockname: %T, want an IPv4 address", sa)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port))
	return addr.String(), func() { syscall.Close(fd) }, nil
}
