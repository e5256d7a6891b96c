package main

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// A client that ran and was reaped between two readings stays in the
// harness's CPU (as its children's time), so the external clients are not
// counted as other processes.
func TestReapedChildStaysOurs(t *testing.T) {
	before := readCPU()
	if !before.ok {
		t.Fatal("readCPU failed on Linux")
	}
	// About half a second of CPU in a child process, then reaped by Run.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	after := readCPU()
	childTicks := uint64(child.Seconds() * 100) // USER_HZ
	if childTicks < 10 {
		t.Fatalf("the child used only %v of CPU: too little to tell", child)
	}
	// The harness itself adds a little; ticks round down per process.
	if got := after.ours - before.ours; got+2 < childTicks {
		t.Errorf("harness ticks grew by %d while a reaped child used %d (%v)", got, childTicks, child)
	}
}

// TestVoluntarySwitches reads a kernel thread's /proc status (Linux 6.18):
// the voluntary count, not the nonvoluntary one on the line after it,
// whose name ends the same.
func TestVoluntarySwitches(t *testing.T) {
	status := readTestdata(t, "proc-status.txt")
	for _, tc := range []struct {
		name   string
		status string
		want   uint64
		ok     bool
	}{
		{"kworker", status, 13666, true},
		{"nonvoluntary only", "nonvoluntary_ctxt_switches:\t43\n", 0, false},
		{"no counts", "Name:\tx\nState:\tS (sleeping)\n", 0, false},
		{"not a number", "voluntary_ctxt_switches:\tmany\n", 0, false},
	} {
		if got, ok := voluntarySwitches(tc.status); got != tc.want || ok != tc.ok {
			t.Errorf("%s: voluntarySwitches = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestReadServerWakeups: a thread of this process that sleeps and is
// woken n times adds at least n wake-ups to the process's tree, and the
// tree's CPU is read as before. No syscall counter: the syscalls are
// not known.
func TestReadServerWakeups(t *testing.T) {
	const sleeps = 50
	before := readServer(os.Getpid(), nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Its own thread, which blocks in the kernel on every sleep.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range sleeps {
			time.Sleep(time.Millisecond)
		}
	}()
	<-done
	u := readServer(os.Getpid(), nil).since(before)
	if !u.wakeupsOK || !u.cpuOK || u.syscallsOK {
		t.Fatalf("readServer: wake-ups known %v, CPU known %v, syscalls known %v; want true, true, false", u.wakeupsOK, u.cpuOK, u.syscallsOK)
	}
	if u.wakeups < sleeps {
		t.Errorf("%d sleeps on one thread made %d wake-ups in the process, want at least %d", sleeps, u.wakeups, sleeps)
	}
	if r := readServer(1<<30, nil); r.ticksOK || r.wakeupsOK {
		t.Errorf("readServer(a pid that does not exist) = %+v, want nothing known", r)
	}
}
