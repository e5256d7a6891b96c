package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/internal/stats"
)

// ceilingMark follows a figure within 10% of the client's ceiling for its
// cell: the client was at least 90% busy.
const ceilingMark = "‡"

// clientBoundShare is how near its ceiling a figure must be to be marked.
const clientBoundShare = 0.9

// clientFrom reads engine bench's own cost from a report, for a repeat
// whose figure is value: how busy the client was over the samples (its
// CPU over what the CPUs its work could use had to give), its CPU per
// GiB ("mibps" rows) or per request ("rps" rows) at the figure's rate,
// and its ceiling, the figure those CPUs fully busy would have verified at
// that cost: value over how busy it was, so that a figure is above its
// ceiling only when the client was more than fully busy. Fixed-rate rows
// get how busy only.
func (o *outcome) clientFrom(c *bench.ClientStats, metric string, value float64) {
	busy := c.Busy()
	if busy <= 0 {
		return
	}
	o.clientCPUs, o.clientBusy, o.hasClient = c.Parallelism, busy, true
	if value <= 0 {
		return
	}
	perSecond := c.CPUSeconds / c.Seconds
	switch metric {
	case "mibps":
		o.clientCost = perSecond / (value / 1024)
	case "rps":
		o.clientCost = 1e6 * perSecond / value
	default:
		return
	}
	o.clientCeiling = value / busy
}

// clientCeiling is the median, over the repeats with accepted samples, of
// the client's ceiling in the row's unit; ok is false where there is none
// (an external client, a fixed-rate row, no CPU reading).
func (c *cell) clientCeiling() (float64, bool) {
	v := c.accepted(func(o outcome) (float64, bool) { return o.clientCeiling, o.hasClient && o.clientCeiling > 0 })
	if len(v) == 0 {
		return 0, false
	}
	return stats.Median(v), true
}

// clientBound: the cell's figure is within 10% of the client's ceiling,
// so the client, at least 90% busy, may be what limited it.
func (c *cell) clientBound(r row) bool {
	if r.client != "" || r.metric != "mibps" && r.metric != "rps" {
		return false
	}
	top, ok := c.clientCeiling()
	v := c.figures()
	return ok && len(v) > 0 && stats.Median(v) >= clientBoundShare*top
}

// clientText is the cell of the client's table: its ceiling, its cost
// and how busy it was; or only how busy, on a fixed-rate row.
func (c *cell) clientText(r row) string {
	if c.cannot != "" {
		return c.cannot
	}
	busy := c.accepted(func(o outcome) (float64, bool) { return o.clientBusy, o.hasClient })
	if len(busy) == 0 {
		return "-"
	}
	b := fmt.Sprintf("%.0f%% busy", 100*stats.Median(busy))
	top, ok := c.clientCeiling()
	if !ok {
		return b
	}
	cost := stats.Median(c.accepted(func(o outcome) (float64, bool) { return o.clientCost, o.hasClient && o.clientCeiling > 0 }))
	if r.metric == "mibps" {
		return fmt.Sprintf("%.1f (%.3f s/GiB, %s)", top, cost, b)
	}
	return fmt.Sprintf("%.0f (%.1f µs/req, %s)", top, cost, b)
}

// ceilingSection is the client's ceiling for every engine bench cell.
func (p page) ceilingSection(b *strings.Builder) {
	var rows []int
	for i, r := range p.rows {
		if r.client == "" {
			rows = append(rows, i)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## The client's ceiling\n\n")
	fmt.Fprintf(b, "`engine bench` runs in this harness's process, so that process's CPU time over the samples (getrusage; the time the server's CPU is read over) is the client's own. How busy it was is that CPU time over what the CPUs its work can use could have given meanwhile: one CPU per request in flight, a second hashing beside it on bodies longer than 256 KiB, and for h2 and h3 one per connection decrypting frames or packets, at most the machine's %d. Its cost is the CPU it used per GiB (per request on the 1 KiB rows) at the figure's rate, and its ceiling what those CPUs fully busy would have verified at that cost: the figure divided by how busy the client was. So no figure is above its ceiling unless the Go runtime's own threads (its garbage collector) ran on CPUs the client's goroutines could not use, and a figure at 90%% of its ceiling or more, marked %s in the table, is one for which the client was at least 90%% busy: it may be the client's rather than the server's. Below the mark the client had CPU to spare, though it may still have waited on itself (a connection's reading and hashing are a chain of two) and it shares the CPUs with the server. Cells: ceiling in the row's unit (client cost, how busy it was, as medians over the repeats); on a fixed-rate row, how busy only.\n\n", p.cpus, ceilingMark)
	b.WriteString("| workload | unit |")
	for _, s := range p.servers {
		fmt.Fprintf(b, " %s |", s.name)
	}
	b.WriteString("\n|---|---|")
	for range p.servers {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, i := range rows {
		r := p.rows[i]
		fmt.Fprintf(b, "| %s | %s |", r.name, r.unit)
		for _, s := range p.servers {
			fmt.Fprintf(b, " %s |", tableSafe(p.cells[i][s.name].clientText(r)))
		}
		b.WriteString("\n")
	}
}

// keyExchanges sums a cell's key exchanges over its repeats: engine
// bench's counts, and the names s_client probes found.
func (c *cell) keyExchanges() (counts map[string]int64, probed []string) {
	counts = map[string]int64{}
	for _, o := range c.repeats {
		for k, n := range o.kx {
			counts[k] += n
		}
		if o.kxProbe != "" && !slices.Contains(probed, o.kxProbe) {
			probed = append(probed, o.kxProbe)
		}
	}
	return counts, probed
}

// keyExchangeText is a cell of the key exchange table: "X25519 (all
// 12,345 responses)", "X25519 ×10, P-256 ×2", "X25519 (s_client
// probe)".
func (c *cell) keyExchangeText() string {
	if c.cannot != "" {
		return c.cannot
	}
	counts, probed := c.keyExchanges()
	switch {
	case len(counts) == 1:
		k := slices.Collect(maps.Keys(counts))[0]
		return fmt.Sprintf("%s (all %s responses)", k, thousands(counts[k]))
	case len(counts) > 1:
		return bench.KeyExchangeCounts(counts)
	case len(probed) > 0:
		return strings.Join(probed, " / ") + " (s_client probe)"
	}
	return "not known"
}

// negotiated is the one key exchange a cell's connections used, "" when
// none is known or they used several.
func (c *cell) negotiated() string {
	counts, probed := c.keyExchanges()
	switch {
	case len(counts) == 1:
		return slices.Collect(maps.Keys(counts))[0]
	case len(counts) == 0 && len(probed) == 1:
		return probed[0]
	}
	return ""
}

// keyExchangeSection names, for every row of new TLS connections, the
// key exchange each server negotiated, and says where they differ.
func (p page) keyExchangeSection(b *strings.Builder) {
	var rows []int
	for i, r := range p.rows {
		if r.newConns && r.tls {
			rows = append(rows, i)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Key exchange on the rows of new connections\n\nWhat each server's handshakes negotiated: for `engine bench`, every response counted by its connection's key exchange (`tls.ConnectionState.CurveID`, warmups included); for `openssl s_time`, which prints none, one `openssl s_client -connect 127.0.0.1:PORT -noservername -tls1_3 -ciphersuites TLS_AES_128_GCM_SHA256` per repeat beside it (s_time's OpenSSL, settings and missing server name), read from its `Negotiated TLS1.3 group` or `Server Temp Key` line.")
	if p.passthrough() {
		b.WriteString(" The relays do not terminate TLS: what they show is what the origin negotiated through each.")
	}
	b.WriteString("\n\n| workload |")
	p.serverColumns(b)
	var differ []string
	for _, i := range rows {
		r := p.rows[i]
		fmt.Fprintf(b, "| %s |", r.name)
		seen := map[string][]string{}
		for _, s := range p.servers {
			c := p.cells[i][s.name]
			fmt.Fprintf(b, " %s |", tableSafe(c.keyExchangeText()))
			if k := c.negotiated(); k != "" {
				seen[k] = append(seen[k], s.name)
			}
		}
		b.WriteString("\n")
		if len(seen) > 1 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(seen)) {
				parts = append(parts, fmt.Sprintf("%s (%s)", k, strings.Join(seen[k], ", ")))
			}
			differ = append(differ, fmt.Sprintf("%s: %s", r.name, strings.Join(parts, "; ")))
		}
	}
	if len(differ) == 0 {
		b.WriteString("\nOn each of these rows every server negotiated the same key exchange.\n")
		return
	}
	fmt.Fprintf(b, "\nNot like with like: on %s the servers negotiated different key exchanges, so their handshakes did different work (X25519MLKEM768 adds an ML-KEM-768 key generation and encapsulation to X25519's, and more than a kilobyte to each hello): %s. `--key-exchange X25519` makes `engine bench` offer only X25519, and the engine accept only it, so that every server negotiates X25519 with `engine bench`.\n",
		plural(len(differ), "row"), strings.Join(differ, ". "))
}

// hasTLS: some row is measured over TLS.
func (p page) hasTLS() bool {
	return slices.ContainsFunc(p.rows, func(r row) bool { return r.tls })
}

// hasNewConns: some row makes a new TLS connection per request.
func (p page) hasNewConns() bool {
	return slices.ContainsFunc(p.rows, func(r row) bool { return r.tls && r.newConns })
}

// measuredSection says which engine binaries were measured, what each
// was built from, and whether the tree moved during the run.
func (p page) measuredSection(b *strings.Builder) {
	var engines []*server
	for _, s := range p.servers {
		if s.binary != nil {
			engines = append(engines, s)
		}
	}
	if len(engines) > 0 {
		b.WriteString("Measured:\n\n")
		for _, s := range engines {
			fmt.Fprintf(b, "- **%s**: %s.\n", s.name, s.binary.describe())
		}
		b.WriteString("\n")
	}
	same := slices.ContainsFunc(engines, func(s *server) bool {
		bt := s.binary.build
		return bt != nil && bt.Tree.Err == nil && p.harness.Err == nil && bt.Tree.Head == p.harness.Head && bt.Tree.Fingerprint == p.harness.Fingerprint
	})
	switch {
	case same:
		b.WriteString("The harness ran from that same tree, read at its start (untracked files count as changes, files git ignores are not looked at).")
	case p.harness.Err != nil || p.harness.Head != "":
		fmt.Fprintf(b, "The harness ran from commit %s, read at its start (untracked files count as changes, files git ignores are not looked at).", p.harness)
	default:
		b.WriteString("The harness's commit is unknown.")
	}
	if p.treeChanged != "" {
		fmt.Fprintf(b, " **The working tree changed during the run** (%s): the figures are those of the binaries above, built before it changed, not of the tree as it is now.", p.treeChanged)
	}
	b.WriteString("\n\n")
}
