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
	// Our processes: this one and its descendants, found by their parents.
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return cpuSnap{}
	}
	type st struct {
		ppid  int
		ticks uint64
	}
	procs := map[int]st{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		t := string(b)
		f := strings.Fields(t[strings.LastIndexByte(t, ')')+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseUint(f[11], 10, 64)
		stime, _ := strconv.ParseUint(f[12], 10, 64)
		procs[pid] = st{ppid, ut + stime}
	}
	ours := map[int]bool{os.Getpid(): true}
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !ours[pid] && ours[p.ppid] {
				ours[pid], changed = true, true
			}
		}
	}
	for pid := range ours {
		s.ours += procs[pid].ticks
	}
	return s
}
