package engine

import (
	"encoding/binary"
	"net"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mediaship/engine/integrity"
)

// fdIdentity is the identity of an open file now.
func fdIdentity(fd int) (integrity.FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return integrity.FileID{}, os.NewSyscallError("fstat", err)
	}
	return integrity.FileID{Dev: st.Dev, Ino: st.Ino, Size: st.Size, MtimeNs: st.Mtim.Nano()}, nil
}

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
