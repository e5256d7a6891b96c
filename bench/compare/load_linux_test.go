package main

import (
	"os"
	"os/exec"
	"testing"
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
