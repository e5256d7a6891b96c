package main

import (
	"context"
	"crypto/rand"
	"embed"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/selfsigned"
)

// embeddedPeers holds the nginx, Caddy and lighttpd configuration
// templates, so the binary needs nothing outside the checkout. Read-only.
//
//go:embed peers/*
var embeddedPeers embed.FS

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

func main() {
	out := flag.String("out", "docs/BENCHMARKS.md", "report to write (relative to the repository)")
	repeats := flag.Int("repeats", 3, "interleaved repeats")
	duration := flag.Duration("duration", 6*time.Second, "measured time per cell")
	samples := flag.Int("samples", 3, "samples per cell")
	warmup := flag.Duration("warmup", time.Second, "warmup per cell")
	quick := flag.Bool("quick", false, "a short run over a few rows (a smoke test, not a measurement)")
	client := flag.String("client", "bench", "what measures the servers: bench (engine bench, in this process: the full matrix), external (curl, wrk, h2load and openssl s_time, with the server's CPU in every cell), proxy (each server as a TLS reverse proxy in front of one nginx file server) or passthrough (each server relaying TLS unopened to one nginx TLS origin, and QUIC to a quic-go one)")
	servers := flag.String("servers", "engine,nginx,caddy", "servers to compare: engine, baseline, nginx, caddy, gohttp (Go net/http), lighttpd, haproxy (default with --client external: engine,nginx,caddy,gohttp,lighttpd; with --client proxy: engine,nginx,caddy,haproxy; with --client passthrough: engine,nginx,haproxy)")
	caddyBin := flag.String("caddy", os.Getenv("CADDY"), "caddy binary (default: $CADDY, or Caddy "+caddyVersion+" built once into the user's cache)")
	only := flag.String("rows", "", "measure only the rows of the full matrix whose name matches this regular expression (with --quick too)")
	workloads := flag.String("workloads", "", "measure only these rows of the full matrix: comma-separated short ids (large-h1,1k-h1-64c) or parts of names; -h lists them")
	peersDir := flag.String("peers", "", "folder with nginx.conf.tmpl, Caddyfile.tmpl and lighttpd.conf.tmpl (default: the templates in bench/compare/peers, embedded)")
	engineBin := flag.String("engine", "", "engine binary to measure as \"engine\" (default: built from this working tree)")
	baselineBin := flag.String("baseline", "", "an engine binary to measure beside it as \"engine (baseline)\", with the same configuration; adds baseline to the default --servers and an engine/baseline summary to the page")
	minRatio := flag.Float64("min-ratio", 0.97, "with --baseline: the lowest acceptable engine/baseline ratio; the page marks rows below it and the run exits 1")
	largeSpec := flag.String("large-size", "99943778", "size of the large file: bytes, or with a unit (100MB, 96MiB)")
	sample := flag.Duration("sample", 0, "length of one sample; sets --duration to --samples times this")
	maxOthers := flag.Float64("max-others", 0, "on a shared machine: the largest share of the CPU (0.05 = 5%) other processes may use during a run; before each run wait (up to --quiet-wait) until they use less, and measure a run they disturbed again, up to 3 times in all (0: off)")
	quietWait := flag.Duration("quiet-wait", 2*time.Minute, "with --max-others: the longest wait for other processes to quieten before a run")
	buildOnly := flag.String("build", "", "only build the engine from this working tree into this file, stamped with its commit and uncommitted changes as the runs' engine is (engine version prints them), and exit: for --engine and --baseline binaries whose pages name what they were built from")
	keyExchange := flag.String("key-exchange", "", "compare TLS handshakes like with like: engine bench offers only this key exchange ("+strings.Join(bench.KeyExchangeNames(), ", ")+"), and the engine (and baseline) accept only it (key_exchanges); default: each side's own defaults, which the page names per server")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./bench/compare [flags]\n\nflags:\n")
		flag.PrintDefaults()
		fmt.Fprintf(flag.CommandLine.Output(), "\nworkloads (--workloads takes these ids or parts of the names):\n%s", workloadList(matrix(false)))
		fmt.Fprintf(flag.CommandLine.Output(), "\nworkloads with --client external:\n%s", workloadList(externalMatrix()))
		fmt.Fprintf(flag.CommandLine.Output(), "\nworkloads with --client proxy:\n%s", workloadList(proxyMatrix()))
		fmt.Fprintf(flag.CommandLine.Output(), "\nworkloads with --client passthrough:\n%s", workloadList(passthroughMatrix()))
	}
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *client != "bench" && *client != "external" && *client != "proxy" && *client != "passthrough" {
		log.Fatalf("--client %q: want bench, external, proxy or passthrough", *client)
	}
	external := *client == "external"
	proxyMode := *client == "proxy"
	passMode := *client == "passthrough"
	if *quick {
		*repeats, *duration, *samples, *warmup = 1, 2*time.Second, 2, 500*time.Millisecond
	}
	if *sample > 0 {
		*duration = *sample * time.Duration(*samples)
	}
	largeSize, err := parseSize(*largeSpec)
	if err != nil {
		log.Fatalf("--large-size: %v", err)
	}
	var kx keyExchangeChoice
	if *keyExchange != "" {
		name, id, ok := bench.LookupKeyExchange(*keyExchange)
		if !ok {
			log.Fatalf("--key-exchange %q: want one of %s", *keyExchange, strings.Join(bench.KeyExchangeNames(), ", "))
		}
		kx = keyExchangeChoice{name: name, id: id}
	}
	if external {
		if !set["servers"] {
			*servers = "engine,nginx,caddy,gohttp,lighttpd"
		}
		// Another client's figures are not the engine bench page.
		if !set["out"] && *baselineBin == "" {
			*out = "docs/BENCHMARKS-external.md"
		}
	}
	if proxyMode {
		if !set["servers"] {
			*servers = "engine,nginx,caddy,haproxy"
		}
		if !set["out"] {
			*out = "docs/BENCHMARKS-proxy.md"
		}
	}
	if passMode {
		if !set["servers"] {
			*servers = "engine,nginx,haproxy"
		}
		if !set["out"] {
			*out = "docs/BENCHMARKS-passthrough.md"
		}
	}
	if *baselineBin != "" {
		if !set["servers"] {
			*servers = "engine,baseline,nginx,caddy"
			if proxyMode {
				*servers = "engine,baseline,nginx,caddy,haproxy"
			}
			if passMode {
				*servers = "engine,baseline,nginx,haproxy"
			}
		}
		// A page of two engine binaries is not the comparison with the
		// peers: it does not replace docs/BENCHMARKS.md unless asked to.
		if !set["out"] {
			*out = "docs/BENCHMARKS-baseline.md"
		}
	}
	for _, path := range []*string{engineBin, baselineBin} {
		if *path == "" {
			continue
		}
		// A file named as a relative path is that file, not one on $PATH.
		if _, err := os.Stat(*path); err == nil {
			*path, _ = filepath.Abs(*path)
		}
		if _, err := exec.LookPath(*path); err != nil {
			log.Fatalf("engine binary: %v", err)
		}
	}
	repo, err := repoRoot()
	if err != nil {
		log.Fatal(err)
	}
	if *buildOnly != "" {
		path, err := filepath.Abs(*buildOnly)
		if err != nil {
			log.Fatal(err)
		}
		b, err := bench.BuildEngine(repo, path)
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("built %s from %s", path, b.Tree)
		fmt.Println(b.Version)
		return
	}
	// The checkout this harness runs from, as it was at the start; the
	// page says whether it changed by the end.
	harnessTree := bench.ReadTree(repo)
	var peers peerTemplates
	if *peersDir != "" {
		peers = peerTemplates{fs: os.DirFS(*peersDir), name: *peersDir}
	} else {
		sub, err := fs.Sub(embeddedPeers, "peers")
		if err != nil {
			log.Fatal(err)
		}
		peers = peerTemplates{fs: sub, name: "bench/compare/peers"}
	}

	rows := matrix(*quick)
	if *only != "" || *workloads != "" {
		// --rows and --workloads pick from the whole matrix, so that
		// --quick --rows h3 is a short run of the HTTP/3 rows.
		rows = matrix(false)
	}
	if external {
		// Eight rows: --quick shortens them but keeps them all.
		rows = externalMatrix()
	}
	if proxyMode {
		rows = proxyMatrix()
	}
	if passMode {
		rows = passthroughMatrix()
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			log.Fatalf("--rows: %v", err)
		}
		rows = slices.DeleteFunc(rows, func(r row) bool { return !re.MatchString(r.name) })
		if len(rows) == 0 {
			log.Fatalf("--rows %q matches no row", *only)
		}
	}
	if *workloads != "" {
		if rows, err = selectWorkloads(rows, *workloads); err != nil {
			log.Fatal(err)
		}
		if len(rows) == 0 {
			log.Fatalf("--rows %q and --workloads %q have no row in common", *only, *workloads)
		}
	}

	work, err := os.MkdirTemp("", "engine-compare-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755) // nginx workers run as www-data
	log.Printf("fixtures and configurations in %s", work)
	manifest, err := fixtures(work, largeSize)
	if err != nil {
		log.Fatal(err)
	}
	if err := writeCert(work); err != nil {
		log.Fatal(err)
	}
	// Probed before the servers start: nginx is offered kernel TLS only
	// where the kernel has it.
	ktls := kernelTLS{probe: probeKernelTLS()}
	log.Printf("kernel TLS: %v", orOK(ktls.probe))

	// The external clients come from Debian: a row whose client is
	// missing, and cannot be installed, is left out and the page says why.
	apt := newInstaller()
	var leftOut []string
	var env *extEnv
	if external || proxyMode || passMode {
		rows = slices.DeleteFunc(rows, func(r row) bool {
			if r.client == "" {
				return false // engine bench, in this process
			}
			err := apt.ensure(clientTool(r.client))
			if err != nil {
				log.Printf("%s left out: %v", r.name, err)
				leftOut = append(leftOut, fmt.Sprintf("%s (%s): %v", r.name, r.client, err))
			}
			return err != nil
		})
		if len(rows) == 0 {
			os.RemoveAll(work)
			log.Fatal("no row left to measure: none of its clients is installed")
		}
		if env, err = newExtEnv(work, manifest, largeSize, *samples, *duration/time.Duration(*samples), *warmup); err != nil {
			os.RemoveAll(work)
			log.Fatal(err)
		}
	}

	var list []*server
	// With --client proxy: the file server behind every proxy.
	var upstream *backend
	// With --client passthrough: the TLS (and QUIC) origin behind every relay.
	var orig *origin
	// fatal stops what has started and removes the work folder, which
	// log.Fatal's exit would leave behind.
	fatal := func(format string, args ...any) {
		for _, s := range list {
			s.stop()
		}
		if upstream != nil {
			upstream.proc.stop()
		}
		if orig != nil {
			orig.stop()
		}
		os.RemoveAll(work)
		log.Fatalf(format, args...)
	}
	// With a baseline, the run is about the two engine binaries: one that
	// cannot start ends it rather than leaving a table without the ratio.
	mustStart := func(id string) bool { return *baselineBin != "" && isEngine(id) }
	if proxyMode {
		if upstream, err = startBackend(work, peers); err != nil {
			fatal("the proxies' file server: %v", err)
		}
		defer upstream.proc.stop()
		log.Printf("backend (nginx, files): http://%s", upstream.addr)
	}
	if passMode {
		withH3 := slices.ContainsFunc(rows, func(r row) bool { return r.proto == "h3" })
		gohttpBin := ""
		if withH3 {
			if gohttpBin, err = goBuild(repo, work, "gohttp", "./bench/compare/gohttp"); err != nil {
				fatal("the QUIC origin (bench/compare/gohttp): %v", err)
			}
		}
		if orig, err = startOrigin(work, peers, withH3, gohttpBin); err != nil {
			fatal("the relays' origin: %v", err)
		}
		defer orig.stop()
		log.Printf("origin (nginx, TLS; quic-go on UDP for h3): %s", orig.addr)
	}
	for _, name := range strings.Split(*servers, ",") {
		if proxyMode && (name == "lighttpd" || name == "gohttp") {
			fatal("%s has no reverse proxy configuration here: --client proxy compares engine, baseline, nginx, caddy and haproxy", name)
		}
		if passMode && (name == "lighttpd" || name == "gohttp" || name == "caddy") {
			fatal("%s has no passthrough configuration here (Caddy needs the caddy-l4 plugin): --client passthrough compares engine, baseline, nginx and haproxy", name)
		}
		var start func() (*server, error)
		switch name {
		case "engine":
			spec := engineSpec{id: "engine", name: "engine", bin: *engineBin, kx: kx.name}
			if spec.bin == "" {
				b, err := bench.BuildEngine(repo, filepath.Join(work, "engine"))
				if err != nil {
					if mustStart(name) {
						fatal("engine: %v", err)
					}
					log.Printf("engine left out: %v", err)
					continue
				}
				log.Printf("engine built from %s", b.Tree)
				spec.bin, spec.build = b.Path, b
				if *baselineBin != "" {
					spec.origin = "built from the working tree"
				}
			} else {
				spec.origin = "--engine " + spec.bin
			}
			start = func() (*server, error) { return startEngine(spec, work) }
			if proxyMode {
				start = func() (*server, error) { return startEngineProxy(spec, work, upstream) }
			}
			if passMode {
				start = func() (*server, error) { return startEnginePass(spec, work, orig) }
			}
		case "baseline":
			if *baselineBin == "" {
				fatal("--servers names baseline: name its binary with --baseline PATH")
			}
			spec := engineSpec{id: "baseline", name: baselineName, bin: *baselineBin, origin: "--baseline " + *baselineBin, kx: kx.name}
			start = func() (*server, error) { return startEngine(spec, work) }
			if proxyMode {
				start = func() (*server, error) { return startEngineProxy(spec, work, upstream) }
			}
			if passMode {
				start = func() (*server, error) { return startEnginePass(spec, work, orig) }
			}
		case "nginx":
			start = func() (*server, error) { return startNginx(work, peers, ktls.probe == nil) }
			if proxyMode {
				start = func() (*server, error) { return startNginxProxy(work, peers, ktls.probe == nil, upstream) }
			}
			if passMode {
				if err := apt.ensure(toolNginxStream); err != nil {
					log.Printf("nginx left out: %v", err)
					leftOut = append(leftOut, "nginx: "+err.Error())
					continue
				}
				start = func() (*server, error) { return startNginxPass(work, peers, orig) }
			}
		case "caddy":
			bin, err := findCaddy(*caddyBin)
			if err != nil {
				log.Printf("caddy left out: %v", err)
				continue
			}
			start = func() (*server, error) { return startCaddy(work, peers, bin) }
			if proxyMode {
				start = func() (*server, error) { return startCaddyProxy(work, peers, bin, upstream) }
			}
		case "haproxy":
			if !proxyMode && !passMode {
				fatal("haproxy is a peer of the proxy and passthrough rows only: use it with --client proxy or --client passthrough")
			}
			if err := apt.ensure(toolHAProxy); err != nil {
				log.Printf("haproxy left out: %v", err)
				leftOut = append(leftOut, "haproxy: "+err.Error())
				continue
			}
			start = func() (*server, error) { return startHAProxy(work, peers, upstream) }
			if passMode {
				start = func() (*server, error) { return startHAProxyPass(work, peers, orig) }
			}
		case "lighttpd":
			if err := apt.ensure(toolLighttpd); err != nil {
				log.Printf("lighttpd left out: %v", err)
				leftOut = append(leftOut, "lighttpd: "+err.Error())
				continue
			}
			start = func() (*server, error) { return startLighttpd(work, peers) }
		case "gohttp":
			bin, err := goBuild(repo, work, "gohttp", "./bench/compare/gohttp")
			if err != nil {
				log.Printf("gohttp left out: %v", err)
				leftOut = append(leftOut, "Go net/http: "+err.Error())
				continue
			}
			start = func() (*server, error) { return startGoHTTP(work, bin) }
		default:
			fatal("unknown server %q (engine, baseline, nginx, caddy, gohttp, lighttpd, haproxy)", name)
		}
		s, err := startOnFreePorts(start)
		if err != nil {
			if mustStart(name) {
				fatal("%s: %v", name, err)
			}
			log.Printf("%s left out: %v", name, err)
			leftOut = append(leftOut, fmt.Sprintf("%s: did not start: %v", name, err))
			continue
		}
		defer s.stop()
		log.Printf("%s: %s", name, s.where())
		list = append(list, s)
	}
	if len(list) == 0 {
		fatal("no server to measure")
	}
	same, err := sameFooting(list)
	if err != nil {
		fatal("%v", err)
	}

	nameWidth := 7 // for the progress lines
	for _, s := range list {
		nameWidth = max(nameWidth, len(s.name))
	}
	// cells[row][server] collects every repeat's outcome.
	cells := make([]map[string]*cell, len(rows))
	for i := range rows {
		cells[i] = map[string]*cell{}
		for _, s := range list {
			cells[i][s.name] = &cell{}
		}
	}
	// Ctrl-C or SIGTERM stops the run and the servers; nothing is written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	interrupted := func() bool {
		if ctx.Err() == nil {
			return false
		}
		log.Print("interrupted: servers stopped, no report written")
		for _, s := range list {
			s.stop()
		}
		os.RemoveAll(work)
		return true
	}
	for r := 0; r < *repeats; r++ {
		for i, rw := range rows {
			order := rotate(list, r+i)
			for _, s := range order {
				c := cells[i][s.name]
				base, why := s.base(rw)
				if base == "" {
					c.cannot = why
					continue
				}
				if gone := s.exited(); gone != "" {
					c.repeats = append(c.repeats, outcome{repeat: r + 1, err: "not measured: " + gone})
					continue
				}
				// One run of the cell with the row's client.
				var measure func() outcome
				if rw.client == "" {
					cfg := bench.Config{URLs: []string{base + "/" + rw.file}, Protocol: rw.proto, Connections: rw.connections, Streams: rw.streams,
						Duration: *duration, Samples: *samples, Warmup: *warmup, Rate: rw.rate, Manifest: manifest,
						LocalRoot: filepath.Join(work, "www"), ExpectSize: -1, RangeLast: -1, Insecure: true,
						NewConnectionPerRequest: rw.newConns, ServerPID: s.pidFor(rw), Timeout: 30 * time.Second, KeyExchanges: kx.ids()}
					measure = func() outcome {
						rep, err := bench.Run(ctx, cfg)
						return newOutcome(r+1, rep, err, rw.metric)
					}
				} else {
					measure = func() outcome { return measureExternal(ctx, env, rw, s, base, r+1) }
				}
				var o outcome
				var discarded []float64
				for try := 1; ; try++ {
					if *maxOthers > 0 {
						waitQuiet(ctx, *maxOthers, *quietWait)
					}
					before := readCPU()
					if upstream != nil {
						n, ok := upstream.opened(func() { o = measure() })
						o.backendConns, o.hasBackend = n, ok
					} else {
						o = measure()
					}
					if interrupted() {
						os.Exit(130)
					}
					o.others, o.steal, o.hasLoad = disturbance(before, readCPU())
					if *maxOthers <= 0 || !o.hasLoad || o.others <= *maxOthers || try == disturbedTries {
						break
					}
					log.Printf("repeat %d  %-52s %-*s %s: disturbed (other processes used %.0f%% of the CPU), measuring again",
						r+1, rw.name, nameWidth, s.name, o.logLine(rw.unit), 100*o.others)
					discarded = append(discarded, o.others)
				}
				o.discarded = discarded
				if gone := s.exited(); gone != "" {
					log.Printf("%s: %s", s.name, gone)
					if o.err == "" && o.accepted == 0 {
						o.err = gone
					}
				}
				c.repeats = append(c.repeats, o)
				log.Printf("repeat %d  %-52s %-*s %s", r+1, rw.name, nameWidth, s.name, o.logLine(rw.unit))
			}
		}
	}
	if interrupted() {
		os.Exit(130)
	}
	// Whether the tree the engine was built from (or, for a binary
	// given, the harness's checkout) moved during the run: read before
	// the page is written, which may be in that tree.
	var treeChanged string
	for _, s := range list {
		if s.binary != nil && s.binary.build != nil {
			treeChanged = s.binary.build.Changed()
		}
	}
	if !slices.ContainsFunc(list, func(s *server) bool { return s.binary != nil && s.binary.build != nil }) {
		treeChanged = bench.ReadTree(repo).Since(harnessTree)
	}
	for _, s := range list {
		if isEngine(s.id) {
			ktls.engineLog(filepath.Join(work, s.id+"-tls.log"))
		}
	}
	versions := map[string]string{}
	for _, r := range rows {
		if r.client != "" {
			versions[r.client] = clientVersion(r.client)
		}
	}
	kernel, _ := exec.Command("uname", "-sr").Output()
	host, _ := os.Hostname()
	doc := render(page{
		command:        strings.Join(append([]string{"go run ./bench/compare"}, os.Args[1:]...), " "),
		when:           time.Now().UTC(),
		host:           host,
		cpus:           runtime.NumCPU(),
		cpuModel:       bench.CPUModel(),
		kernel:         strings.TrimSpace(string(kernel)),
		goVer:          runtime.Version(),
		ktls:           ktls,
		harness:        harnessTree,
		treeChanged:    treeChanged,
		keyExchange:    kx,
		upstream:       upstreamAbout(upstream, orig),
		quick:          *quick,
		repeats:        *repeats,
		samples:        *samples,
		sample:         *duration / time.Duration(*samples),
		servers:        list,
		rows:           rows,
		cells:          cells,
		large:          largeSize,
		footing:        same,
		minRatio:       *minRatio,
		client:         *client,
		leftOut:        leftOut,
		installed:      apt.installed,
		clientVersions: versions,
	})
	path := *out
	if !filepath.IsAbs(path) {
		path = filepath.Join(repo, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(doc)
	log.Printf("wrote %s", path)
	if below := belowMinRatio(rows, cells, *minRatio); len(below) > 0 {
		log.Printf("engine/baseline below %.2f on: %s", *minRatio, strings.Join(below, "; "))
		// os.Exit skips the deferred stops and removal.
		for _, s := range list {
			s.stop()
		}
		os.RemoveAll(work)
		os.Exit(1)
	}
}

func orOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// base returns the URL base for a row, or "" and why the server cannot.
func (s *server) base(r row) (string, string) {
	switch {
	case r.proto == "h3":
		if s.h3 == "" {
			return "", "no HTTP/3"
		}
		return s.h3, ""
	case r.proto == "h2":
		if !s.h2 {
			return "", "no HTTP/2"
		}
		return s.tls, ""
	case r.tls && r.newConns && s.tlsNR != "" && r.client == "":
		// engine bench cannot refuse a session; external clients
		// choose whether to resume, on the ordinary TLS port.
		return s.tlsNR, ""
	case r.tls:
		return s.tls, ""
	}
	return s.plain, ""
}

func rotate(l []*server, k int) []*server {
	out := make([]*server, 0, len(l))
	for i := range l {
		out = append(out, l[(i+k)%len(l)])
	}
	return out
}

// newExtEnv gathers what the external clients need: the fixtures'
// digests and sizes, and wrk's script, written into work.
func newExtEnv(work string, manifest []integrity.Entry, large int64, samples int, sample, warmup time.Duration) (*extEnv, error) {
	env := &extEnv{work: work, digests: map[string]integrity.Digest{}, samples: samples, sample: sample, warmup: warmup,
		sizes:     map[string]int64{"large.bin": large, "1m.bin": 1 << 20, "1k.bin": 1024},
		wrkScript: filepath.Join(work, "wrk-summary.lua")}
	for _, e := range manifest {
		env.digests[e.Path] = e.Digest
	}
	for name := range env.sizes {
		if _, ok := env.digests[name]; !ok {
			return nil, fmt.Errorf("the fixtures' manifest lacks %s", name)
		}
	}
	return env, os.WriteFile(env.wrkScript, []byte(wrkScript), 0o644)
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run from inside the repository")
	}
	return filepath.Dir(mod), nil
}

// fixtures writes the files and their manifest.
func fixtures(work string, large int64) ([]integrity.Entry, error) {
	www := filepath.Join(work, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		return nil, err
	}
	for name, size := range map[string]int64{"large.bin": large, "1m.bin": 1 << 20, "1k.bin": 1024} {
		f, err := os.Create(filepath.Join(www, name))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, 1<<20)
		for left := size; left > 0; left -= int64(len(buf)) {
			rand.Read(buf)
			f.Write(buf[:min(left, int64(len(buf)))])
		}
		f.Close()
	}
	entries, errs, err := integrity.HashTree(www, integrity.TreeOptions{})
	if err != nil || len(errs) > 0 {
		return nil, fmt.Errorf("hashing fixtures: %v %v", err, errs)
	}
	f, err := os.Create(filepath.Join(www, "B3SUMS"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return entries, integrity.WriteManifest(f, entries)
}

func writeCert(work string) error {
	c, err := selfsigned.New("localhost", 48*time.Hour, "localhost")
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := selfsigned.PEM(c)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "cert.pem"), certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(work, "key.pem"), keyPEM, 0o644)
}
