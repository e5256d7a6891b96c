package bench

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// PinSelf keeps the calling process (a benchmark harness, the client) on
// CPU 0 and says what it did, for the benchmark page:
// the engines run on CPU 1 (taskset), so that neither takes the other's
// CPU in turns, which made runs a few percent apart for no reason.
func PinSelf() string {
	if runtime.NumCPU() < 2 {
		return "Client and server share the machine's one CPU."
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return "Client and server are not pinned (no taskset): the scheduler places them."
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return "Client and server are not pinned: " + err.Error()
	}
	var set unix.CPUSet
	set.Set(0)
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return "Client and server are not pinned: " + err.Error()
		}
	}
	return "The client (this harness's threads) runs on CPU 0 and every server (engines and nginx) on CPU 1 (`taskset -c 1`); the other CPUs, if any, are idle."
}
