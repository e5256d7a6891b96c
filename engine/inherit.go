package engine

import (
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/coreos/go-systemd/v22/activation"

	"github.com/mediaship/engine/internal/reuseport"
)

// Sockets are listening sockets a server starts on instead of binding
// them: those its predecessor handed over (a reload, or a binary
// upgrade's new process) or systemd's (socket activation). Each has a
// name, as systemd's FileDescriptorName gives it: "listen" (the TCP
// listener, one per worker; and the UDP socket of HTTP/3 or QUIC
// passthrough where no program steers QUIC), "redirect_http", "admin",
// "steering" (the eBPF program spreading TCP connections by CPU, and its
// two maps) and "quic-steering" (the one steering QUIC by generation,
// and its maps: the successor opens a UDP socket of its own). A socket
// systemd passes without one of these names is matched by its address
// instead. NewFrom takes what its configuration listens on and closes
// the rest, naming them in the log.
type Sockets struct {
	files []*os.File
}

// Handover environment: a binary upgrade starts the new process with the
// sockets as systemd passes them (LISTEN_FDS, LISTEN_FDNAMES), and
// handoverFrom naming the old process instead of LISTEN_PID, which
// cannot name a process before it exists. readyFD is the descriptor the
// new process reports readiness on.
const (
	handoverFrom = "ENGINE_HANDOVER_FROM"
	readyFDEnv   = "ENGINE_READY_FD"
)

// SocketsFromEnv takes the sockets systemd or an upgrading predecessor
// passed this process, and clears the variables that named them, so that
// processes started later do not take them again. It returns nil when
// none were passed.
func SocketsFromEnv() *Sockets {
	if from := os.Getenv(handoverFrom); from != "" {
		os.Unsetenv(handoverFrom)
		if from == strconv.Itoa(os.Getppid()) {
			os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
		}
	}
	fs := activation.Files(true)
	if len(fs) == 0 {
		return nil
	}
	return &Sockets{files: fs}
}

// Files returns the sockets in order, as a new process gets them from
// descriptor 3 on, and their names for LISTEN_FDNAMES.
func (s *Sockets) Files() ([]*os.File, string) {
	names := make([]string, len(s.files))
	for i, f := range s.files {
		names[i] = f.Name()
	}
	return s.files, strings.Join(names, ":")
}

// Close closes every socket not yet taken.
func (s *Sockets) Close() {
	if s == nil {
		return
	}
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
}

// addFd adds descriptor fd (owned from now on) under name.
func (s *Sockets) addFd(name string, fd int) {
	s.files = append(s.files, os.NewFile(uintptr(fd), name))
}

// addFile adds f under name (closing f: the set holds a duplicate).
func (s *Sockets) addFile(name string, f *os.File) error {
	defer f.Close()
	fd, err := dupFile(f)
	if err != nil {
		return err
	}
	s.addFd(name, fd)
	return nil
}

// takeTCP removes the TCP sockets named name (or, when none is, unnamed
// ones bound to addr) and returns duplicates of their descriptors, which
// the caller owns.
func (s *Sockets) takeTCP(name, addr string) ([]int, error) {
	var fds []int
	var err error
	for _, f := range s.take(name, addr, syscall.SOCK_STREAM) {
		if err == nil {
			var fd int
			if fd, err = dupFile(f); err == nil {
				fds = append(fds, fd)
			}
		}
		f.Close()
	}
	if err != nil {
		for _, fd := range fds {
			closeFd(fd)
		}
		return nil, err
	}
	return fds, nil
}

// take removes and returns the files of sockets of type typ named name,
// or, when none is, those with a name of no role here bound to addr.
func (s *Sockets) take(name, addr string, typ int) []*os.File {
	if s == nil {
		return nil
	}
	var named, byAddr []int
	for i, f := range s.files {
		if sockType(f) != typ {
			continue
		}
		switch {
		case f.Name() == name && sameAddr(f, addr):
			// A reload that changes the address binds the new one; the
			// socket handed over closes (leftOver) as its old
			// generation drains.
			named = append(named, i)
		case !ownName(f.Name()) && sameAddr(f, addr):
			byAddr = append(byAddr, i)
		}
	}
	if len(named) == 0 {
		named = byAddr
	}
	var out []*os.File
	for _, i := range named {
		out = append(out, s.files[i])
		s.files[i] = nil
	}
	s.files = slicesDeleteNil(s.files)
	return out
}

// takeSteering removes and returns the steering program's descriptors.
func (s *Sockets) takeSteering() []*os.File { return s.takeNamed("steering") }

// takeNamed removes and returns the descriptors named name.
func (s *Sockets) takeNamed(name string) []*os.File {
	if s == nil {
		return nil
	}
	var out []*os.File
	for i, f := range s.files {
		if f.Name() == name {
			out = append(out, f)
			s.files[i] = nil
		}
	}
	s.files = slicesDeleteNil(s.files)
	return out
}

func slicesDeleteNil(fs []*os.File) []*os.File {
	out := fs[:0]
	for _, f := range fs {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

// ownName reports whether a socket's name is one the engine gives a role.
func ownName(name string) bool {
	switch name {
	case "listen", "redirect_http", "admin", "steering", "quic-steering":
		return true
	}
	return false
}

// sameAddr reports whether f is bound to addr (host:port; an empty host
// or a wildcard matches a socket bound to the wildcard, and port 0, "any
// port", matches every port).
func sameAddr(f *os.File, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	got, err := localAddrOf(f)
	if err != nil || port != "0" && port != "" && strconv.Itoa(int(got.Port())) != port {
		return false
	}
	// A localhost socket is the wildcard bound to the loopback device
	// (reuseport.Listen), or one systemd bound to a loopback address.
	lo := got.Addr().IsUnspecified() && boundToLoopback(f)
	switch host {
	case "", "::", "0.0.0.0", "[::]":
		return got.Addr().IsUnspecified() && !lo
	case "localhost":
		return got.Addr().IsLoopback() || lo
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap() == got.Addr().Unmap()
}

// leftOver closes the sockets nothing took, naming them in the log: a
// socket systemd passes that the configuration no longer listens on, or
// one a predecessor listened on and this configuration does not.
func (s *Sockets) leftOver(log *slog.Logger) {
	if s == nil {
		return
	}
	for _, f := range s.files {
		a, _ := localAddrOf(f)
		log.Warn("a passed socket is not one this configuration listens on: closed", "name", f.Name(), "addr", a.String())
		f.Close()
	}
	s.files = nil
}

// adoptSteering adopts a predecessor's steering program when the
// listeners it steers were all handed over (one per worker); otherwise it
// closes the descriptors, and the group attaches its own program or none.
func adoptSteering(fs []*os.File, sockets, workers int, log *slog.Logger) *reuseport.Steering {
	if len(fs) == 0 {
		return nil
	}
	if sockets != workers {
		for _, f := range fs {
			f.Close()
		}
		return nil
	}
	st, err := reuseport.Adopt(fs)
	if err != nil {
		log.Warn("the predecessor's eBPF steering could not be adopted; attaching a new program", "err", err)
		return nil
	}
	return st
}
