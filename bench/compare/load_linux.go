package main

import (
	"os"
	"strconv"
	"strings"
)

// readCPU reads the machine's CPU time and this harness's share of it:
// the harness and every process it started, down to nginx's workers. All
// in clock ticks. The kernel charges softirq time (loopback networking)
// to the task it interrupted, so busy counts it in as the processes do.
func readCPU() cpuSnap {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSnap{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuSnap{}
	}
	var v [8]uint64 // user nice system idle iowait irq softirq steal
	for i := range v {
		v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
	}
	s := cpuSnap{ok: true, busy: v[0] + v[1] + v[2] + v[5] + v[6], steal: v[7]}
	s.total = s.busy + v[3] + v[4] + v[7]
	procs, err := readProcs()
	if err != nil {
		return cpuSnap{}
	}
	s.ours = procs.treeTicks(os.Getpid())
	return s
}

// readServer reads a server's process tree, pid and its descendants (nginx's
// workers), at one moment: the CPU ticks of its processes, the wake-ups
// of every thread of every process (voluntary_ctxt_switches in
// /proc/PID/task/TID/status) and, with sys, the syscalls of every
// process. A thread that exits between two readings takes its wake-ups
// along (its process's status keeps no count of its dead threads), as a
// process that exits takes all three: the servers here keep their
// threads and workers for the whole run, so it does not happen to them.
func readServer(pid int, sys *syscallCounter) serverReading {
	procs, err := readProcs()
	if _, found := procs[pid]; err != nil || !found {
		return serverReading{}
	}
	tree := procs.tree(pid)
	r := serverReading{ticksOK: true, wakeupsOK: true}
	for _, p := range tree {
		r.ticks += procs[p].ticks
	}
	for _, p := range tree {
		n, err := processWakeups(p)
		if err != nil && p == pid {
			r.wakeupsOK = false
		}
		r.wakeups += n // 0 for a child that exited meanwhile
	}
	if sys != nil {
		var err error
		r.syscalls, err = sys.count(tree)
		r.syscallsOK = err == nil
	}
	return r
}

// processWakeups sums the wake-ups of a process's threads; a thread that
// exits while they are read adds none.
func processWakeups(pid int) (uint64, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum uint64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/status")
		if err != nil {
			continue // exited meanwhile
		}
		if n, ok := voluntarySwitches(string(b)); ok {
			sum += n
		}
	}
	return sum, nil
}

// voluntarySwitches is a thread's voluntary_ctxt_switches, from its
// /proc status: the times it gave up the CPU to wait and was woken. The
// line after it, nonvoluntary_ctxt_switches, is preemption, not a
// wake-up.
func voluntarySwitches(status string) (uint64, bool) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// procTable is every process's parent and CPU ticks, read from /proc at
// one moment: utime+stime (all its threads) and cutime+cstime, the time
// of the children it has waited for. Without the latter a client that
// ran and was reaped between two readings (curl, wrk, s_time) took its
// ticks along, and its CPU looked like another process's.
type procTable map[int]procEntry

type procEntry struct {
	ppid  int
	ticks uint64
}

func readProcs() (procTable, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	procs := procTable{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// The command name (field 2) may hold spaces; the fields after
		// its closing parenthesis start at field 3.
		t := string(b)
		f := strings.Fields(t[strings.LastIndexByte(t, ')')+1:])
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks uint64
		for _, v := range f[11:15] { // utime stime cutime cstime
			n, _ := strconv.ParseUint(v, 10, 64)
			ticks += n
		}
		procs[pid] = procEntry{ppid, ticks}
	}
	return procs, nil
}

// treeTicks sums the ticks of root and its descendants.
func (procs procTable) treeTicks(root int) uint64 {
	var sum uint64
	for _, pid := range procs.tree(root) {
		sum += procs[pid].ticks
	}
	return sum
}

// tree is root and its descendants, found by their parents.
func (procs procTable) tree(root int) []int {
	ours := map[int]bool{root: true}
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !ours[pid] && ours[p.ppid] {
				ours[pid], changed = true, true
			}
		}
	}
	pids := make([]int, 0, len(ours))
	for pid := range ours {
		pids = append(pids, pid)
	}
	return pids
}
