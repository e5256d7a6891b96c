package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/internal/stats"
	"github.com/mediaship/engine/preflight"
)

// outcome is what one repeat of one cell came to.
type outcome struct {
	repeat   int            // 1-based
	err      string         // bench.Run failed: no samples at all
	samples  int            // samples taken
	accepted int            // of which accepted
	rejected map[string]int // why the others were, summed over the samples
	value    float64        // the figure over the accepted samples; set when accepted > 0
	// Server CPU: seconds per GiB on "mibps" rows; on external "rps"
	// rows, microseconds per request. Set when hasCPU.
	cpu    float64
	hasCPU bool
	// The server's syscalls and wake-ups (serveruse.go) over the
	// accepted samples, its whole process tree: per MiB on "mibps" rows,
	// per request on the others. Set when hasSyscalls, hasWakeups.
	syscalls, wakeups       float64
	hasSyscalls, hasWakeups bool
	// External clients: wrk's p99 latency in ms (the median over the
	// accepted samples), and s_time's timed connections and how many of
	// them it marked as resumed, over the accepted samples.
	p99            float64
	hasP99         bool
	conns, resumed int64
	// Open-loop latency rows (metric "latency"): the median latency in
	// ms (value is the p99), and the failed responses over the whole run,
	// warmup included.
	p50    float64
	failed int64
	// With --client proxy: the connections the backend accepted during
	// this repeat's run of the cell (warmup included); set when
	// hasBackend.
	backendConns int64
	hasBackend   bool
	// What else the machine did meanwhile, as shares of all CPU time:
	// other processes, and time stolen by the hypervisor; set when hasLoad.
	others, steal float64
	hasLoad       bool
	// With --max-others: the other processes' share in each earlier run
	// of this repeat that was measured again for it.
	discarded []float64
	// engine bench's own cost (this process's CPU over the samples):
	// client CPU seconds per GiB on "mibps" rows, µs per request
	// otherwise; the CPUs its work could use; how busy it kept them;
	// and its ceiling in the row's unit, the figure those CPUs fully
	// busy would have verified at that cost. Set when hasClient.
	clientCost, clientBusy, clientCeiling float64
	clientCPUs                            int
	hasClient                             bool
	// The TLS key exchanges the cell's connections negotiated: engine
	// bench's count of responses by key exchange, or what one openssl
	// s_client probe with s_time's settings negotiated (kxProbe).
	kx      map[string]int64
	kxProbe string
}

func newOutcome(repeat int, rep *bench.Report, err error, metric string) (o outcome) {
	o = outcome{repeat: repeat}
	if err != nil {
		o.err = err.Error()
		return o
	}
	o.samples, o.accepted, o.rejected = len(rep.Samples), rep.Accepted, rejections(rep)
	o.kx = rep.KeyExchanges
	if rep.Accepted == 0 {
		o.clientFrom(rep.Client, metric, 0)
		return o
	}
	// The client's ceiling is read against the figure, set below.
	defer func() { o.clientFrom(rep.Client, metric, o.value) }()
	switch metric {
	case "rps":
		o.value = rep.RPS.Median
	case "p99":
		o.value = float64(rep.Latency.P99) / 1e6
	case "latency":
		o.value, o.p50 = float64(rep.Latency.P99)/1e6, float64(rep.Latency.P50)/1e6
		for _, n := range rep.Errors {
			o.failed += int64(n)
		}
		// µs of server CPU per response, over the samples (what the
		// server's CPU was read over).
		var responses int64
		for _, sm := range rep.Samples {
			responses += sm.Responses
		}
		if rep.Server != nil && responses > 0 {
			o.cpu, o.hasCPU = 1e6*rep.Server.CPUSeconds/float64(responses), true
		}
		return o
	default:
		o.value = rep.MiBps.Median
	}
	if rep.Server != nil && rep.Bytes > 0 {
		o.cpu, o.hasCPU = rep.Server.CPUSeconds/(float64(rep.Bytes)/(1<<30)), true
	}
	return o
}

// note is what the page says about a repeat that lost samples or failed,
// "" when every sample was accepted.
func (o outcome) note() string {
	switch {
	case o.err != "":
		return fmt.Sprintf("repeat %d: failed: %s", o.repeat, o.err) + o.remeasured()
	case o.samples == 0:
		return fmt.Sprintf("repeat %d: no samples taken", o.repeat) + o.remeasured()
	case o.accepted < o.samples:
		return fmt.Sprintf("repeat %d: %d of %d samples rejected (%s)", o.repeat, o.samples-o.accepted, o.samples, counts(o.rejected)) + o.remeasured()
	}
	if len(o.discarded) > 0 {
		return fmt.Sprintf("repeat %d: %s", o.repeat, strings.TrimPrefix(o.remeasured(), "; "))
	}
	return ""
}

// remeasured says which earlier runs of the repeat other processes
// disturbed, "" if none.
func (o outcome) remeasured() string {
	if len(o.discarded) == 0 {
		return ""
	}
	shares := make([]string, len(o.discarded))
	for i, v := range o.discarded {
		shares[i] = fmt.Sprintf("%.0f%%", 100*v)
	}
	s := fmt.Sprintf("; measured %d times: other processes used %s of the CPU in the %s before", len(o.discarded)+1, strings.Join(shares, ", "), plural(len(o.discarded), "run"))
	if o.hasLoad {
		s += fmt.Sprintf(", %.0f%% in the one kept", 100*o.others)
	}
	return s
}

// logLine is the progress line for the terminal.
func (o outcome) logLine(r row) string {
	s := "no figure"
	if o.accepted > 0 {
		s = fmt.Sprintf("%10.1f %s", o.value, r.unit)
		if o.hasP99 {
			s += fmt.Sprintf(", p99 %.2f ms", o.p99)
		}
		if o.p50 > 0 {
			s += fmt.Sprintf(", p50 %.2f ms, %d failed", o.p50, o.failed)
		}
		if o.hasCPU {
			s += fmt.Sprintf(", server CPU %.3g", o.cpu)
		}
		var use []string
		if o.hasSyscalls {
			use = append(use, useFigure(o.syscalls)+" syscalls")
		}
		if o.hasWakeups {
			use = append(use, useFigure(o.wakeups)+" wake-ups")
		}
		if len(use) > 0 {
			s += fmt.Sprintf(", server %s %s", strings.Join(use, " and "), useUnit(r.metric))
		}
	}
	if o.hasBackend {
		s += fmt.Sprintf(", %d backend connections opened", o.backendConns)
	}
	if o.hasLoad {
		s += fmt.Sprintf("  [other processes %.0f%%, steal %.0f%% of the CPU]", 100*o.others, 100*o.steal)
	}
	if n := o.note(); n != "" {
		s += "  (" + n + ")"
	}
	return s
}

// cell is one server on one row: every repeat's outcome, in order.
type cell struct {
	cannot  string // why the server cannot do this row ("no HTTP/3"); it has no repeats then
	repeats []outcome
}

// figures are the values of the repeats that had accepted samples.
func (c *cell) figures() []float64 {
	return c.accepted(func(o outcome) (float64, bool) { return o.value, true })
}

func (c *cell) cpus() []float64 {
	return c.accepted(func(o outcome) (float64, bool) { return o.cpu, o.hasCPU })
}

func (c *cell) p99s() []float64 {
	return c.accepted(func(o outcome) (float64, bool) { return o.p99, o.hasP99 })
}

// accepted collects f's value from each repeat that had accepted samples
// and for which f has one.
func (c *cell) accepted(f func(outcome) (float64, bool)) []float64 {
	var v []float64
	for _, o := range c.repeats {
		if x, ok := f(o); o.accepted > 0 && ok {
			v = append(v, x)
		}
	}
	return v
}

// resumption sums s_time's count over the accepted samples of every
// repeat: connections, and those resumed.
func (c *cell) resumption() (conns, resumed int64) {
	for _, o := range c.repeats {
		conns += o.conns
		resumed += o.resumed
	}
	return conns, resumed
}

// text is the table cell: the median over the repeats that had accepted
// samples, with how many those were when not all; or why there is no
// figure.
func (c *cell) text() string {
	return c.describe(func(v []float64) string { return fmt.Sprintf("%.1f", stats.Median(v)) })
}

// extText is an external row's cell: the figure as text() gives it, with
// wrk's p99 in parentheses and the server's CPU in brackets (s/GiB on
// the large-file rows, µs per request on the 1 KiB ones): "726.1 [0.821]".
func (c *cell) extText(r row) string {
	return c.describe(func(v []float64) string {
		s := fmt.Sprintf("%.1f", stats.Median(v))
		switch r.metric {
		case "rps":
			s = fmt.Sprintf("%.0f", stats.Median(v))
		case "latency":
			var failed int64
			for _, o := range c.repeats {
				failed += o.failed
			}
			p50 := c.accepted(func(o outcome) (float64, bool) { return o.p50, true })
			s = fmt.Sprintf("%.2f / %.2f, %d failed", stats.Median(p50), stats.Median(v), failed)
		}
		if p := c.p99s(); len(p) > 0 {
			s += fmt.Sprintf(" (p99 %.2f ms)", stats.Median(p))
		}
		switch cpu := c.cpus(); {
		case len(cpu) == 0:
			s += " [CPU unknown]"
		case r.metric == "mibps":
			s += fmt.Sprintf(" [%.3f]", stats.Median(cpu))
		default:
			s += fmt.Sprintf(" [%.1f]", stats.Median(cpu))
		}
		return s
	})
}

// useText is the cell of the syscalls and wake-ups table: "5.8 / 0.54",
// the medians over the repeats with accepted samples. counted is false
// when the run could not count syscalls at all: they are "not measured",
// never 0. A figure whose readings failed in every repeat is "unknown".
func (c *cell) useText(counted bool) string {
	switch {
	case c.cannot != "":
		return c.cannot
	case len(c.repeats) == 0:
		return "-"
	case len(c.figures()) == 0:
		return "no accepted sample"
	}
	median := func(v []float64) string {
		if len(v) == 0 {
			return "unknown"
		}
		return useFigure(stats.Median(v))
	}
	sys := "not measured"
	if counted {
		sys = median(c.accepted(func(o outcome) (float64, bool) { return o.syscalls, o.hasSyscalls }))
	}
	return sys + " / " + median(c.accepted(func(o outcome) (float64, bool) { return o.wakeups, o.hasWakeups }))
}

// describe is the cell's text around its figure, which format writes
// from the repeats' figures.
func (c *cell) describe(format func([]float64) string) string {
	n, v := len(c.repeats), c.figures()
	switch {
	case c.cannot != "":
		return c.cannot
	case n == 0:
		return "-"
	case len(v) == n:
		return format(v)
	case len(v) > 0:
		return fmt.Sprintf("%s (%d of %d repeats)", format(v), len(v), n)
	}
	return fmt.Sprintf("no accepted sample in %s: %s", plural(n, "repeat"), c.why())
}

// why sums what kept the repeats from figures: rejection reasons over all
// samples, then each distinct failure.
func (c *cell) why() string {
	reasons := map[string]int{}
	failed := map[string]int{}
	var order []string // failures in the order first seen
	for _, o := range c.repeats {
		for k, v := range o.rejected {
			reasons[k] += v
		}
		if o.err != "" {
			if failed[o.err] == 0 {
				order = append(order, o.err)
			}
			failed[o.err]++
		}
	}
	var parts []string
	if len(reasons) > 0 {
		parts = append(parts, counts(reasons))
	}
	for _, e := range order {
		parts = append(parts, fmt.Sprintf("failed x%d: %s", failed[e], e))
	}
	if len(parts) == 0 {
		return "no samples taken"
	}
	return strings.Join(parts, "; ")
}

// notes are the cell's per-repeat notes, in repeat order.
func (c *cell) notes() []string {
	var out []string
	for _, o := range c.repeats {
		if n := o.note(); n != "" {
			out = append(out, n)
		}
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// rejections sums the reasons the report's samples were rejected for;
// "unverified" means no response that passed its checks streamed during
// the sample, so none of its bytes were proven.
func rejections(rep *bench.Report) map[string]int {
	why := map[string]int{}
	for _, s := range rep.Samples {
		for k, v := range s.Rejected {
			why[k] += v
		}
	}
	return why
}

// counts formats reasons as "reason xN" in a stable order.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s x%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// kernelTLS is whether the engine's TLS process could hand transmission
// to the kernel, and the evidence.
type kernelTLS struct {
	// probe is the preflight answer for the tls ULP and sendfile into it,
	// the two the engine needs to promote a connection: nil available,
	// ErrNotSupported missing, any other error unknown.
	probe error
	// From the engine's TLS log, after the run: the line saying it serves
	// TLS from userspace, and the first failed promotion; "" when absent.
	userspace, promoteFailed string
}

// probeKernelTLS runs the probes engine serve runs to decide whether it
// promotes connections to kernel TLS (ktls.ulp and ktls.sendfile).
func probeKernelTLS() error {
	p := new(preflight.Prober)
	if err := p.TLSULP(); err != nil {
		return err
	}
	return p.KTLSSendfile()
}

// engineLog reads the engine's TLS log for what it said about kernel TLS.
func (k *kernelTLS) engineLog(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case k.userspace == "" && strings.Contains(line, "kernel TLS unavailable"):
			k.userspace = strings.TrimSpace(line)
		case k.promoteFailed == "" && strings.Contains(line, "promotion to kernel TLS failed"):
			k.promoteFailed = strings.TrimSpace(line)
		}
	}
}

func (k kernelTLS) active() bool { return k.probe == nil && k.userspace == "" }

// statement is the page's sentence on kernel TLS.
func (k kernelTLS) statement() string {
	const absent = "every TLS figure below is the userspace TLS path; the kernel TLS + sendfile path is not in these figures."
	var ns *preflight.NotSupportedError
	switch {
	case errors.As(k.probe, &ns):
		missing := "no " + ns.Feature
		if ns.Feature == "kernel TLS" {
			missing = "no `tls` ULP"
		}
		return fmt.Sprintf("Kernel TLS: not available on this kernel (%s): %s The probe `engine preflight` runs said: %s.", missing, absent, k.probe)
	case errors.Is(k.probe, errors.ErrUnsupported):
		return fmt.Sprintf("Kernel TLS: not available (not Linux): %s", absent)
	case k.probe != nil:
		return fmt.Sprintf("Kernel TLS: could not tell whether this kernel has it (%s); take every TLS figure below as possibly the userspace TLS path.", k.probe)
	case k.userspace != "":
		return fmt.Sprintf("Kernel TLS: the probes found it, but the engine's TLS process served from userspace (its log: `%s`): %s", k.userspace, absent)
	}
	s := "Kernel TLS: active (the `tls` ULP and sendfile into kernel TLS both work here): the engine hands a TLS 1.3 connection to the kernel after the first 1 MiB of response body (`promote_after`), so its large-file HTTP/1.1 and HTTP/2 TLS figures are mostly the kernel TLS + sendfile path; nginx was offered kernel TLS too, lighttpd was not; Caddy and Go net/http (Go's crypto/tls) and HTTP/3 (QUIC) encrypt in userspace."
	if k.promoteFailed != "" {
		s += fmt.Sprintf(" Some engine connections failed to promote and stayed in userspace (its log: `%s`).", k.promoteFailed)
	}
	return s
}

// page is everything the report says, gathered before it is written.
type page struct {
	command  string
	when     time.Time
	host     string
	cpus     int
	cpuModel string
	kernel   string // uname -sr
	goVer    string
	ktls     kernelTLS
	// harness is the checkout this harness ran from, read at its start;
	// treeChanged how the tree the engine was built from (or, for a
	// binary given, the harness's) changed by the end, "" if it did not.
	harness     bench.Tree
	treeChanged string
	// keyExchange is --key-exchange.
	keyExchange keyExchangeChoice
	// upstream names the backend's or origin's versions (proxy and
	// passthrough runs).
	upstream string
	quick    bool
	repeats  int
	samples  int
	sample   time.Duration // one sample's length
	servers  []*server
	rows     []row
	cells    []map[string]*cell // [row][server name]
	large    int64              // the large file's size in bytes
	// With a baseline: what sameFooting found, and the lowest
	// engine/baseline ratio accepted.
	footing  string
	minRatio float64
	// client is --client: "bench" (or "", in tests), "external" or
	// "proxy".
	client string
	// What the run could not do (rows and servers left out, and why),
	// and the apt-get commands it ran.
	leftOut, installed []string
	// With --client external: each client's version, by row.client.
	clientVersions map[string]string
	// sysErr is why the servers' syscalls were not counted; nil when
	// they were.
	sysErr error
}

// external: the rows are measured by programs other than this harness
// (the proxy rows too, but for one).
func (p page) external() bool { return p.client == "external" || p.proxy() }

// proxy: each server relays to one upstream (as a reverse proxy, or in
// passthrough).
func (p page) proxy() bool { return p.client == "proxy" || p.passthrough() }

func (p page) passthrough() bool { return p.client == "passthrough" }

func render(p page) string {
	var b strings.Builder
	title := "Benchmarks"
	if p.proxy() {
		title = "Reverse proxy benchmarks"
	}
	if p.passthrough() {
		title = "TLS passthrough benchmarks"
	}
	fmt.Fprintf(&b, "# %s\n\nGenerated by `%s` on %s.\n\n", title, p.command, p.when.Format("2006-01-02 15:04 MST"))
	p.measuredSection(&b)
	switch {
	case p.passthrough():
		b.WriteString(passIntro)
	case p.proxy():
		b.WriteString(proxyIntro)
	}
	if p.quick {
		b.WriteString("**Quick mode: a smoke test of the harness, not a measurement.**\n\n")
	}
	client := "`engine bench` in the same process as this harness"
	if p.external() {
		client = "external programs, a different one per row (curl, wrk, h2load, openssl s_time: see \"How each row was measured\"), started by this harness on the same machine"
	}
	if p.proxy() {
		client = "curl and wrk, started by this harness on the same machine, and `engine bench` in this harness's process for the fixed-rate row (see \"How each row was measured\")"
	}
	if p.passthrough() {
		client = "curl, wrk and openssl s_time, started by this harness on the same machine, and `engine bench` in this harness's process for the HTTP/3 row (see \"How each row was measured\")"
	}
	fmt.Fprintf(&b, "Machine: %s, %s, %s, %s. Kernel: %s. Client: %s; servers on loopback, one certificate (ECDSA P-256), TLS 1.3.\n\n",
		p.host, cmp.Or(p.cpuModel, "CPU model unknown"), plural(p.cpus, "CPU"), p.goVer, p.kernel, client)
	fmt.Fprintf(&b, "%s\n\n", p.ktls.statement())
	if p.hasTLS() {
		fmt.Fprintf(&b, "%s\n\n", p.keyExchangeStatement())
	}
	if p.external() {
		fmt.Fprintf(&b, "The servers take turns on each row, in an order that rotates from row to row, over %s. A figure is the median, over the repeats that had accepted samples, of each repeat's median over its samples (%d per repeat, of about %v each; on the curl rows, one transfer is a sample, and transfers go on for %v), after a warmup. What makes a sample count depends on what its client can check, and is listed per row below: curl's rows check every byte of the cell's first transfer against its BLAKE3 digest, and each sample's status, HTTP version and lengths as curl reports them; wrk's and h2load's rows were checked for status and length, not content. In brackets, the server's CPU time (its process and all its children, from /proc, over the accepted samples): seconds per GiB received on the large-file rows, microseconds per request on the 1 KiB rows. ",
			plural(p.repeats, "repeat"), p.samples, p.sample, time.Duration(p.samples)*p.sample)
	} else {
		fmt.Fprintf(&b, "The servers take turns on each row, in an order that rotates from row to row, over %s. A figure is the median, over the repeats that had accepted samples, of each repeat's median over %d samples of %v, after a warmup; a sample counts only when every response in it had the right status, the exact length and the BLAKE3 digest from the fixtures' B3SUMS. ",
			plural(p.repeats, "repeat"), p.samples, p.sample)
	}
	if p.repeats > 1 {
		fmt.Fprintf(&b, "A figure that comes from fewer than all %d repeats says how many (\"812.3 (2 of %d repeats)\"). ", p.repeats, p.repeats)
	}
	b.WriteString("A cell without a figure says why, and the notes after the tables list every repeat that lost samples. Servers:\n\n")
	for _, s := range p.servers {
		if s.binary != nil {
			fmt.Fprintf(&b, "- **%s**: the binary described above; %s\n", s.name, s.about)
			continue
		}
		fmt.Fprintf(&b, "- **%s**: %s\n", s.name, s.about)
	}
	if p.upstream != "" {
		what := "the backend"
		if p.passthrough() {
			what = "the origin"
		}
		fmt.Fprintf(&b, "\nVersions of %s: %s.\n", what, p.upstream)
	}
	if len(p.installed) > 0 {
		fmt.Fprintf(&b, "\nInstalled by this run (as root, from Debian): %s.\n", strings.Join(p.installed, ", "))
	}
	if len(p.leftOut) > 0 {
		b.WriteString("\nLeft out of this run:\n\n")
		for _, l := range p.leftOut {
			fmt.Fprintf(&b, "- %s\n", oneLine(l))
		}
	}
	b.WriteString("\n| workload | unit |")
	for _, s := range p.servers {
		fmt.Fprintf(&b, " %s |", s.name)
	}
	var ratios []string
	for _, s := range p.servers {
		if s.name != "engine" {
			ratios = append(ratios, s.name)
			fmt.Fprintf(&b, " engine/%s |", cmp.Or(s.id, s.name))
		}
	}
	b.WriteString("\n|---|---|")
	for range p.servers {
		b.WriteString("---:|")
	}
	for range ratios {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	marked := false
	for i, r := range p.rows {
		fmt.Fprintf(&b, "| %s | %s |", r.name, r.unit)
		for _, s := range p.servers {
			c := p.cells[i][s.name]
			text := c.text()
			if r.client != "" || p.proxy() {
				text = c.extText(r)
			}
			if c.clientBound(r) {
				text += " " + ceilingMark
				marked = true
			}
			fmt.Fprintf(&b, " %s |", tableSafe(text))
		}
		var e []float64
		if c := p.cells[i]["engine"]; c != nil {
			e = c.figures()
		}
		for _, name := range ratios {
			o := p.cells[i][name].figures()
			if len(e) == 0 || len(o) == 0 || stats.Median(o) == 0 || stats.Median(e) == 0 {
				b.WriteString(" - |")
				continue
			}
			// For p99, lower is better: ratio shows how many times better.
			fmt.Fprintf(&b, " %.2f |", ratio(stats.Median(e), stats.Median(o), r.metric))
		}
		b.WriteString("\n")
	}
	b.WriteString("\nRatios above 1 favour the engine (for p99, the other server's latency divided by the engine's).\n")
	if marked {
		fmt.Fprintf(&b, "\n%s: within 10%% of the client's ceiling for that cell (see \"The client's ceiling\" below): the client was at least 90%% busy, so the figure may be the client's, not the server's.\n", ceilingMark)
	}
	if p.external() {
		p.useTable(&b)
	}
	p.baselineSection(&b)
	if p.external() {
		p.externalSections(&b)
		if p.proxy() && !p.passthrough() {
			p.backendSection(&b)
		}
	} else {
		p.cpuTable(&b)
	}
	p.keyExchangeSection(&b)
	p.notes(&b)
	p.ceilingSection(&b)
	b.WriteString("\n## What this page does not measure\n\n")
	for _, s := range p.unmeasured() {
		fmt.Fprintf(&b, "- %s\n", s)
	}
	return b.String()
}

// serverColumns ends a table's header row (begun "| workload |") with a
// right-aligned column per server.
func (p page) serverColumns(b *strings.Builder) {
	for _, s := range p.servers {
		fmt.Fprintf(b, " %s |", s.name)
	}
	b.WriteString("\n|---|")
	for range p.servers {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
}

// cpuTable is engine bench's server CPU per GiB, a table of its own.
func (p page) cpuTable(b *strings.Builder) {
	b.WriteString("\nServer CPU seconds per GiB served (median), on the throughput rows:\n\n| workload |")
	p.serverColumns(b)
	for i, r := range p.rows {
		if r.metric != "mibps" {
			continue
		}
		fmt.Fprintf(b, "| %s |", r.name)
		for _, s := range p.servers {
			if v := p.cells[i][s.name].cpus(); len(v) > 0 {
				fmt.Fprintf(b, " %.3f |", stats.Median(v))
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
}

// notes lists every repeat that lost samples or failed.
func (p page) notes(b *strings.Builder) {
	notesShown := false
	for i, r := range p.rows {
		for _, s := range p.servers {
			n := p.cells[i][s.name].notes()
			if len(n) == 0 {
				continue
			}
			if !notesShown {
				b.WriteString("\nNotes, per repeat that lost samples or failed:\n\n")
				notesShown = true
			}
			fmt.Fprintf(b, "- %s, %s: %s\n", r.name, s.name, oneLine(strings.Join(n, "; ")))
		}
	}
}

// unmeasured lists what these figures say nothing about, on this machine.
func (p page) unmeasured() []string {
	var out []string
	if !p.ktls.active() {
		out = append(out, "The kernel TLS + sendfile path: kernel TLS was not active here (see above), so every TLS row, the engine's and nginx's included, ran the userspace TLS path.")
	}
	out = append(out,
		"Real networks: everything runs over loopback, with no NIC, no segmentation or checksum offload, no packet loss and round trips of microseconds, so congestion control (BBR), pacing and HTTP/3's loss recovery have nothing to do.",
		fmt.Sprintf("More than %s: this machine has %d; how each server scales beyond that is not shown.", plural(p.cpus, "CPU"), p.cpus),
		p.clientCaveat(),
		"Storage: the fixtures were written just before the run and are served from the page cache; no figure includes a disk read.",
		"Many files or many clients: two files ("+thousands(p.large)+" bytes and 1 KiB) and at most 64 connections; no open-file cache churn, no thousands of idle connections, no range requests, no directory listings.",
		"Other TLS settings: only TLS 1.3 with the suite Go's client picks on AES-capable CPUs (TLS_AES_128_GCM_SHA256; nginx and lighttpd are limited to it) and an ECDSA P-256 certificate; no TLS 1.2, no RSA.",
	)
	if p.external() && p.sysErr != nil {
		out = append(out, "The servers' syscalls: the eBPF program that counts them could not be loaded here (see \"Server syscalls and wake-ups\").")
	}
	if p.passthrough() {
		out = append(out,
			"Routing by server name: the clients send none, so every relay takes its catch-all route after reading the ClientHello; the cost of matching a name among many routes is not in these figures.",
			"Other passthrough paths: no PROXY protocol header, no client that half-closes, no slow or distant origin, no failing origin; nginx and HAProxy have no QUIC passthrough, so the HTTP/3 row has the engine alone.",
			"The origin's cost: it shares the CPUs with the relay and the client, and its TLS work is in every figure but in no bracket.",
		)
	} else if p.proxy() {
		out = append(out,
			"Other proxy paths: only HTTP/1.1 clients over TLS and GET requests; no HTTP/2 or HTTP/3 clients through the proxy, no uploads, no TLS to the backend, no backend slower than loopback nginx, no failing backend.",
			"The backend's cost: it shares the CPUs with the proxy and the client, so a proxy that makes the backend work harder (a new connection per request, say) is slower here for that too, which is real, but the backend's CPU is in no bracket.",
		)
	}
	return out
}

// clientCaveat is what sharing the machine with the client means for
// these figures.
func (p page) clientCaveat() string {
	if p.external() {
		s := fmt.Sprintf("A separate client: every client shares the %s with the server it measures, so the two compete for them, and no external client's own ceiling was measured for this page. On the curl rows the samples are curl alone, writing the body to /dev/null (only the cell's first transfer, before the samples, is piped into this harness and hashed); curl, wrk, h2load and s_time only count the samples' bytes. Server CPU in brackets is the server's alone.", plural(p.cpus, "CPU"))
		if slices.ContainsFunc(p.rows, func(r row) bool { return r.client == "" }) {
			s += " `engine bench`'s own CPU, on its rows, is in the client's table above."
		}
		return s
	}
	return fmt.Sprintf("A separate client: the client (which checks every byte against its BLAKE3 digest) shares the %s with the server it measures, so the two compete for them; the client's ceiling above is what its own CPU allowed, not what it would reach on a machine of its own.", plural(p.cpus, "CPU"))
}

// tableSafe keeps text inside one Markdown table cell.
func tableSafe(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", `\|`)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// baselineSection is the engine against its baseline, when the run had
// both: per row the two medians, their ratio to three places, how many
// repeats each figure stands on, and the range of the per-repeat ratios.
func (p page) baselineSection(b *strings.Builder) {
	var e, base *server
	for _, s := range p.servers {
		switch s.id {
		case "engine":
			e = s
		case "baseline":
			base = s
		}
	}
	if e == nil || base == nil {
		return
	}
	fmt.Fprintf(b, "\n## The engine against its baseline\n\n")
	if p.footing != "" {
		fmt.Fprintf(b, "%s ", p.footing)
	}
	fmt.Fprintf(b, "In each repeat (%d), every workload ran once on each binary, back to back, and which of the two went first alternates from repeat to repeat (and from row to row). A median is over the repeats with accepted samples; \"per-repeat\" is the lowest and highest ratio of the two binaries' figures within one repeat; \"others, steal\" is the most CPU time, over the row's runs, that other processes on this machine used and that the hypervisor stole (shares of all CPU time; either disturbs the figure). Ratios above 1 favour the engine (for p99, the baseline's latency divided by the engine's).\n\n",
		p.repeats)
	if e.sha != "" && e.sha == base.sha {
		b.WriteString("The two binaries are identical (the same SHA-256): the ratios below are the measurement's noise, not a difference between engines.\n\n")
	}
	fmt.Fprintf(b, "| workload | unit | engine | engine (baseline) | engine/baseline | repeats (engine, baseline) | per-repeat engine/baseline | others, steal (max) |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	lowest, lowestRow := 0.0, ""
	var below []string
	for i, r := range p.rows {
		ec, bc := p.cells[i]["engine"], p.cells[i][baselineName]
		if ec == nil || bc == nil || ec.cannot != "" {
			continue
		}
		ratioText := "-"
		if v, ok := baselineRatio(r, p.cells[i]); ok {
			ratioText = fmt.Sprintf("%.3f", v)
			if v < p.minRatio {
				ratioText = fmt.Sprintf("**%.3f (below %.2f)**", v, p.minRatio)
				below = append(below, r.name)
			}
			if lowestRow == "" || v < lowest {
				lowest, lowestRow = v, r.name
			}
		}
		spread := "-"
		if pr := pairedRatios(ec, bc, r.metric); len(pr) > 0 {
			spread = fmt.Sprintf("%.3f–%.3f", slices.Min(pr), slices.Max(pr))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %d, %d of %d | %s | %s |\n", r.name, r.unit, tableSafe(ec.text()), tableSafe(bc.text()), ratioText,
			len(ec.figures()), len(bc.figures()), len(ec.repeats), spread, maxLoad(ec, bc))
	}
	switch {
	case lowestRow == "":
		b.WriteString("\nNo row has figures from both binaries.\n")
	case len(below) > 0:
		fmt.Fprintf(b, "\n%s below %.2f: %s. Lowest: %.3f (%s).\n", plural(len(below), "row"), p.minRatio, strings.Join(below, "; "), lowest, lowestRow)
	default:
		fmt.Fprintf(b, "\nNo ratio is below %.2f; the lowest is %.3f (%s).\n", p.minRatio, lowest, lowestRow)
	}
}

// maxLoad is the most other processes' CPU and steal over the cells'
// repeats, as "3%, 0%"; "-" where not known.
func maxLoad(cells ...*cell) string {
	others, steal, known := 0.0, 0.0, false
	for _, c := range cells {
		for _, o := range c.repeats {
			if o.hasLoad {
				others, steal, known = max(others, o.others), max(steal, o.steal), true
			}
		}
	}
	if !known {
		return "-"
	}
	return fmt.Sprintf("%.0f%%, %.0f%%", 100*others, 100*steal)
}
