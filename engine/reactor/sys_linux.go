package reactor

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mediaship/engine/internal/loglimit"
	"github.com/mediaship/engine/internal/reuseport"
)

// event is one epoll event, in the loop's terms.
type event struct {
	tag      int32 // connection slot, tagListener or tagWake
	readable bool
	writable bool
	hangup   bool // the peer closed (its end, or both), or the socket failed
}

// loopSys is the loop's syscall scratch space.
type loopSys struct {
	evs  []unix.EpollEvent
	iovs []unix.Iovec
	bufs [][]byte
}

// newLoop makes loop id, listening on addr, or on the socket inherit
// when it is 0 or more (owned from now on), or on a duplicate of socket
// -2-inherit when it is below -1 (shared with another loop).
func newLoop(g *Group, id int, addr string, maxConns, inherit int) (*Loop, string, error) {
	l := &Loop{id: id, group: g, cfg: &g.cfg, log: g.log.With("loop", id), maxConns: maxConns,
		epfd: -1, efd: -1, lfd: -1}
	l.lim = loglimit.New(l.log, 5)
	l.heldMemo = map[netip.Addr]int{}
	l.handler = g.cfg.NewHandler(l)
	var err error
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, "", os.NewSyscallError("epoll_create1", err)
	}
	if l.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		l.closeFds()
		return nil, "", os.NewSyscallError("eventfd", err)
	}
	bound := ""
	listenEvents := uint32(unix.EPOLLIN)
	switch {
	case inherit == -1:
		l.lfd, bound, err = reuseport.Listen(addr, id == 0)
	case inherit >= 0:
		l.lfd = inherit
		bound, err = listening(inherit)
	default:
		// Loops sharing a socket: one of them wakes for a connection.
		listenEvents |= unix.EPOLLEXCLUSIVE
		if l.lfd, err = dupFd(-2 - inherit); err == nil {
			bound, err = listening(l.lfd)
		}
	}
	if err != nil {
		l.closeFds()
		return nil, "", err
	}
	for _, x := range []struct {
		fd  int
		tag int32
	}{{l.efd, tagWake}, {l.lfd, tagListener}} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: x.tag}
		if x.tag == tagListener {
			ev.Events = listenEvents
		}
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, x.fd, &ev); err != nil {
			l.closeFds()
			return nil, "", os.NewSyscallError("epoll_ctl", err)
		}
	}
	l.sys.evs = make([]unix.EpollEvent, 256)
	l.sys.iovs = make([]unix.Iovec, maxIov)
	l.sys.bufs = make([][]byte, 0, maxIov)
	return l, bound, nil
}

// listening checks that fd, handed over or passed by systemd, is a
// listening TCP socket, makes it non-blocking (systemd passes blocking
// ones) and close-on-exec, and returns its address.
func listening(fd int) (string, error) {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return "", fmt.Errorf("inherited descriptor %d: %w", fd, os.NewSyscallError("getsockopt", err))
	}
	acc, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if typ != unix.SOCK_STREAM || acc != 1 {
		return "", fmt.Errorf("inherited descriptor %d is not a listening TCP socket", fd)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return "", os.NewSyscallError("fcntl", err)
	}
	unix.CloseOnExec(fd)
	a, err := localAddr(fd)
	if err != nil {
		return "", err
	}
	if a.Addr().IsUnspecified() && reuseport.BoundToLoopback(fd) {
		// A localhost socket (reuseport.Listen): named so, the group's
		// other sockets and its QUIC socket are bound the same way, not
		// to every address.
		return "localhost:" + strconv.Itoa(int(a.Port())), nil
	}
	return a.String(), nil
}

// dupFd duplicates fd, close-on-exec.
func dupFd(fd int) (int, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
	}
	return nfd, nil
}

func epollAdd(epfd, fd int, slot int32) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: slot}
	return os.NewSyscallError("epoll_ctl", unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev))
}

// pauseListener stops the listener's events; resumeListener restarts them.
func pauseListener(epfd, lfd int) error {
	ev := unix.EpollEvent{Events: 0, Fd: tagListener}
	return unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, lfd, &ev)
}

func resumeListener(epfd, lfd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: tagListener}
	return unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, lfd, &ev)
}

// epollWait fills evs with ready events, waiting for the first until
// the loop's clock reaches until (0: not at all, -1: for ever).
func epollWait(l *Loop, evs []event, until int64) (int, error) {
	raw := l.sys.evs[:len(evs)]
	msec := -1
	if until >= 0 {
		msec = int(max(0, (until-l.now+int64(time.Millisecond)-1)/int64(time.Millisecond)))
	}
	for {
		n, err := unix.EpollWait(l.epfd, raw, msec)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("epoll_wait", err)
		}
		for i := 0; i < n; i++ {
			m := raw[i].Events
			evs[i] = event{
				tag:      raw[i].Fd,
				readable: m&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0,
				writable: m&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0,
				hangup:   m&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0,
			}
		}
		return n, nil
	}
}

func accept(lfd int) (int, Addr, error) {
	for {
		fd, sa, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err == unix.EINTR || err == unix.ECONNABORTED {
			continue
		}
		if err != nil {
			return -1, Addr{}, err
		}
		// Heads and small bodies leave at once; MSG_MORE still groups a
		// head with the file data that follows it.
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		return fd, toAddr(sa), nil
	}
}

func toAddr(sa unix.Sockaddr) Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	return Addr{}
}

func localAddr(fd int) (Addr, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return Addr{}, os.NewSyscallError("getsockname", err)
	}
	return toAddr(sa), nil
}

func readFd(fd int, p []byte) (int, error) {
	n, err := unix.Read(fd, p)
	if n < 0 {
		n = 0
	}
	return n, err
}

// writev writes bufs with one sendmsg, with MSG_MORE when more output
// follows so the kernel holds a head back for the file data behind it.
func writev(l *Loop, fd int, bufs [][]byte, more bool) (int, error) {
	iovs := l.sys.iovs[:0]
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		iov := unix.Iovec{Base: &b[0]}
		iov.SetLen(len(b))
		iovs = append(iovs, iov)
	}
	if len(iovs) == 0 {
		return 0, nil
	}
	msg := unix.Msghdr{Iov: &iovs[0]}
	msg.SetIovlen(len(iovs))
	flags := unix.MSG_NOSIGNAL | unix.MSG_DONTWAIT
	if more {
		flags |= unix.MSG_MORE
	}
	n, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), uintptr(flags))
	runtime.KeepAlive(bufs)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// sendOOB sends p with the control message oob in one sendmsg.
func sendOOB(fd int, p, oob []byte) (int, error) {
	n, err := unix.SendmsgN(fd, p, oob, nil, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// sendfile sends up to n bytes of file in from offset off. It returns 0
// and no error when the file has no bytes at off (it shrank).
func sendfile(out, in int, off int64, n int) (int, error) {
	o := off
	w, err := unix.Sendfile(out, in, &o, n)
	if w < 0 {
		w = 0
	}
	if w > 0 {
		return w, nil
	}
	return 0, err
}

func setCongestion(fd int, name string) error {
	return os.NewSyscallError("setsockopt TCP_CONGESTION",
		unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name))
}

func setPacing(fd int, rate uint64) error {
	if rate == 0 {
		rate = ^uint64(0)
	}
	v := rate
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE,
		uintptr(unsafe.Pointer(&v)), 8, 0)
	if errno != 0 {
		return os.NewSyscallError("setsockopt SO_MAX_PACING_RATE", errno)
	}
	return nil
}

// peekWaiting tells what waits on the socket, without taking it.
func peekWaiting(fd int) waiting {
	var b [1]byte
	// recvfrom without an address: unix.Recvfrom allocates one per call.
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	switch {
	case errno == unix.EAGAIN:
		return waitingNothing
	case errno == 0 && n == 1:
		return waitingBytes
	}
	return waitingGone // the peer closed (n 0), or an error
}

// newPipe makes a non-blocking pipe for splice, as large as the system
// lets it be (up to 1 MiB).
func newPipe() ([2]int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return p, os.NewSyscallError("pipe2", err)
	}
	unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, 1<<20)
	return p, nil
}

// pipeEmpty reports whether the pipe whose read end is fd holds no bytes.
func pipeEmpty(fd int) bool {
	n, err := unix.IoctlGetInt(fd, unix.TIOCINQ) // FIONREAD
	return err == nil && n == 0
}

// spliceFd moves up to n bytes from in to out; one of them is a pipe.
func spliceFd(in, out, n int) (int, error) {
	k, err := unix.Splice(in, nil, out, nil, n, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
	if k < 0 {
		k = 0
	}
	return int(k), err
}

// connect starts a non-blocking TCP connection to addr.
func connect(addr Addr) (int, error) {
	family := unix.AF_INET
	if addr.Addr().Is6() && !addr.Addr().Is4In6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	var sa unix.Sockaddr
	if family == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().Unmap().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	}
	for {
		err = unix.Connect(fd, sa)
		if err == unix.EINTR {
			continue
		}
		break
	}
	if err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return -1, os.NewSyscallError("connect", err)
	}
	return fd, nil
}

// connectErr is the outcome of a non-blocking connect, once the socket
// is writable.
func connectErr(fd int) error {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return os.NewSyscallError("getsockopt", err)
	}
	if v != 0 {
		return os.NewSyscallError("connect", unix.Errno(v))
	}
	return nil
}

func setLingerZero(fd int) {
	unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
}

func shutdownWrite(fd int) { unix.Shutdown(fd, unix.SHUT_WR) }

func closeFd(fd int) { unix.Close(fd) }

func wakeLoop(efd int) {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(efd, one[:])
}

func drainWake(efd int) {
	var b [8]byte
	unix.Read(efd, b[:])
}

func isAgain(err error) bool { return err == unix.EAGAIN }
func isIntr(err error) bool  { return err == unix.EINTR }

// allowedCPUs lists the CPUs this process may run on (the main thread's
// affinity: loop threads narrow their own).
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &set); err != nil {
		return nil
	}
	var cpus []int
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

// pinToCPU binds the calling thread to one CPU so a loop stays where the
// eBPF steering sends its connections. The returned function restores the
// thread's previous affinity.
func pinToCPU(cpu int, log *slog.Logger) func() {
	var old unix.CPUSet
	if cpu < 0 || unix.SchedGetaffinity(0, &old) != nil {
		return func() {}
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		log.Debug("cannot pin loop to a CPU", "cpu", cpu, "err", err)
		return func() {}
	}
	return func() { unix.SchedSetaffinity(0, &old) }
}

// setRcvLowat sets how many bytes must wait in the socket before it
// reports readable (batch.go).
func setRcvLowat(fd, n int) error {
	return os.NewSyscallError("setsockopt SO_RCVLOWAT", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, n))
}
