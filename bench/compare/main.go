package main

import (
	"embed"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
)

// embeddedPeers holds the nginx, Caddy and lighttpd configuration
// templates, so the binary needs nothing outside the checkout. Read-only.
//
//go:embed peers/*
var embeddedPeers embed.FS

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
	sc, ok := scenarioNamed(*client)
	if !ok {
		log.Fatalf("--client %q: want bench, external, proxy or passthrough", *client)
	}
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
	defServers, defOut := sc.defaults(*baselineBin != "")
	if !set["servers"] {
		*servers = defServers
	}
	if !set["out"] {
		*out = defOut
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
	rows, err := selectRows(sc, *quick, *only, *workloads)
	if err != nil {
		log.Fatal(err)
	}
	os.Exit(execute(options{
		quick: *quick, repeats: *repeats, samples: *samples, duration: *duration, warmup: *warmup,
		servers: strings.Split(*servers, ","), out: *out, minRatio: *minRatio, maxOthers: *maxOthers, quietWait: *quietWait,
		largeSize: largeSize, kx: kx, engineBin: *engineBin, baselineBin: *baselineBin, caddyBin: *caddyBin,
		repo: repo, peers: peers, harness: harnessTree,
	}, sc, rows))
}
