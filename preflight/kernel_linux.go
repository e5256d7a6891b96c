package preflight

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mediaship/engine/internal/reuseport"
	"github.com/mediaship/engine/ktls"
)

// host is the running kernel.
type host struct{}

func hostKernel() kernel { return host{} }

// errno returns the syscall.Errno inside err, so probes compare raw
// errnos whatever wrapping the call site added.
func errno(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return err
}

func (host) release() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// tcpPair connects two blocking TCP sockets over 127.0.0.1. Reads time out
// after 5 s so a probe can never hang.
func (host) tcpPair() (int, int, error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return -1, -1, err
	}
	if err := unix.Listen(ln, 1); err != nil {
		return -1, -1, err
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		return -1, -1, err
	}
	a, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	if err := unix.Connect(a, sa); err != nil {
		unix.Close(a)
		return -1, -1, err
	}
	b, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	if err != nil {
		unix.Close(a)
		return -1, -1, err
	}
	tv := unix.NsecToTimeval(int64(5 * time.Second))
	unix.SetsockoptTimeval(b, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptTimeval(a, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	return a, b, nil
}

func (host) udpSocket() (int, error) {
	return unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
}

func (host) closeFd(fd int)                              { unix.Close(fd) }
func (host) setULP(fd int) error                         { return errno(ktls.EnableULP(fd)) }
func (host) setTX(fd int, k ktls.Keys, seq uint64) error { return errno(ktls.SetTX(fd, k, seq)) }
func (host) sendRecord(fd int, typ byte, data []byte) error {
	return errno(ktls.SendRecord(fd, typ, data))
}
func (host) shutdownWrite(fd int) error { return unix.Shutdown(fd, unix.SHUT_WR) }
func (host) setCongestion(fd int, name string) error {
	return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
}
func (host) congestion(fd int) (string, error) {
	return unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
}
func (host) setUDPSegment(fd int, size int) error {
	return unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, size)
}

func (host) forceBuffers(fd int, size int) (int, int, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size); err != nil {
		return 0, 0, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size); err != nil {
		return 0, 0, err
	}
	r, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		return 0, 0, err
	}
	s, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	return r, s, err
}

func (host) write(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func (host) readAll(fd int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

func (h host) memfd(data []byte) (int, error) {
	fd, err := unix.MemfdCreate("engine-preflight", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	if err := h.write(fd, data); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (host) sendfile(out, in int, n int) error {
	var off int64
	for n > 0 {
		w, err := unix.Sendfile(out, in, &off, n)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if w == 0 {
			return unix.EIO
		}
		n -= w
	}
	return nil
}

func (host) readFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (host) exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (host) nofile() (uint64, uint64, error) {
	var r unix.Rlimit
	err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r)
	return r.Cur, r.Max, err
}

func (host) steering() error { return errno(reuseport.Probe()) }

func errnoName(e unix.Errno) string { return unix.ErrnoName(e) }
