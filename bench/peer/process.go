package peer

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Process is a server started by Start: its stdout and stderr go to a
// log file, and Done is closed once it has exited. Only the goroutine
// Start starts calls Cmd.Wait; use Stop, not the package's Stop, to end
// it.
type Process struct {
	Cmd *exec.Cmd
	Log string // the file its stdout and stderr go to

	done chan struct{}
}

// Start runs cmd (made with Command, or exec.Command) with its output in
// the file logFile, created anew. On Linux the process is sent SIGTERM
// should the harness die without stopping it (see dieWithParent).
func Start(cmd *exec.Cmd, logFile string) (*Process, error) {
	lf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	p := &Process{Cmd: cmd, Log: logFile, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends the process sig (the server's graceful stop) and waits up
// to StopTimeout for it to exit, then kills it. Stopping a stopped
// process, or a nil one, does nothing.
func (p *Process) Stop(sig os.Signal) {
	if p == nil {
		return
	}
	stopWithin(p.Cmd.Process, sig, p.done)
}

// Tail is the last n bytes of the process's log, trimmed, for an error
// message.
func (p *Process) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// stopWithin signals p and waits until done is closed, for StopTimeout
// at most; then it kills p and waits for done.
func stopWithin(p *os.Process, sig os.Signal, done <-chan struct{}) {
	p.Signal(sig)
	select {
	case <-done:
	case <-time.After(StopTimeout):
		p.Kill()
		<-done
	}
}

// InstallDebian installs, with apt-get (through sudo when not root), the
// Debian packages of the tools (a tool's name to its package's) that are
// not on the PATH; it says which on log first.
func InstallDebian(tools map[string]string, logf func(format string, args ...any)) error {
	var missing []string
	for tool, pkg := range tools {
		if _, err := exec.LookPath(tool); err != nil && !slices.Contains(missing, pkg) {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	logf("installing %s (Debian packages)", strings.Join(missing, ", "))
	args := append([]string{"apt-get", "install", "-y", "-qq", "--no-install-recommends"}, missing...)
	if os.Getuid() != 0 {
		args = append([]string{"sudo"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %v\n%s", strings.Join(missing, " "), err, out)
	}
	return nil
}
