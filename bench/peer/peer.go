// Package peer starts and stops the servers the benchmark tools measure,
// the engine's own binary first among them, and picks the ports they
// listen on: what bench/obs, bench/acme, bench/wtcap and bench/compare
// share, so that each starts a server, learns its addresses and stops it
// the same way.
//
// Every wait has a deadline: a server that does not say it is serving
// within StartTimeout, or does not stop within StopTimeout of being asked,
// is reported (and killed), never waited on forever.
package peer

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"
)

const (
	// StartTimeout bounds a server's start: its "serving" line.
	StartTimeout = 30 * time.Second
	// StopTimeout bounds a graceful stop before the process is killed.
	StopTimeout = 10 * time.Second
)

// FreeAddr is a loopback TCP address free now (another process may take
// it before the server binds it: use addresses the server reports where
// it can pick its own).
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// FreePort is FreeAddr's port.
func FreePort() (int, error) {
	a, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(a)
	var n int
	fmt.Sscan(p, &n)
	return n, nil
}

// Command is name with args, pinned to CPU cpu with taskset when it is
// at least 0, the machine has more than one CPU and taskset is there (a
// harness keeps the other CPUs for its client).
func Command(cpu int, name string, args ...string) *exec.Cmd {
	if cpu >= 0 && runtime.NumCPU() >= 2 {
		if taskset, err := exec.LookPath("taskset"); err == nil {
			return exec.Command(taskset, append([]string{"-c", fmt.Sprint(cpu), name}, args...)...)
		}
	}
	return exec.Command(name, args...)
}

// Engine is an engine serve process and the addresses its log named.
type Engine struct {
	Cmd   *exec.Cmd
	Addr  string // the listener ("serving addr=")
	Admin string // the [admin] listener; "" without one

	mu  sync.Mutex
	log strings.Builder // its stderr, kept for errors and tests
}

// StartEngine runs bin serve -c config (pinned to cpu, see Command) and
// waits, up to StartTimeout, for it to log that it serves, and for its
// admin listener when withAdmin.
func StartEngine(bin, config string, cpu int, withAdmin bool) (*Engine, error) {
	e := &Engine{Cmd: Command(cpu, bin, "serve", "-c", config)}
	stderr, err := e.Cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := e.Cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		said := false // ready is closed
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			l := sc.Text()
			e.mu.Lock()
			e.log.WriteString(l + "\n")
			if j := strings.Index(l, "msg=serving addr="); j >= 0 && e.Addr == "" {
				e.Addr = strings.Fields(l[j+len("msg=serving addr="):])[0]
			}
			if j := strings.Index(l, `msg="admin listener" addr=`); j >= 0 && e.Admin == "" {
				e.Admin = strings.Fields(l[j+len(`msg="admin listener" addr=`):])[0]
			}
			done := e.Addr != "" && (e.Admin != "" || !withAdmin)
			e.mu.Unlock()
			if done && !said {
				close(ready)
				said = true
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case <-ready:
		return e, nil
	case <-time.After(StartTimeout):
		e.Stop()
		return nil, fmt.Errorf("engine did not say it serves within %v:\n%s", StartTimeout, e.Log())
	}
}

// Log is what the engine has logged so far.
func (e *Engine) Log() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log.String()
}

// Stop asks the process to stop (SIGINT) and kills it after StopTimeout.
func (e *Engine) Stop() { Stop(e.Cmd, os.Interrupt) }

// Stop sends cmd's process sig (the server's graceful stop) and waits up
// to StopTimeout for it to exit, then kills it.
func Stop(cmd *exec.Cmd, sig os.Signal) {
	if cmd.Process == nil {
		return
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stopWithin(cmd.Process, sig, done)
}
