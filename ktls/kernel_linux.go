package ktls

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EnableULP attaches the "tls" upper layer protocol to a connected TCP
// socket: the first step of kernel TLS (Linux 4.13, commit 734942cc4ea6).
// ENOENT means the tls module is not loaded and this process may not load
// it; ENOPROTOOPT (or ENOENT with no module to load) that the kernel has no
// TLS at all.
func EnableULP(fd int) error {
	return os.NewSyscallError("setsockopt TCP_ULP", unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_ULP, "tls"))
}

// SetTX hands the transmit direction to the kernel: from now on plain
// writes to fd go out as TLS records under k, the first with sequence
// number seq.
func SetTX(fd int, k Keys, seq uint64) error {
	info, err := cryptoInfo(k, seq)
	if err != nil {
		return err
	}
	return setsockoptBytes(fd, solTLS, tlsTX, info, "setsockopt TLS_TX")
}

// SetRX hands the receive direction to the kernel.
func SetRX(fd int, k Keys, seq uint64) error {
	info, err := cryptoInfo(k, seq)
	if err != nil {
		return err
	}
	return setsockoptBytes(fd, solTLS, tlsRX, info, "setsockopt TLS_RX")
}

func setsockoptBytes(fd, level, opt int, b []byte, op string) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0)
	if errno != 0 {
		return os.NewSyscallError(op, errno)
	}
	return nil
}

// SendRecord sends data as one record of content type typ (an alert, a
// post-handshake handshake message) on a socket whose transmit side the
// kernel owns, with a TLS_SET_RECORD_TYPE control message.
func SendRecord(fd int, typ byte, data []byte) error {
	oob := RecordTypeOOB(typ)
	for {
		n, err := unix.SendmsgN(fd, data, oob, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("sendmsg TLS_SET_RECORD_TYPE", err)
		}
		if n != len(data) {
			return os.NewSyscallError("sendmsg TLS_SET_RECORD_TYPE", unix.EIO)
		}
		return nil
	}
}

// RecordTypeOOB is the control message that makes the next sendmsg one
// record of content type typ on a kernel TLS socket.
func RecordTypeOOB(typ byte) []byte {
	oob := make([]byte, unix.CmsgSpace(1))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level = solTLS
	h.Type = tlsSetRecordType
	h.SetLen(unix.CmsgLen(1))
	oob[unix.CmsgLen(0)] = typ
	return oob
}
