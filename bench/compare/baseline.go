package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/internal/stats"
)

// An engine binary the harness runs: the one under test ("engine"), and
// with --baseline the one it is compared against ("baseline"). Both are
// started by startEngine with the same configuration, the same files and
// the same process attributes; only the binary differs.
type engineSpec struct {
	id     string // "engine" or "baseline": the --servers name
	name   string // the column header: "engine" or "engine (baseline)"
	bin    string
	origin string       // where the binary came from, for the page
	build  *bench.Build // the binary was built by this run: from what; nil for one given
	kx     string       // --key-exchange: the one key exchange its TLS accepts; "" for its default
}

// baselineName is the baseline's column header and key in the cells.
const baselineName = "engine (baseline)"

// isEngine: the --servers names that are engine binaries.
func isEngine(id string) bool { return id == "engine" || id == "baseline" }

// fileSHA256 is the binary's SHA-256 in hex, for the page: two runs name
// exactly which binaries they measured, and a page whose two binaries are
// the same file says so.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// parseSize reads a byte count: a plain number of bytes, or a number with
// a unit: kB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024);
// "K", "M", "G" alone are the binary ones. Case is ignored.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.ToLower(strings.TrimSpace(t[i:]))
	mult := map[string]float64{"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (use bytes, kB, MB, GB, KiB, MiB or GiB)", s, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, or one with a unit (100MB, 96MiB)", s)
	}
	n := int64(v * mult)
	if float64(n) != v*mult {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	return n, nil
}

// thousands formats n with a comma every three digits: 99,943,778.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// splitWorkloads splits a --workloads list at its commas. A comma
// followed by a space belongs to a workload's name ("large file, 1
// connection, h1 TLS"), so names can be given as they are printed;
// selectWorkloads splits an item that names nothing there too.
func splitWorkloads(spec string) []string {
	var out []string
	start := 0
	for i := 0; i < len(spec); i++ {
		if spec[i] == ',' && (i+1 == len(spec) || spec[i+1] != ' ') {
			out = append(out, spec[start:i])
			start = i + 1
		}
	}
	out = append(out, spec[start:])
	var items []string
	for _, it := range out {
		if it = strings.TrimSpace(it); it != "" {
			items = append(items, it)
		}
	}
	return items
}

// selectWorkloads keeps the rows that one item of spec names: by short id
// (exactly), or by a part of the name (ignoring case). An item that names
// no row is an error, so a typo does not silently shrink the run. The
// rows keep the matrix's order.
func selectWorkloads(rows []row, spec string) ([]row, error) {
	items := splitWorkloads(spec)
	if len(items) == 0 {
		return nil, fmt.Errorf("--workloads %q names no workload", spec)
	}
	keep := make([]bool, len(rows))
	mark := func(it string) bool {
		found := false
		for i, r := range rows {
			if r.id == it || strings.Contains(strings.ToLower(r.name), strings.ToLower(it)) {
				keep[i], found = true, true
			}
		}
		return found
	}
	for _, it := range items {
		if mark(it) {
			continue
		}
		// Not a name as printed: perhaps a list written with spaces
		// after its commas ("large-h1, 1k-h1-64c").
		for part := range strings.SplitSeq(it, ",") {
			if part = strings.TrimSpace(part); part == "" || !mark(part) {
				return nil, fmt.Errorf("--workloads: %q is neither a workload id nor part of a name; the workloads are:\n%s", it, workloadList(rows))
			}
		}
	}
	var out []row
	for i, r := range rows {
		if keep[i] {
			out = append(out, r)
		}
	}
	return out, nil
}

// workloadList is the list of ids and names, for errors and -h.
func workloadList(rows []row) string {
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-18s %s\n", r.id, r.name)
	}
	return b.String()
}

// pairedRatios are the per-repeat ratios engine/baseline (baseline/engine
// for lower-is-better metrics), over the repeats in which both had a
// figure: the two ran back to back in the same repeat, so these show how
// much the ratio moves from one repeat to the next.
func pairedRatios(e, b *cell, metric string) []float64 {
	byRepeat := map[int]float64{}
	for _, o := range b.repeats {
		if o.accepted > 0 && o.value != 0 {
			byRepeat[o.repeat] = o.value
		}
	}
	var out []float64
	for _, o := range e.repeats {
		bv, ok := byRepeat[o.repeat]
		if !ok || o.accepted == 0 || o.value == 0 {
			continue
		}
		out = append(out, ratio(o.value, bv, metric))
	}
	return out
}

// ratio is how the engine fares against another server: above 1 favours
// the engine. For p99 latency (lower is better) it is the other's
// latency over the engine's.
func ratio(engine, other float64, metric string) float64 {
	if metric == "p99" || metric == "latency" {
		return other / engine
	}
	return engine / other
}

// procAttrs is what a server process runs under, as readProcAttrs reads
// it: the engine and its baseline must match in all of it.
type procAttrs struct {
	nice, policy string // /proc/PID/stat fields 19 and 41
	cgroup       string // /proc/PID/cgroup
	limits       string // /proc/PID/limits
}

// String is the short form for the page: nice, policy, the open-files
// limit and the cgroups other than the root.
func (a procAttrs) String() string {
	files := "?"
	for _, line := range strings.Split(a.limits, "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) >= 2 {
				files = f[0] + "/" + f[1]
			}
		}
	}
	var groups []string
	for _, line := range strings.Split(a.cgroup, "\n") {
		if line != "" && !strings.HasSuffix(line, ":/") {
			groups = append(groups, line)
		}
	}
	cg := "all at the root"
	if len(groups) > 0 {
		cg = strings.Join(groups, ", ")
	}
	return fmt.Sprintf("nice (%s), scheduling policy (%s), cgroups (%s) and resource limits (open files %s, soft/hard)", a.nice, a.policy, cg, files)
}

// diff names what differs between two processes' attributes: placed,
// what the harness gives a process (nice, scheduling policy, cgroups),
// and limits, the resource limits, which a process can also change
// itself (Go's runtime raises the soft open-files limit to the hard one
// at start). "" where nothing does.
func (a procAttrs) diff(b procAttrs) (placed, limits string) {
	var d []string
	if a.nice != b.nice {
		d = append(d, fmt.Sprintf("nice %s vs %s", a.nice, b.nice))
	}
	if a.policy != b.policy {
		d = append(d, fmt.Sprintf("scheduling policy %s vs %s", a.policy, b.policy))
	}
	if a.cgroup != b.cgroup {
		d = append(d, fmt.Sprintf("cgroups %q vs %q", a.cgroup, b.cgroup))
	}
	var l []string
	if a.limits != b.limits {
		al, bl := strings.Split(a.limits, "\n"), strings.Split(b.limits, "\n")
		for i := range min(len(al), len(bl)) {
			if al[i] != bl[i] {
				l = append(l, fmt.Sprintf("%q vs %q", oneLine(al[i]), oneLine(bl[i])))
			}
		}
		if len(al) != len(bl) {
			l = append(l, "limits listed differently")
		}
	}
	return strings.Join(d, "; "), strings.Join(l, "; ")
}

// sameFooting checks that the engine and its baseline, when both run,
// run under the same conditions, process for process, and says so for
// the page ("" without a baseline). Nice, scheduling policy or cgroups
// that differ are the harness's fault and an error; limits that differ
// were set by a binary itself and are reported.
func sameFooting(list []*server) (string, error) {
	var e, b *server
	for _, s := range list {
		switch s.id {
		case "engine":
			e = s
		case "baseline":
			b = s
		}
	}
	if e == nil || b == nil {
		return "", nil
	}
	var shown string
	var limitNotes []string
	for _, pair := range []struct {
		what string
		e, b *proc
	}{{"plain", e.proc, b.proc}, {"TLS", e.tlsProc, b.tlsProc}} {
		if pair.e == nil || pair.b == nil {
			continue // one process only (a proxy)
		}
		ea, err := readProcAttrs(pair.e.Cmd.Process.Pid)
		if err != nil {
			return fmt.Sprintf("The harness could not read the processes' attributes to compare them (%v).", err), nil
		}
		ba, err := readProcAttrs(pair.b.Cmd.Process.Pid)
		if err != nil {
			return fmt.Sprintf("The harness could not read the processes' attributes to compare them (%v).", err), nil
		}
		placed, limits := ea.diff(ba)
		if placed != "" {
			return "", fmt.Errorf("the engine's and the baseline's %s processes run under different conditions: %s", pair.what, placed)
		}
		if limits != "" {
			limitNotes = append(limitNotes, fmt.Sprintf("%s processes: %s", pair.what, limits))
		}
		if shown == "" {
			shown = ea.String()
		}
	}
	s := fmt.Sprintf("The engine and its baseline are started by the same code: the same configuration (only the ports differ), the same files, the same environment, and the CPU affinity of this harness (CPUs %s), which both inherit; checked after start, their processes have the same %s.", cpuAffinity(), shown)
	if len(limitNotes) > 0 {
		s += " Their resource limits differ, as the binaries set them themselves (the engine's first): " + strings.Join(limitNotes, "; ") + "."
	}
	return s, nil
}

// belowMinRatio names the rows on which the engine's median over the
// baseline's falls below min, "row: ratio" each; none without a
// baseline.
func belowMinRatio(rows []row, cells []map[string]*cell, min float64) []string {
	var out []string
	for i, r := range rows {
		v, ok := baselineRatio(r, cells[i])
		if ok && v < min {
			out = append(out, fmt.Sprintf("%s: %.3f", r.name, v))
		}
	}
	return out
}

// baselineRatio is the engine's median over the baseline's on a row
// (inverted for latency), and whether both had figures.
func baselineRatio(r row, cells map[string]*cell) (float64, bool) {
	e, b := cells["engine"], cells[baselineName]
	if e == nil || b == nil {
		return 0, false
	}
	ev, bv := e.figures(), b.figures()
	if len(ev) == 0 || len(bv) == 0 || stats.Median(ev) == 0 || stats.Median(bv) == 0 {
		return 0, false
	}
	return ratio(stats.Median(ev), stats.Median(bv), r.metric), true
}

// cpuSnap is the machine's CPU time at one moment, in clock ticks: busy
// (user, nice, system, irq, softirq), stolen by the hypervisor, all of it,
// and the part of busy that this harness and its servers used.
type cpuSnap struct {
	ok                       bool
	busy, steal, total, ours uint64
}

// disturbance is what else the machine did between two snapshots, as
// shares of all CPU time: other processes' CPU (busy time that was not
// this harness's or its servers') and time stolen by the hypervisor.
// Either disturbs a measurement; ok is false where it cannot be told.
func disturbance(a, b cpuSnap) (others, steal float64, ok bool) {
	if !a.ok || !b.ok || b.total <= a.total {
		return 0, 0, false
	}
	total := float64(b.total - a.total)
	busy, ours := float64(b.busy-a.busy), float64(b.ours)-float64(a.ours)
	// A process of ours that exited and was reaped meanwhile is in its
	// parent's children's time; one not yet reaped is in neither: never
	// count less than nothing.
	return max(0, busy-ours) / total, float64(b.steal-a.steal) / total, true
}

// disturbedTries is how many times, with --max-others, a run that other
// processes disturbed is measured in all; the last one is kept anyway,
// and its disturbance shown.
const disturbedTries = 3

// waitQuiet waits until, over two seconds, other processes used at most
// the share max of the CPU, or until wait has passed (then it says so
// and returns: the run that follows shows how disturbed it was).
func waitQuiet(ctx context.Context, max float64, wait time.Duration) {
	deadline := time.Now().Add(wait)
	logged := false
	for ctx.Err() == nil {
		a := readCPU()
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		others, _, ok := disturbance(a, readCPU())
		if !ok || others <= max {
			if logged {
				log.Printf("quiet again (other processes %.0f%% of the CPU)", 100*others)
			}
			return
		}
		if time.Now().After(deadline) {
			log.Printf("other processes still use %.0f%% of the CPU after %v: measuring anyway", 100*others, wait)
			return
		}
		if !logged {
			log.Printf("waiting for other processes to quieten (%.0f%% of the CPU, more than %.0f%%)", 100*others, 100*max)
			logged = true
		}
	}
}
