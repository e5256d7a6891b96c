package passthrough

import (
	"encoding/binary"
	"net"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// enableGRO asks the kernel to hand a UDP socket's datagrams over in
// batches (UDP_GRO): one read returns several datagrams of one size,
// with their size in a control message. It reports whether it may.
func enableGRO(c *net.UDPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	raw.Control(func(fd uintptr) {
		ok = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
	})
	return ok
}

// groSegment is the datagram size a UDP_GRO read reports in its control
// messages, or 0 when the read holds one datagram.
func groSegment(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 4 {
			return int(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}

// gsoControl is the control message that has one send split into
// datagrams of size bytes (UDP_SEGMENT), the last one shorter.
func gsoControl(size int) []byte {
	b := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return b
}

// udpBatches holds the buffers UDP reads go into: one per read in
// progress, not one per socket, so an idle QUIC relay holds none.
var udpBatches = sync.Pool{New: func() any { b := make([]byte, 1<<16); return &b }}

// readUDP reads datagrams from c as they come and hands each read (one
// datagram, or a UDP_GRO batch) to fn with its control messages, until
// a read fails: it returns that error (net.ErrClosed once c is closed).
// A buffer is taken only while the socket has something to read.
func readUDP(c *net.UDPConn, fn func(d, oob []byte)) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var rerr error
	oob := make([]byte, 64)
	err = raw.Read(func(fd uintptr) bool {
		bp := udpBatches.Get().(*[]byte)
		defer udpBatches.Put(bp)
		for {
			n, oobn, _, _, err := unix.Recvmsg(int(fd), *bp, oob, unix.MSG_DONTWAIT)
			switch {
			case err == unix.EAGAIN:
				return false // wait for the next datagram
			case err == unix.EINTR:
				continue
			case err != nil:
				rerr = os.NewSyscallError("recvmsg", err)
				return true
			}
			fn((*bp)[:n], oob[:oobn])
		}
	})
	if err != nil {
		return err
	}
	return rerr
}
