package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSyscallCounter makes a known number of syscalls and finds them
// counted under this process, and not many more: getppid(2) has no vDSO
// shortcut, so each call enters the kernel. They are made on four
// threads at once, at most one of them the process's first, so a program
// that keyed the counters by thread rather than by process would be
// caught.
func TestSyscallCounter(t *testing.T) {
	c, err := openSyscallCounter()
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("the counter needs root (CAP_BPF and CAP_PERFMON): %v", err)
		}
		t.Fatalf("openSyscallCounter as root: %v", err)
	}
	defer c.close()
	const calls = 20000
	me := []int{os.Getpid()}
	before, err := c.count(me)
	if err != nil {
		t.Fatal(err)
	}
	const threads = 4
	var ready, done sync.WaitGroup
	ready.Add(threads)
	for range threads {
		done.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// All four hold their threads before any starts.
			ready.Done()
			ready.Wait()
			for range calls / threads {
				syscall.Getppid()
			}
		})
	}
	done.Wait()
	after, err := c.count(me)
	if err != nil {
		t.Fatal(err)
	}
	// The Go runtime's own syscalls meanwhile (futex, nanosleep) and the
	// reading's map lookup add a few.
	if got := after - before; got < calls || got > calls+calls/10 {
		t.Errorf("%d getppid calls counted as %d syscalls, want %d to %d", calls, got, calls, calls+calls/10)
	}
	if n, err := c.count([]int{1 << 30}); n != 0 || err != nil {
		t.Errorf("count(a pid that does not exist) = %d, %v; want 0, nil", n, err)
	}
}

func TestNestedPIDNamespace(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   bool
	}{
		{"Name:\tsh\nTgid:\t9751\nNSpid:\t9751\nNSsid:\t1\n", false},
		{"Name:\tsh\nNSpid:\t9751\t12\n", true},
		{"Name:\tsh\n", false}, // before Linux 4.1: no NSpid
	} {
		if got := nestedPIDNamespace(tc.status); got != tc.want {
			t.Errorf("nestedPIDNamespace(%q) = %v, want %v", tc.status, got, tc.want)
		}
	}
}

// TestNeedsRoot: a refusal names the capabilities, not the library's
// RLIMIT_MEMLOCK hint, and keeps the errno; other errors pass as they are.
func TestNeedsRoot(t *testing.T) {
	refused := needsRoot(fmt.Errorf("map create: %w (MEMLOCK may be too low, consider rlimit.RemoveMemlock)", unix.EPERM))
	if !strings.HasPrefix(refused.Error(), "not permitted: counting syscalls needs root (CAP_BPF and CAP_PERFMON): ") || !errors.Is(refused, unix.EPERM) {
		t.Errorf("needsRoot(EPERM) = %v", refused)
	}
	if other := fmt.Errorf("attach: %w", unix.ENOENT); needsRoot(other) != other {
		t.Errorf("needsRoot(ENOENT) = %v, want it unchanged", needsRoot(other))
	}
}
