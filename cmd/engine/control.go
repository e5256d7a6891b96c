package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/engine/config"
)

// defaultConfig is where the package installs the configuration: engine
// reload and engine upgrade read it when -c names none.
const defaultConfig = "/etc/engine/engine.toml"

// controlCmd is engine reload and engine upgrade: they find the running
// server (its pid file, or its admin listener's /pid) and signal it.
// reload first validates the configuration as serve --check does, so
// that a broken one is reported here rather than only in the server's
// log; upgrade waits until a new process serves in place of the old.
func controlCmd(name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("c", defaultConfig, "the running server's config file (TOML)")
	fs.StringVar(configPath, "config", defaultConfig, "the running server's config file (TOML)")
	pidFile := fs.String("pid-file", "", "the running server's pid file (default: pid_file in the config, else its admin listener's /pid)")
	wait := fs.Duration("wait", 75*time.Second, "how long to wait for the server to say it reloaded, or for the new process to take over")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "engine %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		if name == "reload" {
			fmt.Fprintf(stderr, "engine: invalid configuration, not reloaded (the running server keeps its own):\n%v\n", err)
		} else {
			fmt.Fprintf(stderr, "engine: invalid configuration, not upgraded (the new process would refuse it):\n%v\n", err)
		}
		return 1
	}
	find := func() (int, error) { return findServer(cfg, *pidFile) }
	pid, err := find()
	if err != nil {
		fmt.Fprintf(stderr, "engine %s: %v\n", name, err)
		return 1
	}
	// Where the system says what the process runs (Linux): an engine
	// serve, reading the file checked here.
	if err := checkServer(pid, *configPath); err != nil {
		fmt.Fprintf(stderr, "engine %s: %v\n", name, err)
		return 1
	}
	// The server writes what became of the request beside its pid file.
	statusFile := *pidFile
	if statusFile == "" {
		statusFile = cfg.PidFile
	}
	if statusFile != "" {
		statusFile += ".status"
	}
	before := readStatus(statusFile)
	sig := sigReload
	if name == "upgrade" {
		sig = sigUpgrade
	}
	if err := signalProcess(pid, sig); err != nil {
		fmt.Fprintf(stderr, "engine %s: signal the server (pid %d): %v\n", name, pid, err)
		return 1
	}
	deadline := time.Now().Add(*wait)
	if name == "reload" {
		if statusFile == "" {
			fmt.Fprintf(stdout, "engine: configuration %s is valid; asked the server (pid %d) to reload it (without a pid_file its outcome is only in its log)\n", cfg.File(), pid)
			return 0
		}
		mine := configDigest(*configPath)
		other := status{}
		for time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			st := readStatus(statusFile)
			if st.seq <= before.seq || st.what != "reload" {
				continue
			}
			if st.digest != mine {
				// Another reload's answer, or the file changed before
				// the server read it: not ours.
				other = st
				continue
			}
			{
				if st.ok {
					fmt.Fprintf(stdout, "engine: reloaded: new connections to pid %d get %s\n", pid, cfg.File())
					return 0
				}
				fmt.Fprintf(stderr, "engine reload: the server (pid %d) refused it and serves on with its configuration: %s\n", pid, st.msg)
				return 1
			}
		}
		if other.seq != 0 {
			fmt.Fprintf(stderr, "engine reload: the server (pid %d) reloaded other contents of its configuration file than %s had when it was checked (it changed meanwhile, or another reload overlapped); run engine reload again\n", pid, *configPath)
			return 1
		}
		fmt.Fprintf(stderr, "engine reload: the server (pid %d) did not say within %s whether it reloaded; see its log\n", pid, *wait)
		return 1
	}
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if next, err := find(); err == nil && next != pid {
			fmt.Fprintf(stdout, "engine: upgraded: pid %d serves; pid %d drains and exits\n", next, pid)
			return 0
		}
		if st := readStatus(statusFile); st.seq > before.seq && st.what == "upgrade" && !st.ok {
			fmt.Fprintf(stderr, "engine upgrade: not upgraded; pid %d goes on serving: %s\n", pid, st.msg)
			return 1
		}
	}
	fmt.Fprintf(stderr, "engine upgrade: no new process took over from pid %d within %s; the old one goes on serving (its log says why)\n", pid, *wait)
	return 1
}

// status is a line of the server's status file (engine.Service.Outcome).
type status struct {
	seq    int64
	ok     bool
	what   string // "reload" or "upgrade"
	digest string // of the configuration file the server read; "-" for none
	msg    string
}

// readStatus reads the status file; the zero status when there is none.
func readStatus(path string) status {
	if path == "" {
		return status{}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return status{}
	}
	f := strings.SplitN(strings.TrimSpace(string(b)), " ", 5)
	if len(f) < 4 {
		return status{}
	}
	seq, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return status{}
	}
	st := status{seq: seq, ok: f[1] == "ok", what: f[2], digest: f[3]}
	if len(f) == 5 {
		st.msg = f[4]
	}
	return st
}

// configDigest names the bytes of the configuration file at path (the
// first 16 hex digits of their SHA-256), "" when it cannot be read.
func configDigest(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || path == "" {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// checkServer makes sure process pid is an engine serve reading the
// configuration file path (its command line and working directory, from
// /proc): a stale pid file must not have another process signalled, and
// a reload asked with another file than the server reads would report
// an answer about the wrong file. Without /proc it checks nothing.
func checkServer(pid int, path string) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		if os.IsNotExist(err) {
			if _, serr := os.Stat("/proc/self/cmdline"); serr == nil {
				return fmt.Errorf("no process %d (a stale pid file?)", pid)
			}
		}
		return nil
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	serve, conf := false, ""
	for i, a := range args {
		switch {
		case a == "serve":
			serve = true
		case (a == "-c" || a == "--config" || a == "-config") && i+1 < len(args):
			conf = args[i+1]
		case strings.HasPrefix(a, "-c="), strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-config="):
			_, conf, _ = strings.Cut(a, "=")
		}
	}
	if !serve {
		return fmt.Errorf("process %d is not an engine serve (its command line: %s): a stale pid file?", pid, strings.Join(args, " "))
	}
	if conf == "" {
		return nil
	}
	if !filepath.IsAbs(conf) {
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil {
			conf = filepath.Join(cwd, conf)
		}
	}
	want, _ := filepath.Abs(path)
	if !sameFile(conf, want) {
		return fmt.Errorf("the server (pid %d) reads %s, not %s: it reloads its own file; give -c %s", pid, conf, path, conf)
	}
	return nil
}

// sameFile reports whether a and b name the same file.
func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(sa, sb)
}

// findServer reads the running server's process ID from pidFile, the
// config's pid_file, or its admin listener.
func findServer(cfg *config.Config, pidFile string) (int, error) {
	if pidFile == "" {
		pidFile = cfg.PidFile
	}
	if pidFile != "" {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return 0, fmt.Errorf("read the pid file: %w (is the server running?)", err)
		}
		return parsePid(string(b))
	}
	if cfg.Admin.Listen == "" {
		return 0, errors.New("no way to find the running server: set pid_file or [admin] listen in its config, or give --pid-file")
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + adminHost(cfg.Admin.Listen) + "/pid")
	if err != nil {
		return 0, fmt.Errorf("ask the admin listener: %w (is the server running?)", err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(io.LimitReader(resp.Body, 64)).ReadString('\n')
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("the admin listener answered %s", resp.Status)
	}
	return parsePid(line)
}

func parsePid(s string) (int, error) {
	pid, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%q is not a process ID", strings.TrimSpace(s))
	}
	return pid, nil
}

// adminHost is the address to reach a listener bound to listen: its
// wildcard host becomes loopback.
func adminHost(listen string) string {
	switch {
	case strings.HasPrefix(listen, ":"):
		return "127.0.0.1" + listen
	case strings.HasPrefix(listen, "0.0.0.0:"):
		return "127.0.0.1" + strings.TrimPrefix(listen, "0.0.0.0")
	case strings.HasPrefix(listen, "[::]:"):
		return "[::1]" + strings.TrimPrefix(listen, "[::]")
	}
	return listen
}
