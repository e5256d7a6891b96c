package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/selfsigned"
)

// options are the parsed flags a run reads, after main has applied
// --quick, --sample and the scenario's defaults.
type options struct {
	quick                  bool
	repeats, samples       int
	duration, warmup       time.Duration
	servers                []string // --servers, in order
	out                    string   // --out, relative to the repository unless absolute
	minRatio               float64
	maxOthers              float64
	quietWait              time.Duration
	largeSize              int64
	kx                     keyExchangeChoice
	engineBin, baselineBin string
	caddyBin               string
	repo                   string
	peers                  peerTemplates
	harness                bench.Tree // the harness's checkout at the start
}

// run is one invocation: a scenario's rows measured on its servers, and
// the page. Owned by the main goroutine; the measurements' own goroutines
// see only what they are handed.
type run struct {
	// Set by prepare and startServers; read-only from measureAll on.
	opts     options
	sc       scenario
	rows     []row
	l        *launcher
	manifest []integrity.Entry
	env      *extEnv // the external clients' environment; nil when no row has one
	// sys counts the servers' syscalls, opened once for the run and
	// closed by stopAll; nil when it could not be, and sysErr says why.
	sys     *syscallCounter
	sysErr  error
	ktls    kernelTLS
	leftOut []string // rows and servers left out, and why, for the page
	servers []*server
	footing string // with a baseline: what sameFooting found
	// Filled by measureAll: cells[row][server name] collects every
	// repeat's outcome.
	cells []map[string]*cell
}

// execute runs the whole comparison and returns the exit status: 0, 1
// when the engine fell below --min-ratio of its baseline, 130 when
// interrupted. What it started is stopped, and its work folder removed,
// on every return.
func execute(opts options, sc scenario, rows []row) int {
	r := &run{opts: opts, sc: sc, rows: rows}
	r.prepare()
	defer r.stopAll()
	r.startServers()
	// Ctrl-C or SIGTERM stops the run and the servers; nothing is written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !r.measureAll(ctx) {
		log.Print("interrupted: servers stopped, no report written")
		return 130
	}
	r.write()
	if below := belowMinRatio(r.rows, r.cells, opts.minRatio); len(below) > 0 {
		log.Printf("engine/baseline below %.2f on: %s", opts.minRatio, strings.Join(below, "; "))
		return 1
	}
	return 0
}

// fatal stops what has started, removes the work folder, which
// log.Fatal's exit would leave behind, and ends the run.
func (r *run) fatal(format string, args ...any) {
	r.stopAll()
	log.Fatalf(format, args...)
}

// stopAll stops the servers, then what they stand in front of, and
// removes the work folder. Doing it twice does nothing more.
func (r *run) stopAll() {
	for _, s := range slices.Backward(r.servers) {
		s.stop()
	}
	r.servers = nil
	r.sc.teardown()
	if err := r.sys.close(); err != nil {
		log.Printf("syscall counter: %v", err)
	}
	r.sys = nil
	if r.l != nil {
		os.RemoveAll(r.l.work)
	}
}

// prepare writes the fixtures and the certificate into a new work
// folder, leaves out the rows whose client is missing, and sets the
// scenario up.
func (r *run) prepare() {
	work, err := os.MkdirTemp("", "engine-compare-")
	if err != nil {
		log.Fatal(err)
	}
	os.Chmod(work, 0o755) // nginx workers run as www-data
	o := r.opts
	r.l = &launcher{repo: o.repo, work: work, peers: o.peers, apt: newInstaller(), kx: o.kx.name,
		engineBin: o.engineBin, baselineBin: o.baselineBin, caddyBin: o.caddyBin}
	log.Printf("fixtures and configurations in %s", work)
	if r.manifest, err = fixtures(work, o.largeSize); err != nil {
		r.fatal("%v", err)
	}
	if err := writeCert(work); err != nil {
		r.fatal("%v", err)
	}
	// Probed before the servers start: nginx is offered kernel TLS only
	// where the kernel has it.
	r.ktls = kernelTLS{probe: probeKernelTLS()}
	r.l.offerKTLS = r.ktls.probe == nil
	log.Printf("kernel TLS: %v", orOK(r.ktls.probe))

	// One counter for the whole run, attached before the servers start
	// and read around every sample; stopAll closes it. Only the external
	// clients' pages show syscalls: engine bench's runs go without it,
	// as every syscall on the machine runs its program.
	if r.sc.name() != "bench" {
		if r.sys, r.sysErr = openSyscallCounter(); r.sysErr != nil {
			log.Printf("syscalls not counted: %v", r.sysErr)
		}
	}

	// The external clients come from Debian: a row whose client is
	// missing, and cannot be installed, is left out and the page says why.
	r.rows = slices.DeleteFunc(r.rows, func(rw row) bool {
		if rw.client == "" {
			return false // engine bench, in this process
		}
		err := r.l.apt.ensure(clientTool(rw.client))
		if err != nil {
			log.Printf("%s left out: %v", rw.name, err)
			r.leftOut = append(r.leftOut, fmt.Sprintf("%s (%s): %v", rw.name, rw.client, err))
		}
		return err != nil
	})
	if len(r.rows) == 0 {
		r.fatal("no row left to measure: none of its clients is installed")
	}
	if slices.ContainsFunc(r.rows, func(rw row) bool { return rw.client != "" }) {
		if r.env, err = newExtEnv(work, r.manifest, o.largeSize, o.samples, o.duration/time.Duration(o.samples), o.warmup); err != nil {
			r.fatal("%v", err)
		}
		r.env.sys = r.sys
	}
	if err := r.sc.setup(r.l, r.rows); err != nil {
		r.fatal("%v", err)
	}
}

// startServers starts each server --servers names, configured for the
// scenario; one that cannot start is left out, and the page says why.
func (r *run) startServers() {
	for _, id := range r.opts.servers {
		start, err := r.sc.server(id, r.l)
		if sk := (skip{}); errors.As(err, &sk) {
			log.Printf("%s left out: %v", id, sk.err)
			if sk.note != "" {
				r.leftOut = append(r.leftOut, sk.note)
			}
			continue
		}
		if err != nil {
			r.fatal("%v", err)
		}
		s, err := startOnFreePorts(start)
		if err != nil {
			// With a baseline, the run is about the two engine binaries:
			// one that cannot start ends it rather than leaving a table
			// without the ratio.
			if r.opts.baselineBin != "" && isEngine(id) {
				r.fatal("%s: %v", id, err)
			}
			log.Printf("%s left out: %v", id, err)
			r.leftOut = append(r.leftOut, fmt.Sprintf("%s: did not start: %v", id, err))
			continue
		}
		log.Printf("%s: %s", id, s.where())
		r.servers = append(r.servers, s)
	}
	if len(r.servers) == 0 {
		r.fatal("no server to measure")
	}
	var err error
	if r.footing, err = sameFooting(r.servers); err != nil {
		r.fatal("%v", err)
	}
}

// measureAll measures every cell, repeat after repeat, the servers taking
// turns in an order that rotates from row to row. It returns false when
// interrupted.
func (r *run) measureAll(ctx context.Context) bool {
	r.cells = make([]map[string]*cell, len(r.rows))
	for i := range r.rows {
		r.cells[i] = map[string]*cell{}
		for _, s := range r.servers {
			r.cells[i][s.name] = &cell{}
		}
	}
	nameWidth := 7 // for the progress lines
	for _, s := range r.servers {
		nameWidth = max(nameWidth, len(s.name))
	}
	for rep := 1; rep <= r.opts.repeats; rep++ {
		for i, rw := range r.rows {
			for _, s := range rotate(r.servers, rep-1+i) {
				c := r.cells[i][s.name]
				base, why := s.base(rw)
				if base == "" {
					c.cannot = why
					continue
				}
				if gone := s.exited(); gone != "" {
					c.repeats = append(c.repeats, outcome{repeat: rep, err: "not measured: " + gone})
					continue
				}
				o := r.measureCell(ctx, rw, s, base, rep, nameWidth)
				if ctx.Err() != nil {
					return false
				}
				if gone := s.exited(); gone != "" {
					log.Printf("%s: %s", s.name, gone)
					if o.err == "" && o.accepted == 0 {
						o.err = gone
					}
				}
				c.repeats = append(c.repeats, o)
				log.Printf("repeat %d  %-52s %-*s %s", rep, rw.name, nameWidth, s.name, o.logLine(rw))
			}
		}
	}
	return ctx.Err() == nil
}

// measureCell is one repeat of a cell with the row's client; with
// --max-others it waits for a quiet machine first, and measures a run
// that other processes disturbed again, up to disturbedTries in all.
func (r *run) measureCell(ctx context.Context, rw row, s *server, base string, repeat, nameWidth int) outcome {
	o := r.opts
	var once func() outcome
	if rw.client == "" {
		cfg := bench.Config{URLs: []string{base + "/" + rw.file}, Protocol: rw.proto, Connections: rw.connections, Streams: rw.streams,
			Duration: o.duration, Samples: o.samples, Warmup: o.warmup, Rate: rw.rate, Manifest: r.manifest,
			LocalRoot: filepath.Join(r.l.work, "www"), ExpectSize: -1, RangeLast: -1, Insecure: true,
			NewConnectionPerRequest: rw.newConns, ServerPID: s.pidFor(rw), Timeout: 30 * time.Second, KeyExchanges: o.kx.ids()}
		// The server's tree is read where bench.Run reads its CPU.
		pid := s.pidFor(rw)
		var use serverUse
		cfg.OnSamples = func() func() {
			before := readServer(pid, r.sys)
			return func() { use = readServer(pid, r.sys).since(before) }
		}
		once = func() outcome {
			use = serverUse{}
			rep, err := bench.Run(ctx, cfg)
			out := newOutcome(repeat, rep, err, rw.metric)
			if out.accepted > 0 {
				var responses int64
				for _, sm := range rep.Samples {
					responses += sm.Responses
				}
				out.setUse(rw.metric, use, rep.Bytes, responses)
			}
			return out
		}
	} else {
		once = func() outcome { return measureExternal(ctx, r.env, rw, s, base, repeat) }
	}
	var out outcome
	var discarded []float64
	for try := 1; ; try++ {
		if o.maxOthers > 0 {
			waitQuiet(ctx, o.maxOthers, o.quietWait)
		}
		before := readCPU()
		out = r.sc.measure(once)
		if ctx.Err() != nil {
			return out
		}
		out.others, out.steal, out.hasLoad = disturbance(before, readCPU())
		if o.maxOthers <= 0 || !out.hasLoad || out.others <= o.maxOthers || try == disturbedTries {
			break
		}
		log.Printf("repeat %d  %-52s %-*s %s: disturbed (other processes used %.0f%% of the CPU), measuring again",
			repeat, rw.name, nameWidth, s.name, out.logLine(rw), 100*out.others)
		discarded = append(discarded, out.others)
	}
	out.discarded = discarded
	return out
}

// write renders the page and writes it to --out, and prints it.
func (r *run) write() {
	o := r.opts
	// Whether the tree the engine was built from (or, for a binary
	// given, the harness's checkout) moved during the run: read before
	// the page is written, which may be in that tree.
	var treeChanged string
	for _, s := range r.servers {
		if s.binary != nil && s.binary.build != nil {
			treeChanged = s.binary.build.Changed()
		}
	}
	if !slices.ContainsFunc(r.servers, func(s *server) bool { return s.binary != nil && s.binary.build != nil }) {
		treeChanged = bench.ReadTree(o.repo).Since(o.harness)
	}
	for _, s := range r.servers {
		if isEngine(s.id) {
			r.ktls.engineLog(filepath.Join(r.l.work, s.id+"-tls.log"))
		}
	}
	versions := map[string]string{}
	for _, rw := range r.rows {
		if rw.client != "" {
			versions[rw.client] = clientVersion(rw.client)
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
		ktls:           r.ktls,
		harness:        o.harness,
		treeChanged:    treeChanged,
		keyExchange:    o.kx,
		upstream:       r.sc.upstream(),
		quick:          o.quick,
		repeats:        o.repeats,
		samples:        o.samples,
		sample:         o.duration / time.Duration(o.samples),
		servers:        r.servers,
		rows:           r.rows,
		cells:          r.cells,
		large:          o.largeSize,
		footing:        r.footing,
		minRatio:       o.minRatio,
		client:         r.sc.name(),
		leftOut:        r.leftOut,
		installed:      r.l.apt.installed,
		clientVersions: versions,
		sysErr:         r.sysErr,
	})
	path := o.out
	if !filepath.IsAbs(path) {
		path = filepath.Join(o.repo, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		r.fatal("%v", err)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		r.fatal("%v", err)
	}
	fmt.Print(doc)
	log.Printf("wrote %s", path)
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
