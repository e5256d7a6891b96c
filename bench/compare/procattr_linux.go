package main

import (
	"fmt"
	"os"
	"strings"
)

// readProcAttrs reads what a running process was given that bears on its
// speed and that it does not choose itself: nice and scheduling policy,
// cgroups, resource limits.
func readProcAttrs(pid int) (procAttrs, error) {
	dir := fmt.Sprintf("/proc/%d/", pid)
	stat, err := os.ReadFile(dir + "stat")
	if err != nil {
		return procAttrs{}, err
	}
	// The command name (field 2) may hold spaces; the fields after its
	// closing parenthesis start at field 3.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 39 {
		return procAttrs{}, fmt.Errorf("%sstat: %d fields", dir, len(fields)+2)
	}
	cgroup, err := os.ReadFile(dir + "cgroup")
	if err != nil {
		return procAttrs{}, err
	}
	limits, err := os.ReadFile(dir + "limits")
	if err != nil {
		return procAttrs{}, err
	}
	return procAttrs{nice: fields[16], policy: fields[38], cgroup: strings.TrimSpace(string(cgroup)), limits: strings.TrimSpace(string(limits))}, nil
}

// cpuAffinity is the CPUs this harness may run on, which every server it
// starts inherits.
func cpuAffinity() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
