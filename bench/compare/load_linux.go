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

// serverTicks is the CPU time, in clock ticks (USER_HZ, 100 on Linux),
// that a server's process and all its descendants (nginx's workers) have
// used so far; ok is false where it cannot be read.
func serverTicks(pid int) (ticks uint64, ok bool) {
	procs, err := readProcs()
	if _, found := procs[pid]; err != nil || !found {
		return 0, false
	}
	return procs.treeTicks(pid), true
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

// treeTicks sums the ticks of root and its descendants, found by their
// parents.
func (procs procTable) treeTicks(root int) uint64 {
	ours := map[int]bool{root: true}
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !ours[pid] && ours[p.ppid] {
				ours[pid], changed = true, true
			}
		}
	}
	var sum uint64
	for pid := range ours {
		sum += procs[pid].ticks
	}
	return sum
}
