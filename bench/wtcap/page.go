package main

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/mediaship/engine/internal/stats"

	"github.com/mediaship/engine/bench"
)

// results is what a run measured, per configuration (in the order of
// variants), and what the page says of the run.
type results struct {
	command  string
	when     time.Time
	preamble string // bench.Harness.Preamble: the engine, the machine
	treeNote string // bench.Harness.TreeNote
	pinned   string // bench.PinSelf's sentence
	quicGo   string // the client's quic-go version
	repeats  int
	duration time.Duration
	variants []variant
	mibs     [][]float64 // MiB/s per run
	cpu      [][]float64 // server CPU s/GiB per run
	loss     [][]float64 // datagram loss % per run
	// Datagrams over all runs: lost, expected and sent by the server;
	// the kernel's UDP receive-buffer drops during the runs.
	lost, expected, sent, rcvbuf []int64
}

// engineConfig is every setting bench/wtcap writes (startEngine).
const engineConfig = "`listen = \"127.0.0.1:0\"`, `workers = 1`, `root`, `[kernel] ktls = \"auto\"`, one `[[sites]]` `domain = \"*\"` with `[sites.tls]` `cert` and `key` (self-signed, ECDSA P-256), `[webtransport] enabled = true`, `max_bytes_per_session = \"1TiB\"`, `idle_timeout = \"10s\"`; started as `taskset -c 1 engine serve -c FILE`"

// quicGoVersion is the quic-go this harness (and so its client) was built
// with.
func quicGoVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/quic-go/quic-go" {
				return d.Version
			}
		}
	}
	return "(version unknown)"
}

// render writes the page.
func render(r results) string {
	var b strings.Builder
	bench.WriteHead(&b, "WebTransport diagnostics: streams and datagrams beside an HTTP/3 download", r.command, r.when, r.preamble, r.treeNote)
	fmt.Fprintf(&b, "%s\n\n", r.pinned)
	fmt.Fprintf(&b, "The engine's configuration (every setting bench/wtcap writes; the rest at their defaults, `max_datagram_bytes` = 1200 among them): %s. The client: `engine bench`, from the same tree, in the harness's process, with quic-go %s.\n\n", engineConfig, r.quicGo)
	fmt.Fprintf(&b, "One engine serves every configuration, on loopback; the client makes one QUIC connection, one session or request at a time, %v measured after a 1 s warm-up, in 5 samples. The configurations take turns, %d rounds, the order rotating so each takes every place. Figures are medians over the rounds of each run's median sample, with the range.\n\n", r.duration, r.repeats)
	fmt.Fprintf(&b, "Integrity: every byte counted was checked. The HTTP/3 download and `file=` sessions against the file's BLAKE3 (the session's `Repr-Digest`), generated streams against the pattern byte by byte, datagrams by sequence number and every byte; a sample with one wrong byte, a duplicate or a corrupt datagram would have stopped the harness. Lost datagrams do not reject a sample: they are counted below.\n\n")
	fmt.Fprintf(&b, "| configuration | MiB/s (median) | range | vs HTTP/3 download | server CPU s/GiB (median) | range | datagram loss |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for i, v := range r.variants {
		l := "–"
		if v.rate > 0 {
			l = fmt.Sprintf("%.2f%% median (%d of %d; server sent %d; kernel UDP receive-buffer drops %d)", stats.Median(r.loss[i]), r.lost[i], r.expected[i], r.sent[i], r.rcvbuf[i])
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f–%.1f | %.2f | %.3f | %.3f–%.3f | %s |\n", v.name, stats.Median(r.mibs[i]), stats.Min(r.mibs[i]), stats.Max(r.mibs[i]),
			stats.Median(r.mibs[i])/stats.Median(r.mibs[0]), stats.Median(r.cpu[i]), stats.Min(r.cpu[i]), stats.Max(r.cpu[i]), l)
	}
	fmt.Fprintf(&b, "\nServer CPU is utime+stime of the engine process over the samples, per GiB verified. The datagram rows are offered loads: a session asks for one second's worth (`count` = `rate`) of 1200-byte datagrams; the server sends them on that schedule, or as fast as quic-go's send queue takes them when it cannot keep up (then the session lasts longer than a second), then its count line, and the next session starts. Their MiB/s is what arrived intact, at most the offered rate (1200 × rate / 2^20: 22.9, 114.4, 343.3 MiB/s). Loss is datagrams asked for and not received. The server's line says how many it handed to quic-go (whose send queue blocks when full rather than drop); the kernel's UDP `RcvbufErrors` (/proc/net/snmp, the whole machine, over the runs) says how many the receiving socket's buffer dropped. Datagrams lost with neither were dropped in the receiving process: quic-go keeps 128 received datagrams per connection and HTTP/3 32 per session, and drops what arrives while they are full, so a client that falls behind the offered rate on its one CPU loses the rest, as a UDP application would.\n\n")
	fmt.Fprintf(&b, "Not measured: more than one connection or session at once, a real network (loss, delay, MTU below loopback's), browsers' WebTransport clients, the echo and sink modes (the first sends back what it gets, the second hashes it: their figures would be the client's), and datagrams larger than 1200 bytes (the endpoint's ceiling).\n")
	return b.String()
}
