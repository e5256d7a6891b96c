package main

import (
	"errors"
	"fmt"
	"log"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/mediaship/engine/bench"
)

// A scenario is what --client chooses: the rows, the configuration each
// server runs in, and what the servers stand in front of. The run treats
// every scenario alike: it sets the scenario up, starts the servers it
// configures, measures each row on each server in turn and writes the
// page, which says what was measured by the scenario's name. One
// implementation per --client value: benchScenario (bench.go),
// externalScenario (external.go), proxyScenario (proxy.go) and
// passScenario (passthrough.go).
type scenario interface {
	// name is the --client value; the page keys on it.
	name() string
	// defaults are --servers and --out when the flags are not given,
	// with or without --baseline.
	defaults(baseline bool) (servers, out string)
	// rows is the scenario's matrix; short asks for a --quick run's few
	// rows, where the scenario has fewer for it.
	rows(short bool) []row
	// setup starts what every server stands in front of (the proxies'
	// backend, the relays' origin), for the rows to be measured;
	// teardown stops it, and does nothing when setup did not run.
	setup(l *launcher, rows []row) error
	teardown()
	// server prepares what the server --servers names (engine, baseline,
	// nginx, ...) needs in this scenario, building or installing it, and
	// returns how to start it configured for the scenario. An error of
	// type skip leaves the server out of the run; any other ends the run.
	server(id string, l *launcher) (start func() (*server, error), err error)
	// measure takes one measurement of a cell with run, adding what the
	// scenario observes around it (the backend connections a proxy opened).
	measure(run func() outcome) outcome
	// upstream names the versions of what the servers forward to, for the
	// page; "" when they forward to nothing.
	upstream() string
}

// scenarioNamed is the scenario --client names.
func scenarioNamed(client string) (scenario, bool) {
	switch client {
	case "bench":
		return benchScenario{}, true
	case "external":
		return externalScenario{}, true
	case "proxy":
		return &proxyScenario{}, true
	case "passthrough":
		return &passScenario{}, true
	}
	return nil, false
}

// standalone is the part of a scenario whose servers stand in front of
// nothing: no setup, and a measurement is only itself.
type standalone struct{}

func (standalone) setup(*launcher, []row) error       { return nil }
func (standalone) teardown()                          {}
func (standalone) measure(run func() outcome) outcome { return run() }
func (standalone) upstream() string                   { return "" }

// selectRows is the scenario's rows that --rows (a regular expression on
// the names) and --workloads (ids or parts of names) pick. Both pick from
// the whole matrix, so that --quick --rows h3 is a short run of the
// HTTP/3 rows.
func selectRows(sc scenario, quick bool, only, workloads string) ([]row, error) {
	rows := sc.rows(quick && only == "" && workloads == "")
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return nil, fmt.Errorf("--rows: %v", err)
		}
		rows = slices.DeleteFunc(rows, func(r row) bool { return !re.MatchString(r.name) })
		if len(rows) == 0 {
			return nil, fmt.Errorf("--rows %q matches no row", only)
		}
	}
	if workloads != "" {
		var err error
		if rows, err = selectWorkloads(rows, workloads); err != nil {
			return nil, err
		}
		if len(rows) == 0 {
			return nil, fmt.Errorf("--rows %q and --workloads %q have no row in common", only, workloads)
		}
	}
	return rows, nil
}

// launcher is what starting a server needs, whatever the scenario: the
// work folder with the fixtures and certificate, the peers' templates,
// the binaries the flags name and the installer of Debian's tools. Used
// from the main goroutine only.
type launcher struct {
	repo, work string
	peers      peerTemplates
	apt        *installer
	offerKTLS  bool   // the kernel has kernel TLS: nginx is offered it
	kx         string // --key-exchange, the engine's only one; "" for its default
	// --engine, --baseline and --caddy; "" where not given.
	engineBin, baselineBin, caddyBin string
}

// skip is a server left out of the run because something it needs is
// missing here; the run goes on without it.
type skip struct {
	err  error
	note string // the page's line under "Left out of this run"; "" for the log only
}

func (s skip) Error() string { return s.err.Error() }

// leftOut is a skip whose reason the page lists as "what: err".
func leftOut(what string, err error) skip { return skip{err: err, note: what + ": " + err.Error()} }

// engine is the engine binary id names: "engine", built from the working
// tree unless --engine names one, or "baseline", which --baseline names.
// With a baseline the run is about the two binaries, so one that cannot
// be built ends it rather than leaving a table without the ratio.
func (l *launcher) engine(id string) (engineSpec, error) {
	if id == "baseline" {
		if l.baselineBin == "" {
			return engineSpec{}, errors.New("--servers names baseline: name its binary with --baseline PATH")
		}
		return engineSpec{id: "baseline", name: baselineName, bin: l.baselineBin, origin: "--baseline " + l.baselineBin, kx: l.kx}, nil
	}
	spec := engineSpec{id: "engine", name: "engine", bin: l.engineBin, kx: l.kx}
	if spec.bin != "" {
		spec.origin = "--engine " + spec.bin
		return spec, nil
	}
	b, err := bench.BuildEngine(l.repo, filepath.Join(l.work, "engine"))
	if err != nil {
		if l.baselineBin != "" {
			return engineSpec{}, fmt.Errorf("engine: %v", err)
		}
		return engineSpec{}, skip{err: err}
	}
	log.Printf("engine built from %s", b.Tree)
	spec.bin, spec.build = b.Path, b
	if l.baselineBin != "" {
		spec.origin = "built from the working tree"
	}
	return spec, nil
}

// caddy is the Caddy binary to run (see findCaddy).
func (l *launcher) caddy() (string, error) {
	bin, err := findCaddy(l.caddyBin)
	if err != nil {
		return "", skip{err: err}
	}
	return bin, nil
}

// gohttp builds the Go net/http peer, bench/compare/gohttp.
func (l *launcher) gohttp() (string, error) {
	bin, err := goBuild(l.repo, l.work, "gohttp", "./bench/compare/gohttp")
	if err != nil {
		return "", leftOut("Go net/http", err)
	}
	return bin, nil
}

// tool makes sure the Debian tool server id needs is installed.
func (l *launcher) tool(id string, t debTool) error {
	if err := l.apt.ensure(t); err != nil {
		return leftOut(id, err)
	}
	return nil
}

func unknownServer(id string) error {
	return fmt.Errorf("unknown server %q (engine, baseline, nginx, caddy, gohttp, lighttpd, haproxy)", id)
}
