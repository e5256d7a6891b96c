package reuseport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

func listen(addr string, checkFree bool) (int, string, error) {
	return open(addr, unix.SOCK_STREAM, checkFree)
}

func listenUDP(addr string, checkFree bool) (int, string, error) {
	return open(addr, unix.SOCK_DGRAM, checkFree)
}

// open makes a non-blocking SO_REUSEPORT socket of type typ bound to
// addr, listening when it is a TCP one, and returns it with the address
// it is bound to.
//
// "localhost" is both loopback addresses, 127.0.0.1 and ::1, on one
// socket: the IPv6 wildcard (dual stack) bound to the loopback device
// with SO_BINDTODEVICE, which nothing from off this host reaches.
// Browsers resolve localhost to ::1 first, and over UDP (HTTP/3,
// WebTransport) they do not fall back to 127.0.0.1 when nothing answers
// on ::1. Its bound address is "localhost:PORT", so that the rest of a
// group binds the same way. Setting SO_BINDTODEVICE on an unbound socket
// needs no privilege since Linux 5.7 (commit c427bfec18f2); before it, it
// needs CAP_NET_RAW, and open says so. Without IPv6, localhost is
// 127.0.0.1.
func open(addr string, typ int, checkFree bool) (int, string, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return -1, "", fmt.Errorf("reuseport: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return -1, "", fmt.Errorf("reuseport: bad port %q", portStr)
	}
	var ip netip.Addr
	loopback := false // "localhost": the wildcard, bound to the loopback device
	switch host {
	case "", "::", "[::]":
		ip = netip.IPv6Unspecified()
	case "localhost":
		ip, loopback = netip.IPv6Unspecified(), true
	default:
		if ip, err = netip.ParseAddr(host); err != nil {
			return -1, "", fmt.Errorf("reuseport: bad host %q", host)
		}
	}
	family := unix.AF_INET6
	if ip.Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil && family == unix.AF_INET6 && (host == "" || loopback) {
		// No IPv6 on this host: the wildcard falls back to IPv4, and
		// localhost is 127.0.0.1.
		ip, family = netip.IPv4Unspecified(), unix.AF_INET
		if loopback {
			ip, loopback = netip.AddrFrom4([4]byte{127, 0, 0, 1}), false
		}
		fd, err = unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	}
	if err != nil {
		return -1, "", os.NewSyscallError("socket", err)
	}
	fail := func(op string, err error) (int, string, error) {
		unix.Close(fd)
		return -1, "", os.NewSyscallError(op, err)
	}
	if typ == unix.SOCK_STREAM {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fail("setsockopt SO_REUSEADDR", err)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return fail("setsockopt SO_REUSEPORT", err)
	}
	if loopback {
		if err := unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE, loopbackDevice); err != nil {
			unix.Close(fd)
			return -1, "", fmt.Errorf("reuseport: localhost is 127.0.0.1 and ::1, one socket bound to the loopback device, which this process may not do (before Linux 5.7 it needs CAP_NET_RAW); listen on 127.0.0.1 or [::1] instead: %w",
				os.NewSyscallError("setsockopt SO_BINDTODEVICE", err))
		}
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: port, Addr: ip.As4()}
	} else {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
		sa = &unix.SockaddrInet6{Port: port, Addr: ip.As16()}
	}
	if checkFree && port != 0 {
		if err := portFree(family, typ, sa, loopback); err != nil {
			unix.Close(fd)
			return -1, "", err
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	if typ == unix.SOCK_STREAM {
		if err := unix.Listen(fd, 4096); err != nil {
			return fail("listen", err)
		}
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	var bound netip.AddrPort
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		bound = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		bound = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	}
	if loopback {
		return fd, net.JoinHostPort("localhost", strconv.Itoa(int(bound.Port()))), nil
	}
	return fd, bound.String(), nil
}

// portFree binds a socket of type typ without SO_REUSEPORT (bound to the
// loopback device with loopback) (a TCP one
// with SO_REUSEADDR, so connections in TIME_WAIT from a previous run do
// not count) to see whether anything is bound to the address already:
// SO_REUSEPORT would otherwise let a socket silently share another
// server's port.
func portFree(family, typ int, sa unix.Sockaddr, loopback bool) error {
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	if loopback {
		// As the socket to be bound: one on 127.0.0.1 or ::1 conflicts
		// with it, one bound to another device does not.
		unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE, loopbackDevice)
	}
	if typ == unix.SOCK_STREAM {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	}
	if family == unix.AF_INET6 {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err := unix.Bind(fd, sa); err != nil {
		return os.NewSyscallError("bind", err)
	}
	return nil
}

func closeFd(fd int) { unix.Close(fd) }

// loopbackDevice is the loopback interface's name on Linux.
const loopbackDevice = "lo"

func boundToLoopback(fd int) bool {
	dev, err := unix.GetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE)
	return err == nil && dev == loopbackDevice
}

// objects are the eBPF objects that spread connections by CPU. Closing
// the program detaches nothing (the socket group holds a reference), but
// closing the maps early would.
type objects struct {
	socks, cpus *ebpf.Map
	prog        *ebpf.Program
}

// close releases whichever objects exist (Close is nil-safe on both).
func (o *objects) close() error {
	return errors.Join(o.prog.Close(), o.socks.Close(), o.cpus.Close())
}

func steer(fds []int, cpuLoop map[int]int) (*Steering, error) {
	maxCPU := 0
	for cpu := range cpuLoop {
		maxCPU = max(maxCPU, cpu)
	}
	s := &Steering{}
	o := &s.objs
	var err error
	o.socks, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "engine_socks", Type: ebpf.ReusePortSockArray,
		KeySize: 4, ValueSize: 8, MaxEntries: uint32(len(fds)),
	})
	if err != nil {
		return nil, fmt.Errorf("reuseport: create sockarray map: %w", err)
	}
	o.cpus, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "engine_cpus", Type: ebpf.Array,
		KeySize: 4, ValueSize: 4, MaxEntries: uint32(maxCPU + 1),
	})
	if err != nil {
		o.close()
		return nil, fmt.Errorf("reuseport: create cpu map: %w", err)
	}
	for i, fd := range fds {
		if err := o.socks.Put(uint32(i), uint64(fd)); err != nil {
			o.close()
			return nil, fmt.Errorf("reuseport: add listener %d to sockarray: %w", i, err)
		}
	}
	for cpu, loop := range cpuLoop {
		if err := o.cpus.Put(uint32(cpu), uint32(loop)); err != nil {
			o.close()
			return nil, fmt.Errorf("reuseport: fill cpu map: %w", err)
		}
	}

	const skPass = 1
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // r6 = ctx
		asm.FnGetSmpProcessorId.Call(),
		asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word), // key = cpu
		asm.LoadMapPtr(asm.R1, o.cpus.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"), // CPU not in the map: kernel hash
		asm.LoadMem(asm.R0, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.Word), // key = loop
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, o.socks.FD()),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(), // on failure no socket is chosen: kernel hash
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
	}
	o.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "engine_steer", Type: ebpf.SkReuseport, License: "GPL", Instructions: insns,
	})
	if err != nil {
		o.close()
		return nil, fmt.Errorf("reuseport: load sk_reuseport program: %w", err)
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, o.prog.FD()); err != nil {
		o.close()
		return nil, fmt.Errorf("reuseport: attach program: %w", os.NewSyscallError("setsockopt SO_ATTACH_REUSEPORT_EBPF", err))
	}
	return s, nil
}

func files(s *Steering) ([]*os.File, error) {
	var out []*os.File
	for _, fd := range []int{s.objs.prog.FD(), s.objs.socks.FD(), s.objs.cpus.FD()} {
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range out {
				f.Close()
			}
			return nil, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
		}
		out = append(out, os.NewFile(uintptr(nfd), "steering"))
	}
	return out, nil
}

func adopt(fs []*os.File) (*Steering, error) {
	if len(fs) != 3 {
		return nil, fmt.Errorf("reuseport: %d steering descriptors handed over, want 3", len(fs))
	}
	// The ebpf package takes over the descriptors it is given: hand it
	// duplicates and close the files.
	dup := func(f *os.File) (int, error) {
		defer f.Close()
		return unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	}
	s := &Steering{}
	o := &s.objs
	fd, err := dup(fs[0])
	if err == nil {
		o.prog, err = ebpf.NewProgramFromFD(fd)
	}
	if err != nil {
		fs[1].Close()
		fs[2].Close()
		return nil, fmt.Errorf("reuseport: adopt the steering program: %w", err)
	}
	for i, m := range []**ebpf.Map{&o.socks, &o.cpus} {
		if fd, err = dup(fs[1+i]); err == nil {
			*m, err = ebpf.NewMapFromFD(fd)
		}
		if err != nil {
			if i == 0 {
				fs[2].Close()
			}
			o.prog.Close()
			if o.socks != nil {
				o.socks.Close()
			}
			return nil, fmt.Errorf("reuseport: adopt the steering maps: %w", err)
		}
	}
	return s, nil
}
