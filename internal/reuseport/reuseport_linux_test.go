package reuseport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func listenT(t *testing.T, addr string, checkFree bool) (int, string, error) {
	t.Helper()
	fd, bound, err := Listen(addr, checkFree)
	if err == nil {
		t.Cleanup(func() { unix.Close(fd) })
	}
	return fd, bound, err
}

// TestListenGroup checks that a second socket joins the first one's port
// only when it does not ask for the port to be free.
func TestListenGroup(t *testing.T) {
	_, bound, err := listenT(t, "127.0.0.1:0", true)
	if err != nil {
		t.Fatalf("Listen(127.0.0.1:0) = %v", err)
	}
	if _, got, err := listenT(t, bound, false); err != nil || got != bound {
		t.Errorf("Listen(%s, checkFree=false) = %q, %v; want %q, nil", bound, got, err, bound)
	}
	if _, _, err := listenT(t, bound, true); !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("Listen(%s, checkFree=true) = %v, want EADDRINUSE", bound, err)
	}
	for _, addr := range []string{"127.0.0.1", "127.0.0.1:http", "example.com:0"} {
		if _, _, err := listenT(t, addr, false); err == nil {
			t.Errorf("Listen(%q) succeeded, want an error", addr)
		}
	}
}

// TestProbe checks the shape of Probe's answer, which preflight reads:
// nil, or an error that carries the kernel's errno (EPERM without
// CAP_BPF, EINVAL before Linux 4.19). ENGINE_REQUIRE_EBPF demands nil.
func TestProbe(t *testing.T) {
	err := Probe()
	if err != nil && os.Getenv("ENGINE_REQUIRE_EBPF") != "" {
		t.Fatalf("Probe() = %v; eBPF steering required (ENGINE_REQUIRE_EBPF)", err)
	}
	var errno unix.Errno
	if err != nil && !errors.As(err, &errno) {
		t.Errorf("Probe() = %v, want nil or an error carrying an errno", err)
	}
}

// TestRemedy: a refusal to load the program names the capabilities it
// needs, not RLIMIT_MEMLOCK (which the library's EPERM error suggests).
func TestRemedy(t *testing.T) {
	if r := Remedy(fmt.Errorf("load program: %w (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", syscall.EPERM)); !strings.Contains(r, "CAP_BPF and CAP_NET_ADMIN") || strings.Contains(r, "MEMLOCK") {
		t.Errorf("EPERM: %q", r)
	}
	if r := Remedy(syscall.EINVAL); !strings.Contains(r, "4.19") {
		t.Errorf("EINVAL: %q", r)
	}
}

// hasIPv6Loopback reports whether ::1 can be bound here (containers may
// run without IPv6).
func hasIPv6Loopback() bool {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// TestListenLocalhost: "localhost" answers on 127.0.0.1 and on ::1, TCP
// and UDP, on one socket bound to the loopback device, and its group
// shares the port that way; a socket on 127.0.0.1 at the port conflicts
// with it (checkFree), as a plain bind would.
func TestListenLocalhost(t *testing.T) {
	fd, bound, err := listenT(t, "localhost:0", true)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(bound)
	if !strings.HasPrefix(bound, "localhost:") || port == "0" {
		t.Fatalf("bound %q, want localhost:PORT", bound)
	}
	if !BoundToLoopback(fd) {
		t.Fatal("the localhost socket is not bound to the loopback device")
	}
	if _, b2, err := listenT(t, bound, false); err != nil || b2 != bound {
		t.Fatalf("a second socket of the group: %q, %v", b2, err)
	}
	if _, _, err := listenT(t, "127.0.0.1:"+port, true); err == nil {
		t.Error("127.0.0.1 at the port of a localhost listener was free")
	}
	addrs := []string{"127.0.0.1:" + port}
	if hasIPv6Loopback() {
		addrs = append(addrs, "[::1]:"+port)
	} else {
		t.Log("no IPv6 loopback here: ::1 not tried")
	}
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			t.Errorf("TCP to %s: %v", a, err)
			continue
		}
		c.Close()
	}

	ufd, ubound, err := ListenUDP("localhost:0", true)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ufd)
	if !BoundToLoopback(ufd) {
		t.Fatal("the localhost UDP socket is not bound to the loopback device")
	}
	_, uport, _ := net.SplitHostPort(ubound)
	uaddrs := []string{"127.0.0.1:" + uport}
	if hasIPv6Loopback() {
		uaddrs = append(uaddrs, "[::1]:"+uport)
	}
	f := os.NewFile(uintptr(ufd), "udp")
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, a := range uaddrs {
		c, err := net.Dial("udp", a)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("to " + a))
		c.Close()
		pc.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 64)
		n, _, err := pc.ReadFrom(buf)
		if err != nil || string(buf[:n]) != "to "+a {
			t.Errorf("UDP to %s: read %q, %v", a, buf[:n], err)
		}
	}
}
