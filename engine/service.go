package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/mediaship/engine/engine/config"
)

// Service runs a Server as a long-lived process: it reloads the
// configuration by starting a successor Server in this process on the
// same listening sockets (a generation), upgrades the binary by starting
// a new process on them, tells systemd what it does (sd_notify), and
// keeps the pid file.
//
// A reload's successor takes every new connection; the predecessor
// stops watching the sockets, closes its idle connections, ends kept
// connections after the response in flight (Connection: close on
// HTTP/1.1, GOAWAY on HTTP/2 and HTTP/3) and drains within its
// shutdown_grace, so each request finishes under the configuration it
// started with and the next one, on a new connection, gets the new one.
type Service struct {
	log  *slog.Logger
	exe  string   // the binary, as started (a binary upgrade runs what is there now)
	args []string // its arguments

	mu        sync.Mutex // serializes reloads, upgrades and the stop
	cur       *generation
	stopped   bool
	old       sync.WaitGroup // predecessors draining
	done      chan error     // the current generation's Run ended on its own
	upgrade   chan struct{}  // closed when a new process took over
	seq       int64          // the last Outcome's sequence number (only the signal goroutine writes it)
	successor int            // the process an upgrade handed over to; guarded by mu
	serving   chan struct{}  // closed once the first generation serves
}

// generation is one Server and the context its Run serves under.
type generation struct {
	srv    *Server
	cancel context.CancelFunc
	ended  chan error
}

// NewService runs srv (made by New or NewFrom) as a service.
func NewService(srv *Server, log *slog.Logger) *Service {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return &Service{log: log, exe: exe, args: os.Args, done: make(chan error, 1), upgrade: make(chan struct{}), serving: make(chan struct{})}
}

// Current is the generation serving new connections now.
func (sv *Service) Current() *Server {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.cur.srv
}

// start runs srv as the current generation.
func (sv *Service) start(srv *Server) *generation {
	ctx, cancel := context.WithCancel(context.Background())
	g := &generation{srv: srv, cancel: cancel, ended: make(chan error, 1)}
	go func() {
		err := srv.Run(ctx)
		g.ended <- err
		sv.mu.Lock()
		own := sv.cur == g
		sv.mu.Unlock()
		if own {
			sv.done <- err
		}
	}()
	return g
}

// Run serves until ctx ends (SIGTERM), the serving generation stops on
// its own, or a new process took over after a binary upgrade; then every
// generation drains, and Run returns when they have.
func (sv *Service) Run(ctx context.Context, srv *Server) error {
	first := sv.start(srv)
	sv.mu.Lock()
	sv.cur = first
	sv.mu.Unlock()
	select {
	case <-srv.serving:
		sv.writePid(srv.cfg)
		notify("READY=1\nSTATUS=serving")
		ready(sv.log)
		close(sv.serving)
	case err := <-first.ended:
		if err == nil {
			err = errors.New("engine: the server stopped before it served")
		}
		return err
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-sv.done:
	case <-sv.upgrade:
	}
	sv.mu.Lock()
	sv.stopped = true
	g := sv.cur
	sv.mu.Unlock()
	select {
	case <-sv.upgrade:
		notify("STATUS=draining for the new process")
	default:
		notify("STOPPING=1\nSTATUS=draining")
	}
	if g != nil {
		g.cancel()
		if e := <-g.ended; err == nil {
			err = e
		}
	}
	sv.old.Wait()
	select {
	case <-sv.upgrade:
	default:
		sv.removePid(g.srv.cfg)
	}
	return err
}

// Reload applies next, which passed Validate. A configuration that
// changes only where certificates come from is applied to the running
// server (new handshakes get the new certificates); any other starts a
// successor on the same sockets, and the running one drains. On an error
// nothing changes.
func (sv *Service) Reload(next *config.Config) error {
	if err := sv.awaitServing("reload"); err != nil {
		return err
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.stopped {
		if sv.successor != 0 {
			// A reload asked for while the upgrade ran is the new
			// process's to do.
			if err := signalReload(sv.successor); err == nil {
				sv.log.Info("reload passed on to the process that took over", "pid", sv.successor)
				return ErrPassedOn
			}
		}
		return errors.New("engine: reload: the server is stopping")
	}
	notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d\nSTATUS=reloading", monotonicUsec()))
	defer notify("READY=1\nSTATUS=serving")
	cur := sv.cur.srv
	if w, v := cur.cfg.WorkerCount(), next.WorkerCount(); w != v {
		return fmt.Errorf("engine: reload: workers changed (%d to %d), and the number of workers is kept across a reload: restart, or run engine upgrade, to change it", w, v)
	}
	if len(cur.cfg.RestartChanges(next)) == 0 && (next.ACMEOn() == cur.cfg.ACMEOn()) {
		if err := cur.Reload(next); err != nil {
			return err
		}
		sv.log.Info("configuration reloaded: certificates, signing keys and credentials read again")
		return nil
	}
	socks, err := cur.Handover()
	if err != nil {
		return err
	}
	n, err := NewFrom(next, sv.log, socks)
	if err != nil {
		return fmt.Errorf("engine: reload: the new configuration could not start; the running one stays: %w", err)
	}
	g := sv.start(n)
	select {
	case <-n.serving:
	case err := <-g.ended:
		return fmt.Errorf("engine: reload: the new configuration stopped before it served; the running one stays: %v", err)
	}
	old := sv.cur
	sv.cur = g
	sv.retire(old)
	sv.log.Info("configuration reloaded: new connections get it; the previous one drains", "addr", n.Addr())
	return nil
}

// awaitServing waits until the first generation serves: a signal can
// come before.
func (sv *Service) awaitServing(what string) error {
	select {
	case <-sv.serving:
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("engine: %s: the server is not serving yet", what)
	}
}

// retire ends g's accepting, returning once its successor takes every
// new connection, and lets it drain in the background.
func (sv *Service) retire(g *generation) {
	g.srv.handed.Store(true)
	g.srv.stopAccepting()
	sv.old.Add(1)
	go func() {
		defer sv.old.Done()
		g.cancel()
		if err := <-g.ended; err != nil {
			sv.log.Error("a previous configuration's server stopped with an error", "err", err)
		}
	}()
}

// Upgrade starts the binary at the path this process was started from,
// with the same arguments, on this process's listening sockets. Once the
// new process serves, this one stops accepting and drains, and Run
// returns after the drain; if the new process fails to start (or does
// not report serving within a minute), it is stopped and this one goes
// on as before.
func (sv *Service) Upgrade() error {
	if err := sv.awaitServing("upgrade"); err != nil {
		return err
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.stopped {
		return errors.New("engine: upgrade: the server is stopping")
	}
	cur := sv.cur.srv
	socks, err := cur.Handover()
	if err != nil {
		return err
	}
	files, _ := socks.Files()
	inodes := socketInodes(files)
	already := holders(inodes) // systemd's, with socket activation
	pid, err := startSuccessor(sv.exe, sv.args, socks, time.Minute)
	socks.Close()
	if err != nil {
		// Nothing the failed process started may keep the sockets (a
		// process in a session of its own escapes its group's kill).
		if killed := killHolders(inodes, already); len(killed) > 0 {
			sv.log.Warn("upgrade: killed processes the failed new process left holding the listening sockets", "pids", fmt.Sprint(killed))
		}
		return fmt.Errorf("engine: upgrade: %w; this process goes on serving", err)
	}
	sv.log.Info("binary upgrade: the new process serves; this one drains", "new_pid", pid, "binary", sv.exe)
	// systemd follows the new process as the service's main one.
	notify(fmt.Sprintf("MAINPID=%d\nSTATUS=handed over to %d", pid, pid))
	sv.stopped, sv.successor = true, pid
	cur.handed.Store(true)
	cur.stopAccepting()
	close(sv.upgrade)
	return nil
}

// ErrPassedOn is Reload's answer in a process that has handed over to a
// new one (a binary upgrade): the reload was asked of the new process.
var ErrPassedOn = errors.New("engine: reload passed on to the process that took over")

// Outcome records what became of a reload or an upgrade in the status
// file beside the pid file (pid_file + ".status"), where engine reload and
// engine upgrade read it: a line "SEQ ok|failed reload|upgrade DIGEST MESSAGE",
// SEQ counting up from the process's start time in nanoseconds so that
// a new process's lines sort after its predecessor's.
//
// digest names the configuration file's bytes the server read (for a
// reload), so that a client that asked for a reload of other bytes (the
// file changed meanwhile, or another reload overlapped) does not take
// this answer for its own; "-" when there is none.
func (sv *Service) Outcome(what, digest string, err error) {
	sv.mu.Lock()
	cfg := sv.cur.srv.cfg
	sv.mu.Unlock()
	if cfg.PidFile == "" {
		return
	}
	sv.seq = max(sv.seq+1, time.Now().UnixNano())
	res, msg := "ok", "applied"
	if err != nil {
		res, msg = "failed", strings.ReplaceAll(err.Error(), "\n", " ")
	}
	if digest == "" {
		digest = "-"
	}
	line := fmt.Sprintf("%d %s %s %s %s\n", sv.seq, res, what, digest, msg)
	tmp := cfg.PidFile + ".status.tmp"
	err = os.WriteFile(tmp, []byte(line), 0o644)
	if err == nil {
		err = os.Rename(tmp, cfg.PidFile+".status")
	}
	if err != nil {
		sv.log.Error("cannot write the status file engine reload and engine upgrade read", "path", cfg.PidFile+".status", "err", err)
	}
}

// writePid writes the pid file, when the configuration names one.
func (sv *Service) writePid(cfg *config.Config) {
	if cfg.PidFile == "" {
		return
	}
	tmp := cfg.PidFile + ".tmp"
	os.MkdirAll(filepath.Dir(cfg.PidFile), 0o755)
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err == nil {
		err = os.Rename(tmp, cfg.PidFile)
		if err != nil {
			sv.log.Error("cannot write the pid file", "path", cfg.PidFile, "err", err)
		}
	} else {
		sv.log.Error("cannot write the pid file", "path", cfg.PidFile, "err", err)
	}
}

// removePid removes the pid file if it still names this process.
func (sv *Service) removePid(cfg *config.Config) {
	if cfg.PidFile == "" {
		return
	}
	if b, err := os.ReadFile(cfg.PidFile); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		os.Remove(cfg.PidFile)
	}
}

// notify tells systemd (Type=notify) a state change; without
// NOTIFY_SOCKET it does nothing.
func notify(state string) { daemon.SdNotify(false, state) }

// ready tells the process that started this one in a binary upgrade
// that it serves (ENGINE_READY_FD), and forgets the descriptor.
func ready(log *slog.Logger) {
	v := os.Getenv(readyFDEnv)
	if v == "" {
		return
	}
	os.Unsetenv(readyFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return
	}
	f := os.NewFile(uintptr(fd), "ready")
	if _, err := f.Write([]byte("ready\n")); err != nil {
		log.Warn("could not tell the previous process that this one serves", "err", err)
	}
	f.Close()
}
