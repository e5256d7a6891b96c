package engine

import (
	"errors"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/mediaship/engine/internal/reuseport"
	"golang.org/x/sys/unix"
)

// processCPU is the process's user and system CPU time, in seconds.
func processCPU() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// rawFd runs fn on f's descriptor without f.Fd, which would put the
// socket, shared with the process that passed it, into blocking mode.
func rawFd(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(u uintptr) { fn(int(u)) })
}

// sockType is a socket's SO_TYPE (unix.SOCK_STREAM, SOCK_DGRAM), or -1
// when f is no socket.
func sockType(f *os.File) int {
	t := -1
	rawFd(f, func(fd int) {
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err == nil {
			t = v
		}
	})
	return t
}

// localAddrOf is the address socket f is bound to.
func localAddrOf(f *os.File) (netip.AddrPort, error) {
	var sa unix.Sockaddr
	var gerr error
	if e := rawFd(f, func(fd int) { sa, gerr = unix.Getsockname(fd) }); e != nil {
		return netip.AddrPort{}, e
	}
	if gerr != nil {
		return netip.AddrPort{}, os.NewSyscallError("getsockname", gerr)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), nil
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port)), nil
	}
	return netip.AddrPort{}, errors.New("not an IP socket")
}

// boundToLoopback reports whether f's socket is bound to the loopback
// device (a localhost listener: reuseport.Listen).
func boundToLoopback(f *os.File) bool {
	lo := false
	rawFd(f, func(fd int) { lo = reuseport.BoundToLoopback(fd) })
	return lo
}

// dupFile duplicates f's descriptor (close-on-exec) for an owner that
// works with descriptors.
func dupFile(f *os.File) (int, error) {
	nfd := -1
	var derr error
	if err := rawFd(f, func(fd int) { nfd, derr = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", derr)
	}
	return nfd, nil
}

// dupFdFile duplicates descriptor fd into a File named name.
func dupFdFile(fd int, name string) (*os.File, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}

// monotonicUsec is CLOCK_MONOTONIC in microseconds, for sd_notify's
// MONOTONIC_USEC.
func monotonicUsec() int64 {
	var t unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &t); err != nil {
		return 0
	}
	return t.Sec*1e6 + t.Nsec/1e3
}

func closeFd(fd int) { unix.Close(fd) }

// socketInodes are the inodes of the sockets in fs.
func socketInodes(fs []*os.File) map[uint64]bool {
	out := map[uint64]bool{}
	for _, f := range fs {
		rawFd(f, func(fd int) {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil {
				out[st.Ino] = true
			}
		})
	}
	return out
}

// holders are the other processes that hold one of the sockets inodes
// names (from /proc).
func holders(inodes map[uint64]bool) map[int]bool {
	return scanHolders(inodes, nil)
}

// killHolders kills every other process that holds one of the sockets
// inodes names, but those in before (which held them already: systemd,
// with socket activation), and returns their process IDs: what a failed
// upgrade's new process left behind in a session of its own, beyond its
// process group's reach.
func killHolders(inodes map[uint64]bool, before map[int]bool) []int {
	var killed []int
	for pid := range scanHolders(inodes, before) {
		unix.Kill(pid, unix.SIGKILL)
		killed = append(killed, pid)
	}
	return killed
}

func scanHolders(inodes map[uint64]bool, skip map[int]bool) map[int]bool {
	out := map[int]bool{}
	self := os.Getpid()
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self || skip[pid] {
			continue
		}
		dir := "/proc/" + p.Name() + "/fd"
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			l, err := os.Readlink(dir + "/" + fd.Name())
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]"), 10, 64)
			if err == nil && inodes[ino] {
				out[pid] = true
				break
			}
		}
	}
	return out
}
