package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/mediaship/engine/engine"
	"github.com/mediaship/engine/engine/acme"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/routing"
	"github.com/mediaship/engine/internal/buildinfo"
	"github.com/mediaship/engine/preflight"
)

// version, commit and tree are set at build time with -ldflags "-X
// main.version=... -X main.commit=... -X main.tree=...". The benchmark
// harnesses (bench.BuildEngine) stamp commit, the HEAD the binary was
// built from, and tree, the working tree then: "clean", or "modified-"
// and a fingerprint of the uncommitted changes (tracked and untracked
// files). Without a stamp, version falls back on the module version and
// commit on the VCS information go build records (none under
// -buildvcs=false).
var (
	version = "dev"
	commit  = ""
	tree    = ""
)

const usage = `engine serves very large files over HTTP, fast, and proves every byte.

Usage:
  engine serve [-c engine.toml] [--root DIR] [--listen ADDR] [--workers N] [--self-signed] [--check]
  engine preflight [-c engine.toml] [--json]
  engine digest [--root DIR] [-o B3SUMS] [--sha256 SHA256SUMS] [--outboard] [--check B3SUMS]
  engine precompress DIR [--codings br,zstd,gzip] [--min-size 1KiB] [--min-saving 5] [-j N] [--dry-run] [--check] [--json]
  engine verify URL|FILE... [--manifest FILE|URL] [--sha256 HEX] [--protocol h1|h2|h3] [-k]
               [--cacert FILE] [--resolve HOST:PORT:ADDR] [--wait D] [--range A-B]
  engine fetch URL [--mirror URL]... [-o PATH] [--connections N] [--protocol h1|h2|h3]
               [--digest HEX | --manifest FILE|URL] [--sha256 HEX] [--resume] [-k] [--json]
  engine bench URL... [--protocol h1|h2|h3] [--connections N] [--duration D] [--manifest B3SUMS] [...]
  engine sign -c engine.toml PATH [--key-id K] [--expires 2h] [--prefix] [--client-ip A] [--base URL]
  engine reload [-c engine.toml] [--pid-file FILE]
  engine upgrade [-c engine.toml] [--pid-file FILE] [--wait 75s]
  engine version
  engine help

serve flags override the config file. "engine serve --check -c FILE" validates
a config and exits, like "nginx -t"; it also resolves upstream names and
probes the kernel features the config requires, as serve would.

preflight probes the kernel fast paths (kernel TLS, sendfile into it, BBR,
UDP GSO, socket buffers, eBPF steering, open files) and says what is missing
and how to fix it. With -c it judges them by what that config requires and
exits 0 only when all of it is there, 1 when something required is missing,
2 when it could not run. serve runs the same probes before binding. With -c
it also lists the names whose certificates come from ACME: each one's expiry,
or that storage has none yet and the last error a running engine saw (a
missing certificate does not change the exit status: serve obtains it).

reload asks the running server (found by pid_file, or by its admin
listener's /pid) to apply its configuration again (SIGHUP), after checking
it: all of it but the number of workers (a changed listen address is
bound anew), without dropping a request; with pid_file it waits for the
server's answer and exits 1 if it refused. upgrade starts the binary now
at the server's path on its listening sockets (SIGUSR2), and waits until
it serves (exit 0) or the server says it failed (exit 1); the old process
drains within shutdown_grace and exits.

fetch downloads one file over several connections (and mirrors), checking
every 256 KiB against the file's BLAKE3 tree as it lands, re-fetching only
what fails, resumable after any kill ("engine fetch --help").

sign prints PATH with the query that signs it, for paths whose policy is
auth = "signed" ("engine sign --help"; the README's "Signed URLs" gives the
format).

precompress writes .br, .zst and .gz sidecars beside the compressible files
of DIR for precompressed sites ("engine precompress --help" for the rules);
--check reports stale and orphaned ones and exits 1 when there are any.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	buildinfo.Stamp(version, commit, tree)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "preflight":
		return preflightCmd(args[1:], stdout, stderr)
	case "digest":
		return digestCmd(args[1:], stdout, stderr)
	case "precompress":
		return precompressCmd(args[1:], stdout, stderr)
	case "verify":
		return verifyCmd(args[1:], stdout, stderr)
	case "fetch":
		return fetchCmd(args[1:], stdout, stderr)
	case "bench":
		return benchCmd(args[1:], stdout, stderr)
	case "sign":
		return signCmd(args[1:], stdout, stderr)
	case "reload", "upgrade":
		return controlCmd(args[0], args[1:], stdout, stderr)
	case "version", "--version", "-v":
		// One line that names the build (what tools read), then Go's
		// build settings.
		bi := buildinfo.Get()
		fmt.Fprintln(stdout, bi)
		if len(bi.Settings) > 0 {
			fmt.Fprintln(stdout, "build:", strings.Join(bi.Settings, " "))
		}
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "engine: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("c", "", "config file (TOML)")
	fs.StringVar(configPath, "config", "", "config file (TOML)")
	root := fs.String("root", "", "directory to serve (overrides root)")
	listen := fs.String("listen", "", "address to listen on, host:port (overrides listen; default :8080)")
	workers := fs.String("workers", "", "number of reactors (overrides workers; default one per CPU)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	selfSigned := fs.Bool("self-signed", false, "serve TLS with an in-memory self-signed certificate (for trying it out)")
	fs.Usage = func() { fmt.Fprint(stderr, usage, "\nserve flags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "engine serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}

	// load reads the file, applies the flags over it and validates it:
	// at start, and again on SIGHUP.
	load := func() (*config.Config, error) {
		cfg := &config.Config{}
		if *configPath != "" {
			var err error
			if cfg, err = config.Read(*configPath); err != nil {
				return nil, err
			}
		}
		if *selfSigned {
			cfg.SetFlag("self-signed", "true")
		}
		for _, f := range []struct{ name, v string }{{"root", *root}, {"listen", *listen}, {"workers", *workers}} {
			if f.v == "" {
				continue
			}
			if err := cfg.SetFlag(f.name, f.v); err != nil {
				return nil, err
			}
		}
		return cfg, cfg.Validate()
	}
	cfg, err := load()
	if err != nil {
		return configFailed(stderr, err)
	}
	if *check {
		// Upstream names resolve as at the start, checked the same way.
		for _, pass := range []bool{false, true} {
			if _, err := routing.NewRoutes(cfg, pass); err != nil {
				return configFailed(stderr, err)
			}
		}
		name := cfg.File()
		if name == "" {
			name = "flags"
		}
		for _, r := range cfg.Relaxed() {
			fmt.Fprintf(stdout, "engine: --self-signed relaxed this: %s\n", r)
		}
		// The kernel features it requires, probed as serve does before
		// binding: a configuration serve would refuse is not passed.
		if r := new(preflight.Prober).Run(engine.PreflightNeeds(cfg)); !r.OK {
			fmt.Fprintf(stderr, "engine: configuration %s is valid, but serve would refuse to start with it: it requires kernel features this machine lacks.\n\n", name)
			r.WriteText(stderr)
			return 1
		}
		fmt.Fprintf(stdout, "engine: configuration %s is valid, and this machine has the kernel features it requires (engine preflight -c lists them)\n", name)
		return 0
	}

	// A serving engine's live heap is small (about 1 MiB while it does a
	// thousand TLS handshakes a second) and crypto/tls allocates some 40
	// KiB per handshake: under Go's default GOGC=100 the 4 MiB minimum
	// heap made the collector run 40 times a second, 5% of the server's
	// CPU. 400 lifts that floor to 16 MiB (and lets a large heap grow to
	// 5x its live size). GOGC in the environment still decides.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// The heap five times what is live is fine for a server at rest; an
	// attack that churns connections made it 5-10 times the live heap
	// (bench/fairshare). The soft limit makes the collector work harder
	// near [limits] memory_limit instead.
	setMemoryLimit := func(cfg *config.Config) {
		if os.Getenv("GOMEMLIMIT") == "" {
			debug.SetMemoryLimit(int64(cfg.Limits.MemoryLimit))
		}
	}
	setMemoryLimit(cfg)

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}))
	for _, r := range cfg.Relaxed() {
		log.Warn("--self-signed relaxed a requirement of this configuration", "relaxed", r)
	}
	// Sockets systemd passed (socket activation), or the previous
	// process did (a binary upgrade).
	var srv *engine.Server
	srv, err = engine.NewFrom(cfg, log, engine.SocketsFromEnv())
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return configFailed(stderr, err)
		}
		var pe *engine.PreflightError
		if errors.As(err, &pe) {
			fmt.Fprintf(stderr, "engine: refusing to start: the configuration requires kernel features this machine lacks.\n\n")
			pe.Report.WriteText(stderr)
			return 1
		}
		log.Error("cannot start", "err", err)
		return 1
	}
	// ENGINE_CPUPROFILE=FILE (unstable, for diagnosis) writes a CPU profile
	// of the whole run.
	if p := os.Getenv("ENGINE_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil {
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	// ENGINE_ALLOCPROFILE=FILE writes where the run allocated, at exit
	// (go tool pprof -sample_index=alloc_space).
	if p := os.Getenv("ENGINE_ALLOCPROFILE"); p != "" {
		defer func() {
			if f, err := os.Create(p); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	svc := engine.NewService(srv, log)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, sigReopenLogs, syscall.SIGHUP, sigUpgrade)
	defer signal.Stop(sigs)
	// Reloads and upgrades run one at a time on their own goroutine, so
	// that signals are read (and logged) while one is under way: a
	// signal for what is already queued joins it.
	reloads, upgrades := make(chan struct{}, 1), make(chan struct{}, 1)
	queue := func(c chan struct{}, name string) {
		select {
		case c <- struct{}{}:
		default:
			log.Info(name+": one is queued already; this one joins it", "signal", name)
		}
	}
	go func() {
		for sig := range sigs {
			switch sig {
			case sigReopenLogs:
				if err := svc.Current().ReopenLogs(); err != nil {
					log.Error("SIGUSR1: reopening the access log", "err", err)
				} else {
					log.Info("access log reopened")
				}
			case syscall.SIGHUP:
				queue(reloads, "SIGHUP")
			case sigUpgrade:
				queue(upgrades, "SIGUSR2")
			}
		}
	}()
	go func() {
		for {
			select {
			case <-reloads:
				// Everything but the number of workers: a new server on
				// the same sockets takes new connections, the running
				// one drains.
				digest := configDigest(*configPath)
				next, err := load()
				if err == nil {
					err = svc.Reload(next)
				}
				if err == nil {
					setMemoryLimit(next)
				}
				if errors.Is(err, engine.ErrPassedOn) {
					continue // the new process answers it
				}
				if err != nil {
					log.Error("SIGHUP: configuration not reloaded; the running one stays in use", "err", err)
				}
				svc.Outcome("reload", digest, err)
			case <-upgrades:
				err := svc.Upgrade()
				if err != nil {
					log.Error("SIGUSR2: binary not upgraded", "err", err)
					svc.Outcome("upgrade", "", err)
				}
			}
		}
	}()
	if err := svc.Run(ctx, srv); err != nil {
		log.Error("server stopped", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

func configFailed(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "engine: invalid configuration:\n%v\n", err)
	return 1
}

func logLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

func preflightCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("c", "", "judge the probes by what this config requires")
	fs.StringVar(configPath, "config", "", "judge the probes by what this config requires")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "engine preflight: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	needs := preflight.All()
	var certs []acme.Status
	if *configPath != "" {
		cfg, err := config.Load(*configPath)
		if err != nil {
			fmt.Fprintf(stderr, "engine: invalid configuration:\n%v\n", err)
			return 2
		}
		needs = engine.PreflightNeeds(cfg)
		needs.Steering = true
		certs = acme.Report(cfg)
	}
	r := new(preflight.Prober).Run(needs)
	var err error
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(struct {
			*preflight.Report
			ACME []acme.Status `json:"acme,omitempty"`
		}{r, certs})
	} else {
		err = r.WriteText(stdout)
		if err == nil && len(certs) > 0 {
			err = writeACMEText(stdout, certs)
		}
	}
	if err != nil {
		return 2
	}
	if !r.OK {
		return 1
	}
	return 0
}

// writeACMEText prints the ACME part of engine preflight -c.
func writeACMEText(w io.Writer, names []acme.Status) error {
	var b strings.Builder
	b.WriteString("\nACME certificates:\n")
	width := len("NAME")
	for _, n := range names {
		width = max(width, len(n.Name))
	}
	fmt.Fprintf(&b, "%-*s  %-7s  %s\n", width, "NAME", "STATUS", "DETAIL")
	now := time.Now()
	for _, n := range names {
		switch {
		case !n.NotBefore.IsZero() && now.Before(n.NotBefore):
			fmt.Fprintf(&b, "%-*s  %-7s  not valid before %s", width, n.Name, "NOTYET", n.NotBefore.UTC().Format(time.RFC3339))
		case !n.NotAfter.IsZero() && n.NotAfter.After(now):
			fmt.Fprintf(&b, "%-*s  %-7s  valid until %s (%d days)", width, n.Name, "OK", n.NotAfter.UTC().Format(time.RFC3339), int(n.NotAfter.Sub(now).Hours()/24))
		case !n.NotAfter.IsZero():
			fmt.Fprintf(&b, "%-*s  %-7s  expired %s", width, n.Name, "EXPIRED", n.NotAfter.UTC().Format(time.RFC3339))
		default:
			fmt.Fprintf(&b, "%-*s  %-7s  %s", width, n.Name, "NONE", n.Missing)
		}
		if !n.LastAttempt.IsZero() {
			fmt.Fprintf(&b, "; last asked the CA %s", n.LastAttempt.UTC().Format(time.RFC3339))
		}
		if n.LastError != "" {
			fmt.Fprintf(&b, "; last error: %s", n.LastError)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
