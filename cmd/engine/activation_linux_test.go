package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/selfsigned"
	"golang.org/x/sys/unix"
)

// TestSocketActivation passes the engine its listening sockets as
// systemd does (descriptors from 3, LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID
// naming the process that receives them) and listens on NOTIFY_SOCKET as
// systemd does for Type=notify: the engine serves on the sockets it was
// given (it could not bind their ports itself: they are held without
// SO_REUSEPORT), one by its name and one, unnamed, by its address;
// reports READY=1 once it serves, RELOADING=1 then READY=1 around a
// reload, and STOPPING=1 as it drains.
func TestSocketActivation(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "engine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	for _, r := range []string{"a", "b"} {
		os.Mkdir(filepath.Join(dir, r), 0o755)
		os.WriteFile(filepath.Join(dir, r, "x.txt"), []byte(r), 0o644)
	}
	web, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	webF, _ := web.(*net.TCPListener).File()
	adminF, _ := admin.(*net.TCPListener).File()
	web.Close()
	admin.Close()
	conf := filepath.Join(dir, "engine.toml")
	write := func(root string) {
		os.WriteFile(conf, []byte(fmt.Sprintf("listen = %q\nworkers = 2\nroot = %q\n[admin]\nlisten = %q\n",
			web.Addr(), filepath.Join(dir, root), admin.Addr())), 0o644)
	}
	write("a")

	sock := filepath.Join(dir, "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	states := make(chan string, 32)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := nc.ReadFromUnix(buf)
			if err != nil {
				close(states)
				return
			}
			states <- string(buf[:n])
		}
	}()
	await := func(state string) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case s, ok := <-states:
				if !ok {
					t.Fatalf("notify socket closed before %q", state)
				}
				if strings.Contains("\n"+s+"\n", "\n"+state+"\n") {
					return
				}
			case <-timeout:
				t.Fatalf("no %q on the notify socket", state)
			}
		}
	}

	// sh's exec keeps its process ID, which LISTEN_PID names, as
	// systemd sets it after forking.
	cmd := exec.Command("sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, bin, "serve", "-c", conf)
	cmd.ExtraFiles = []*os.File{webF, adminF}
	cmd.Env = append(os.Environ(), "LISTEN_FDS=2", "LISTEN_FDNAMES=listen:engine-admin.socket", "NOTIFY_SOCKET="+sock)
	logb := &syncWriter{w: &strings.Builder{}}
	cmd.Stderr = logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	webF.Close()
	adminF.Close()
	defer cmd.Process.Kill()
	await("READY=1")
	get := func(url string) string {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v\n%s", url, err, logb.String())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	if got := get("http://" + web.Addr().String() + "/x.txt"); got != "a" {
		t.Errorf("served %q, want a", got)
	}
	if got := get("http://" + admin.Addr().String() + "/pid"); got != fmt.Sprint(cmd.Process.Pid) {
		t.Errorf("admin /pid = %q, want %d", got, cmd.Process.Pid)
	}
	write("b")
	cmd.Process.Signal(syscall.SIGHUP)
	await("RELOADING=1")
	await("READY=1")
	if got := get("http://" + web.Addr().String() + "/x.txt"); got != "b" {
		t.Errorf("after the reload: %q, want b", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	await("STOPPING=1")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit: %v\n%s", err, logb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not stop")
	}
	if strings.Contains(logb.String(), "not one this configuration listens on") {
		t.Errorf("a passed socket was left unused:\n%s", logb.String())
	}
}

// syncWriter serializes writes to w (the child's stderr is copied from
// another goroutine than the test's reads).
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// TestReloadAndUpgradeCommands runs engine reload and engine upgrade
// against a running server found by its pid file: a reload it applies
// exits 0, one it refuses (a change of workers) exits 1 with its reason;
// an upgrade to a binary that is no engine (a script that leaves a
// process behind and exits) exits 1 within seconds, the old process
// serves on, and nothing the script started holds the port.
func TestReloadAndUpgradeCommands(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "engine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	os.Mkdir(filepath.Join(dir, "www"), 0o755)
	os.WriteFile(filepath.Join(dir, "www", "x.txt"), []byte("x"), 0o644)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	conf := filepath.Join(dir, "engine.toml")
	write := func(workers int) {
		os.WriteFile(conf, []byte(fmt.Sprintf("listen = %q\nworkers = %d\nroot = \"www\"\npid_file = \"run/engine.pid\"\n", addr, workers)), 0o644)
	}
	write(2)
	cmd := exec.Command(bin, "serve", "-c", conf)
	logb := &syncWriter{w: &strings.Builder{}}
	cmd.Stderr = logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pidFile := filepath.Join(dir, "run", "engine.pid")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(pidFile); strings.TrimSpace(string(b)) == fmt.Sprint(cmd.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid file:\n%s", logb.String())
		}
	}
	control := func(args ...string) (int, string) {
		var out, errb strings.Builder
		code := run(args, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := control("reload", "-c", conf); code != 0 || !strings.Contains(out, "reloaded") {
		t.Errorf("engine reload = %d: %s", code, out)
	}
	write(3)
	if code, out := control("reload", "-c", conf); code != 1 || !strings.Contains(out, "workers changed") {
		t.Errorf("engine reload of a changed workers = %d: %s", code, out)
	}
	write(2)
	// Another file than the server reads: refused, naming the server's.
	other := filepath.Join(dir, "other.toml")
	b, _ := os.ReadFile(conf)
	os.WriteFile(other, b, 0o644)
	if code, out := control("reload", "-c", other); code != 1 || !strings.Contains(out, "reads "+conf) {
		t.Errorf("engine reload -c another file = %d: %s", code, out)
	}
	// A pid file naming another process: nothing is signalled.
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	stale := filepath.Join(dir, "stale.pid")
	os.WriteFile(stale, []byte(fmt.Sprint(sleeper.Process.Pid)), 0o644)
	if code, out := control("reload", "-c", conf, "--pid-file", stale); code != 1 || !strings.Contains(out, "not an engine serve") {
		t.Errorf("engine reload with a stale pid file = %d: %s", code, out)
	}
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the process a stale pid file named was signalled: %v", err)
	}

	// Not an engine: a script that starts a process holding what it was
	// passed, one in a session of its own (out of its process group's
	// reach), and exits.
	script := "#!/bin/sh\nsleep 300 &\nsetsid sleep 301 &\nexit 1\n"
	os.WriteFile(bin+".new", []byte(script), 0o755)
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if code, out := control("upgrade", "-c", conf, "--wait", "30s"); code != 1 || !strings.Contains(out, "not upgraded") {
		t.Errorf("engine upgrade to a script = %d: %s", code, out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("engine upgrade took %s to report a new process that exited at once", d)
	}
	resp, err := http.Get("http://" + addr + "/x.txt")
	if err != nil {
		t.Fatalf("the old process after a failed upgrade: %v", err)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("did not stop")
	}
	// The port is free: nothing the script started kept the socket.
	if l, err := net.Listen("tcp", addr); err != nil {
		t.Errorf("after the stop, %s: %v (a process the failed upgrade started holds it)", addr, err)
	} else {
		l.Close()
	}
}

// TestUpgradeKeepsLocalhost: after engine upgrade, a localhost listener's
// sockets in the new process, TCP and QUIC alike, are still bound to the
// loopback device. Before the fix, the new process named its handed-over
// TCP socket by its address, [::], and bound its QUIC socket there: on
// every address of the host.
func TestUpgradeKeepsLocalhost(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "engine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cert, err := selfsigned.New("localhost", 24*time.Hour, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cp, kp, _ := selfsigned.PEM(cert)
	os.WriteFile(filepath.Join(dir, "cert.pem"), cp, 0o644)
	os.WriteFile(filepath.Join(dir, "key.pem"), kp, 0o600)
	os.Mkdir(filepath.Join(dir, "www"), 0o755)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := filepath.Join(dir, "engine.toml")
	os.WriteFile(conf, []byte(fmt.Sprintf(`listen = "localhost:%d"
pid_file = "run/engine.pid"
[kernel]
ktls = "auto"
[[sites]]
domain = "localhost"
default = true
root = "www"
[sites.tls]
cert = "cert.pem"
key = "key.pem"
`, port)), 0o644)
	cmd := exec.Command(bin, "serve", "-c", conf)
	logb := &syncWriter{w: &strings.Builder{}}
	cmd.Stderr = logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pidFile := filepath.Join(dir, "run", "engine.pid")
	waitPid := func(not int) int {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			b, _ := os.ReadFile(pidFile)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != not {
				return pid
			}
			if time.Now().After(deadline) {
				t.Fatalf("no new pid in the pid file:\n%s", logb.String())
			}
		}
	}
	old := waitPid(0)
	checkSockets(t, old, port)
	var out, errb strings.Builder
	if code := run([]string{"upgrade", "-c", conf, "--wait", "30s"}, &out, &errb); code != 0 {
		t.Fatalf("engine upgrade = %d: %s%s", code, out.String(), errb.String())
	}
	pid := waitPid(old)
	defer syscall.Kill(pid, syscall.SIGKILL)
	checkSockets(t, pid, port)
}

// checkSockets asserts that every socket of process pid bound to port
// is bound to the loopback device, and that there is a TCP and a UDP
// one. It takes copies of them with pidfd_getfd (Linux 5.6; the process
// is this test's child, or was started by one).
func checkSockets(t *testing.T, pid, port int) {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(pidfd)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[int]int{}
	for _, e := range ents {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if !strings.HasPrefix(target, "socket:") {
			continue
		}
		n, _ := strconv.Atoi(e.Name())
		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		if err != nil {
			t.Fatalf("pidfd_getfd %d/%d: %v", pid, n, err)
		}
		sa, err := unix.Getsockname(fd)
		typ, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
		dev, _ := unix.GetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE)
		unix.Close(fd)
		p := -1
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			p = a.Port
		case *unix.SockaddrInet6:
			p = a.Port
		}
		if err != nil || p != port {
			continue
		}
		kinds[typ]++
		if dev != "lo" {
			t.Errorf("process %d: a socket (type %d) on port %d is bound to device %q, want lo", pid, typ, port, dev)
		}
	}
	if kinds[unix.SOCK_STREAM] == 0 || kinds[unix.SOCK_DGRAM] == 0 {
		t.Errorf("process %d: sockets on port %d by type %v, want TCP and UDP", pid, port, kinds)
	}
}
