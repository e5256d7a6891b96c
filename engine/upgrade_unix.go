//go:build unix

package engine

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startSuccessor starts exe with args on socks, passed as systemd passes
// sockets (from descriptor 3, LISTEN_FDS and LISTEN_FDNAMES) with a pipe
// after them on which the new process says it serves, and waits up to
// wait for it to say so. It returns the new process's ID; on an error
// the new process, if any, has been killed.
//
// The descriptors are passed with syscall.ForkExec rather than os/exec,
// whose ExtraFiles call File.Fd: that would put each socket, shared with
// the loops of this process that still accept on it, into blocking mode.
func startSuccessor(exe string, args []string, socks *Sockets, wait time.Duration) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	files, names := socks.Files()
	fds := []uintptr{0, 1, 2}
	for _, f := range append(files, w) {
		rawFd(f, func(fd int) { fds = append(fds, uintptr(fd)) })
	}
	if len(fds) != 3+len(files)+1 {
		w.Close()
		return 0, errors.New("a socket to hand over is closed")
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", handoverFrom, readyFDEnv:
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"LISTEN_FDS="+strconv.Itoa(len(files)),
		"LISTEN_FDNAMES="+names,
		handoverFrom+"="+strconv.Itoa(os.Getpid()),
		readyFDEnv+"="+strconv.Itoa(3+len(files)))
	// A process group of its own: if it fails, everything it started
	// goes with it, and nothing it started keeps the sockets.
	pid, err := syscall.ForkExec(exe, args, &syscall.ProcAttr{Env: env, Files: fds, Sys: &syscall.SysProcAttr{Setpgid: true}})
	w.Close()
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", exe, err)
	}
	proc, _ := os.FindProcess(pid)
	exited := make(chan struct{})
	go func() {
		// Reaped here when it fails; once it serves, this process
		// exits after its drain and the new one is reparented.
		proc.Wait()
		close(exited)
	}()
	// Ready when it says so; failed when it exits first (a process it
	// started may hold the pipe open after it), or after wait.
	said := make(chan error, 1)
	go func() {
		r.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 16)
		n, err := io.ReadAtLeast(r, buf, len("ready\n"))
		if err == nil && string(buf[:n]) != "ready\n" {
			err = fmt.Errorf("it said %q, not ready", buf[:n])
		}
		said <- err
	}()
	timedOut := false
	select {
	case err := <-said:
		if err == nil {
			return pid, nil
		}
		timedOut = errors.Is(err, os.ErrDeadlineExceeded)
	case <-exited:
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	proc.Kill()
	<-exited
	if timedOut {
		return 0, fmt.Errorf("the new process (%s, pid %d) did not report serving within %s; stopped it", exe, pid, wait)
	}
	return 0, fmt.Errorf("the new process (%s, pid %d) exited before it served: its log says why", exe, pid)
}

// signalReload asks process pid to reload (SIGHUP).
func signalReload(pid int) error { return syscall.Kill(pid, syscall.SIGHUP) }
