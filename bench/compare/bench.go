package main

import "errors"

// A row of the matrix.
type row struct {
	id          string // short name for --workloads
	name, unit  string
	proto       string // h1, h2, h3
	tls         bool
	file        string
	connections int
	streams     int // concurrent requests per connection (h2, h3)
	newConns    bool
	rate        float64
	metric      string // "mibps", "rps", "p99"
	// client is the program that measures the row: "" for engine bench
	// in this process, or one of the external clients (clientCurl...).
	client string
	resume bool // new-connection rows of an external client: resume TLS sessions
}

// matrix is engine bench's rows, measured in this process; quick is a
// few of them.
func matrix(quick bool) []row {
	rows := []row{
		{id: "large-h1", name: "large file, 1 connection, h1 plain", unit: "MiB/s", proto: "h1", file: "large.bin", connections: 1, metric: "mibps"},
		{id: "large-h1-tls", name: "large file, 1 connection, h1 TLS", unit: "MiB/s", proto: "h1", tls: true, file: "large.bin", connections: 1, metric: "mibps"},
		{id: "large-h2-tls", name: "large file, 1 connection, h2 TLS", unit: "MiB/s", proto: "h2", tls: true, file: "large.bin", connections: 1, metric: "mibps"},
		{id: "large-h3", name: "large file, 1 connection, h3", unit: "MiB/s", proto: "h3", tls: true, file: "large.bin", connections: 1, metric: "mibps"},
		{id: "large-h2-tls-16s", name: "large file, 16 streams on 1 connection, h2 TLS", unit: "MiB/s", proto: "h2", tls: true, file: "large.bin", connections: 1, streams: 16, metric: "mibps"},
		{id: "large-h3-16s", name: "large file, 16 streams on 1 connection, h3", unit: "MiB/s", proto: "h3", tls: true, file: "large.bin", connections: 1, streams: 16, metric: "mibps"},
		{id: "large-h1-16c", name: "large file, 16 connections, h1 plain", unit: "MiB/s", proto: "h1", file: "large.bin", connections: 16, metric: "mibps"},
		{id: "large-h1-tls-16c", name: "large file, 16 connections, h1 TLS", unit: "MiB/s", proto: "h1", tls: true, file: "large.bin", connections: 16, metric: "mibps"},
		{id: "large-h2-tls-16c", name: "large file, 16 connections, h2 TLS", unit: "MiB/s", proto: "h2", tls: true, file: "large.bin", connections: 16, metric: "mibps"},
		{id: "large-h3-16c", name: "large file, 16 connections, h3", unit: "MiB/s", proto: "h3", tls: true, file: "large.bin", connections: 16, metric: "mibps"},
		{id: "1k-h1-64c", name: "1 KiB, 64 keep-alive connections, h1 plain", unit: "req/s", proto: "h1", file: "1k.bin", connections: 64, metric: "rps"},
		{id: "1k-h1-tls-new", name: "1 KiB, new TLS connection per request (16 at once)", unit: "req/s", proto: "h1", tls: true, file: "1k.bin", connections: 16, newConns: true, metric: "rps"},
		{id: "1k-h1-p99", name: "1 KiB at a fixed 5,000 req/s, h1 plain: p99 latency", unit: "ms p99", proto: "h1", file: "1k.bin", connections: 64, rate: 5000, metric: "p99"},
		{id: "1k-h2-tls-4x32s", name: "1 KiB, 32 streams on each of 4 connections, h2 TLS", unit: "req/s", proto: "h2", tls: true, file: "1k.bin", connections: 4, streams: 32, metric: "rps"},
	}
	if quick {
		return []row{rows[0], rows[1], rows[2], rows[10], rows[12]}
	}
	return rows
}

// benchScenario is --client bench, the default: engine bench, in this
// process, measures each server as a file server over the full matrix.
type benchScenario struct{ standalone }

func (benchScenario) name() string { return "bench" }

func (benchScenario) defaults(baseline bool) (servers, out string) {
	if baseline {
		return "engine,baseline,nginx,caddy", baselineOut
	}
	return "engine,nginx,caddy", "docs/BENCHMARKS.md"
}

func (benchScenario) rows(short bool) []row { return matrix(short) }

func (benchScenario) server(id string, l *launcher) (func() (*server, error), error) {
	return fileServer(id, l)
}

// baselineOut is where a run with --baseline writes without --out: a page
// of two engine binaries is not the comparison with the peers, and does
// not replace the scenario's page unless asked to.
const baselineOut = "docs/BENCHMARKS-baseline.md"

// fileServer is how to start server id as a file server on the fixtures:
// the servers of --client bench and --client external.
func fileServer(id string, l *launcher) (func() (*server, error), error) {
	switch id {
	case "engine", "baseline":
		spec, err := l.engine(id)
		if err != nil {
			return nil, err
		}
		return func() (*server, error) { return startEngine(spec, l.work) }, nil
	case "nginx":
		return func() (*server, error) { return startNginx(l.work, l.peers, l.offerKTLS) }, nil
	case "caddy":
		bin, err := l.caddy()
		if err != nil {
			return nil, err
		}
		return func() (*server, error) { return startCaddy(l.work, l.peers, bin) }, nil
	case "lighttpd":
		if err := l.tool("lighttpd", toolLighttpd); err != nil {
			return nil, err
		}
		return func() (*server, error) { return startLighttpd(l.work, l.peers) }, nil
	case "gohttp":
		bin, err := l.gohttp()
		if err != nil {
			return nil, err
		}
		return func() (*server, error) { return startGoHTTP(l.work, bin) }, nil
	case "haproxy":
		return nil, errors.New("haproxy is a peer of the proxy and passthrough rows only: use it with --client proxy or --client passthrough")
	}
	return nil, unknownServer(id)
}
