package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Beside its CPU, what a server's process tree did over a cell's
// samples: the syscalls it made, and how often its threads were woken.
// A server that moves a file with sendfile or splice in large pieces
// makes few of either per MiB; one that copies it through userspace in
// small reads and writes, or hands each event to another thread, makes
// many.

// serverReading is a server's process tree at one moment: the CPU time
// its processes have used (clock ticks), the wake-ups of their threads
// (voluntary context switches: each time a thread slept, for a socket, a
// lock or a timer, and was woken) and, with a syscallCounter, the
// syscalls they have made since it was opened. Each ok flag is false
// where that could not be read.
type serverReading struct {
	ticks, wakeups, syscalls       uint64
	ticksOK, wakeupsOK, syscallsOK bool
}

// serverUse is what a server's tree did between readings, or summed over
// samples.
type serverUse struct {
	cpu                          float64 // seconds
	wakeups, syscalls            uint64
	cpuOK, wakeupsOK, syscallsOK bool
}

// since is what the tree did from before to r. A count that went down
// (a process or thread that exited in between took its count along) is
// not known.
func (r serverReading) since(before serverReading) serverUse {
	return serverUse{
		cpu:        float64(r.ticks-before.ticks) / 100, // USER_HZ
		wakeups:    r.wakeups - before.wakeups,
		syscalls:   r.syscalls - before.syscalls,
		cpuOK:      before.ticksOK && r.ticksOK && r.ticks >= before.ticks,
		wakeupsOK:  before.wakeupsOK && r.wakeupsOK && r.wakeups >= before.wakeups,
		syscallsOK: before.syscallsOK && r.syscallsOK && r.syscalls >= before.syscalls,
	}
}

// totalUse sums what the tree did over samples; a count not known in one
// of them is not known in the sum, nor is any count over no sample.
func totalUse(uses []serverUse) serverUse {
	if len(uses) == 0 {
		return serverUse{}
	}
	t := serverUse{cpuOK: true, wakeupsOK: true, syscallsOK: true}
	for _, u := range uses {
		t.cpu += u.cpu
		t.wakeups += u.wakeups
		t.syscalls += u.syscalls
		t.cpuOK = t.cpuOK && u.cpuOK
		t.wakeupsOK = t.wakeupsOK && u.wakeupsOK
		t.syscallsOK = t.syscallsOK && u.syscallsOK
	}
	return t
}

// perUnit is n per MiB of bytes on "mibps" rows, per request on the
// others (the units the server's CPU is given in, there per GiB and in
// µs); ok is false when there is nothing to divide by.
func perUnit(metric string, n uint64, bytes, requests int64) (v float64, ok bool) {
	if metric == "mibps" {
		if bytes <= 0 {
			return 0, false
		}
		return float64(n) / (float64(bytes) / (1 << 20)), true
	}
	if requests <= 0 {
		return 0, false
	}
	return float64(n) / float64(requests), true
}

// setUse gives o the syscalls and wake-ups per unit (see perUnit) of what
// the server's tree did over the accepted samples, which received bytes
// in requests.
func (o *outcome) setUse(metric string, u serverUse, bytes, requests int64) {
	if u.syscallsOK {
		o.syscalls, o.hasSyscalls = perUnit(metric, u.syscalls, bytes, requests)
	}
	if u.wakeupsOK {
		o.wakeups, o.hasWakeups = perUnit(metric, u.wakeups, bytes, requests)
	}
}

// useUnit names perUnit's unit for a row.
func useUnit(metric string) string {
	if metric == "mibps" {
		return "per MiB"
	}
	return "per request"
}

// useFigure writes a syscall or wake-up figure to about two significant
// digits ("5.8", "0.54", "1234"): their spread from server to server is
// far wider than that.
func useFigure(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// useTable is the syscalls and wake-ups of every cell, after the main
// table: the rows and servers of that table.
func (p page) useTable(b *strings.Builder) {
	who := "server"
	switch {
	case p.passthrough():
		who = "relay"
	case p.proxy():
		who = "proxy"
	}
	fmt.Fprintf(b, "\n## Server syscalls and wake-ups\n\nEach cell is syscalls / wake-ups per MiB of file data received on the MiB/s rows, per request on the others, counted over the %[1]s's whole process tree (every thread of every process: nginx's master and workers, say) over the accepted samples, as the CPU in brackets is, and given as the median over the repeats; a wake-up is a thread that slept (waiting for a socket, a lock or a timer) and was woken, its voluntary context switches in /proc/PID/task/TID/status, and a syscall is one the %[1]s entered, counted by an eBPF program on the raw tracepoint sys_enter.", who)
	if p.sysErr != nil {
		fmt.Fprintf(b, " Syscalls were not measured: %s.", p.sysErr)
	}
	b.WriteString("\n\n| workload | unit |")
	for _, s := range p.servers {
		fmt.Fprintf(b, " %s |", s.name)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(p.servers)) + "\n")
	for i, r := range p.rows {
		fmt.Fprintf(b, "| %s | syscalls / wake-ups %s |", r.name, useUnit(r.metric))
		for _, s := range p.servers {
			fmt.Fprintf(b, " %s |", tableSafe(p.cells[i][s.name].useText(p.sysErr == nil)))
		}
		b.WriteString("\n")
	}
}
