package reuseport

import (
	"errors"
	"os"
	"syscall"
)

// Listen opens a non-blocking listening TCP socket on addr ("host:port";
// an empty host is the IPv6 wildcard, falling back to IPv4 where there is
// no IPv6; "localhost" is 127.0.0.1 and ::1, and its bound address stays
// "localhost:PORT") with SO_REUSEPORT, and returns its descriptor and the address
// it is bound to, with the real port when port 0 was asked. When
// checkFree is set and the port is not 0, Listen first makes sure nothing
// listens on the address already, as a plain bind would: SO_REUSEPORT
// would otherwise let this socket silently share another server's port.
// Set it for the first socket of a group and not for the rest.
func Listen(addr string, checkFree bool) (fd int, bound string, err error) {
	return listen(addr, checkFree)
}

// BoundToLoopback reports whether fd is bound to the loopback device: a
// socket Listen or ListenUDP opened for "localhost" (both loopback
// addresses, on the IPv6 wildcard bound to the device).
func BoundToLoopback(fd int) bool { return boundToLoopback(fd) }

// Steering is an attached steering program and the maps it reads.
type Steering struct {
	objs objects
}

// Steer attaches an SK_REUSEPORT program to the group of listeners fds
// (all bound to one address with Listen) that sends each new connection
// to fds[cpuLoop[cpu]], where cpu is the CPU whose softirq received it.
// A connection received on a CPU not in cpuLoop is placed by the kernel's
// hash. Programs of this type and bpf_sk_select_reuseport arrived in
// Linux 4.19 (commit 2dbb9b9e6df6). On error nothing is attached and the
// kernel's hash keeps spreading connections.
func Steer(fds []int, cpuLoop map[int]int) (*Steering, error) {
	if len(fds) == 0 {
		return nil, errors.New("reuseport: no listeners to steer")
	}
	return steer(fds, cpuLoop)
}

// Close releases the program and its maps. Call it once the listeners
// accept no more (see the package invariant).
func (s *Steering) Close() error { return s.objs.close() }

// Probe loads and attaches the steering program to a throwaway listener
// on 127.0.0.1, for preflight. nil means Steer works on this host; an
// error wraps the errno the kernel gave (EPERM without CAP_BPF, EINVAL
// before Linux 4.19).
func Probe() error {
	fd, _, err := Listen("127.0.0.1:0", false)
	if err != nil {
		return err
	}
	defer closeFd(fd)
	s, err := Steer([]int{fd}, map[int]int{0: 0})
	if err != nil {
		return err
	}
	s.Close()
	return nil
}

// Remedy says what lets Steer work after it failed with err: the
// capabilities a process needs to load and attach the program (the
// library's error for EPERM speaks of RLIMIT_MEMLOCK, which kernels since
// 5.11 no longer use for BPF memory), or the kernel it needs.
func Remedy(err error) string {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		return "run with CAP_BPF and CAP_NET_ADMIN (AmbientCapabilities= in a systemd unit), or as root; or ignore: it is an optimisation"
	}
	return "run a Linux 4.19 or newer kernel with CONFIG_BPF_SYSCALL; or ignore: it is an optimisation"
}

// Files duplicates the descriptors of the program and its maps, in the
// order Adopt takes them, for a successor in another process (a binary
// upgrade): the program stays attached to the listeners, and its maps
// alive, as long as either process holds them.
func (s *Steering) Files() ([]*os.File, error) { return files(s) }

// Adopt takes over a predecessor's steering from the descriptors its
// Files made (and closes them): the program keeps spreading the handed
// over listeners' connections, and the adopter closes it when they stop.
func Adopt(fs []*os.File) (*Steering, error) { return adopt(fs) }
