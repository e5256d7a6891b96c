package reuseport

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

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
