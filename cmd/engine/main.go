// Command engine serves files over HTTP and checks what it served.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"

	"github.com/mediaship/engine/engine"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `engine serves very large files over HTTP, fast, and proves every byte.

Usage:
  engine serve [-c engine.toml] [--root DIR] [--listen ADDR] [--workers N] [--check]
  engine version
  engine help

serve flags override the config file. "engine serve --check -c FILE" validates
a config and exits, like "nginx -t".
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "engine: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("engine %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
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
	fs.Usage = func() { fmt.Fprint(stderr, usage, "\nserve flags:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "engine serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}

	var cfg *engine.Config
	if *configPath != "" {
		var err error
		if cfg, err = engine.ReadConfig(*configPath); err != nil {
			return configFailed(stderr, err)
		}
	} else {
		cfg = &engine.Config{}
	}
	for _, f := range []struct{ name, v string }{{"root", *root}, {"listen", *listen}, {"workers", *workers}} {
		if f.v == "" {
			continue
		}
		if err := cfg.SetFlag(f.name, f.v); err != nil {
			return configFailed(stderr, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return configFailed(stderr, err)
	}
	if *check {
		name := cfg.File()
		if name == "" {
			name = "flags"
		}
		fmt.Fprintf(stdout, "engine: configuration %s is valid\n", name)
		return 0
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}))
	srv, err := engine.New(cfg, log)
	if err != nil {
		var ce *engine.ConfigError
		if errors.As(err, &ce) {
			return configFailed(stderr, err)
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	go func() {
		for range usr1 {
			if err := srv.ReopenLogs(); err != nil {
				log.Error("SIGUSR1", "err", err)
			} else {
				log.Info("access log reopened")
			}
		}
	}()
	if err := srv.Run(ctx); err != nil {
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
