//go:build linux

package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/bench/peer"
	"github.com/mediaship/engine/internal/selfsigned"
)

// server is a server under test, driven through its configuration files
// and signals as an operator drives it.
type server interface {
	Name() string
	Protos() []string
	Start(gen int) error
	// Reload writes generation gen's configuration, asks for a reload,
	// and returns once new requests see it.
	Reload(gen int) error
	// Upgrade starts a new binary on the server's sockets and returns
	// once the old process has drained and exited.
	Upgrade() error
	Stop()
	Addr() string
	Log() string
}

// fixture is what both servers serve: per generation a root holding the
// small file, the big file (one inode, so every generation serves the
// same bytes) and gen.txt naming the generation; a certificate; and two
// upstreams, "A" and "B", that a route alternates between.
type fixture struct {
	dir        string
	addr       string // 127.0.0.1:port, free on TCP and UDP
	small      []byte
	bigSum     [32]byte
	bigSize    int64
	cert, key  string
	upA, upB   string
	upstreams  []*http.Server
	generation int
}

func newFixture(dir string, bigSize int64) (*fixture, error) {
	f := &fixture{dir: dir, bigSize: bigSize, small: make([]byte, 1024)}
	for i := range f.small {
		f.small[i] = byte('a' + i%26)
	}
	big := filepath.Join(dir, "big.bin")
	if err := writeRandom(big, bigSize); err != nil {
		return nil, err
	}
	h := blake3.New()
	bf, err := os.Open(big)
	if err != nil {
		return nil, err
	}
	io.Copy(h, bf)
	bf.Close()
	h.Sum(f.bigSum[:0])
	c, err := selfsigned.New("lifecycle", 24*time.Hour, "localhost")
	if err != nil {
		return nil, err
	}
	cp, kp, _ := selfsigned.PEM(c)
	f.cert, f.key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(f.cert, cp, 0o644)
	os.WriteFile(f.key, kp, 0o600)
	for _, name := range []string{"A", "B"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }),
			ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		f.upstreams = append(f.upstreams, srv)
		if name == "A" {
			f.upA = ln.Addr().String()
		} else {
			f.upB = ln.Addr().String()
		}
	}
	ports, err := peer.FreePorts(true)
	if err != nil {
		return nil, err
	}
	f.addr = "127.0.0.1:" + strconv.Itoa(ports[0])
	return f, nil
}

func (f *fixture) close() {
	for _, s := range f.upstreams {
		s.Close()
	}
}

// root makes generation gen's root and returns it.
func (f *fixture) root(gen int) (string, error) {
	r := filepath.Join(f.dir, fmt.Sprintf("gen-%d", gen))
	if _, err := os.Stat(r); err == nil {
		// Made already, and maybe served now: rewriting its files would
		// truncate them under the requests reading them.
		return r, nil
	}
	if err := os.MkdirAll(r, 0o755); err != nil {
		return "", err
	}
	os.WriteFile(filepath.Join(r, "small.bin"), f.small, 0o644)
	os.WriteFile(filepath.Join(r, "gen.txt"), []byte(strconv.Itoa(gen)), 0o644)
	if err := os.Link(filepath.Join(f.dir, "big.bin"), filepath.Join(r, "big.bin")); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return r, nil
}

// upstream is the route's upstream in generation gen.
func (f *fixture) upstream(gen int) (addr, name string) {
	if gen%2 == 0 {
		return f.upA, "A"
	}
	return f.upB, "B"
}

func (f *fixture) target(protos []string) Target {
	return Target{Addr: f.addr, Host: "localhost", Protos: protos, Small: "/small.bin", SmallBody: f.small,
		Big: "/big.bin", BigSum: f.bigSum, BigSize: f.bigSize}
}

// fresh asks path on a new HTTP/1.1 connection: what a client arriving
// after a reload sees.
func (f *fixture) fresh(path string) (int, string, error) {
	tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: "localhost", InsecureSkipVerify: true}, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://"+f.addr+path, nil)
	req.Host = "localhost"
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode, string(b), nil
}

// awaitGen waits until new connections are served generation gen's root
// and route (and limit, when limit is not nil). With strict, the route
// and limit must be gen's as soon as the root is: one reload is one
// change. nginx is not strict: its old workers go on accepting for a
// moment after a reload, so consecutive new connections can see
// different generations.
func (f *fixture) awaitGen(gen int, limit func(gen int) error, strict bool) error {
	_, want := f.upstream(gen)
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, g, err := f.fresh("/gen.txt")
		if err != nil || g != strconv.Itoa(gen) {
			last = fmt.Sprintf("gen.txt %q, %v", g, err)
			continue
		}
		// The same generation serves the route and the limit: a
		// reload is one change, never half of one.
		if _, up, err := f.fresh("/up/x"); err != nil || up != want {
			last = fmt.Sprintf("generation %d: the route answered %q (%v), want upstream %s", gen, up, err, want)
			if strict {
				return errors.New(last)
			}
			continue
		}
		if limit != nil {
			if err := limit(gen); err != nil {
				if strict {
					return err
				}
				last = err.Error()
				continue
			}
		}
		return nil
	}
	return fmt.Errorf("generation %d not served within 15 s: %s", gen, last)
}

func writeRandom(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// A stream from BLAKE3's XOF: reproducible and incompressible.
	x := blake3.New().Digest()
	_, err = io.CopyN(f, x, n)
	return err
}

// pidAlive reports whether process pid exists.
func pidAlive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// awaitExit waits up to d for process pid to exit.
func awaitExit(pid int, d time.Duration) error {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !pidAlive(pid) {
			return nil
		}
	}
	return fmt.Errorf("process %d still runs after %s", pid, d)
}

func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// engineServer is the engine, started from bin.
type engineServer struct {
	f      *fixture
	bin    string
	protos []string
	cmd    *exec.Cmd
	reaped chan struct{}
	pid    int
}

func (e *engineServer) Name() string     { return "engine" }
func (e *engineServer) Protos() []string { return e.protos }
func (e *engineServer) Addr() string     { return e.f.addr }
func (e *engineServer) Log() string {
	b, _ := os.ReadFile(filepath.Join(e.f.dir, "engine.log"))
	return string(b)
}
func (e *engineServer) conf() string    { return filepath.Join(e.f.dir, "engine.toml") }
func (e *engineServer) pidFile() string { return filepath.Join(e.f.dir, "engine.pid") }

// maxURI is generation gen's limits.max_uri_bytes: the limit each
// reload changes.
func maxURI(gen int) int { return 2000 + gen }

func (e *engineServer) write(gen int) error {
	root, err := e.f.root(gen)
	if err != nil {
		return err
	}
	up, _ := e.f.upstream(gen)
	c := fmt.Sprintf(`listen = %q
workers = 2
pid_file = %q
shutdown_grace = "60s"
[kernel]
ktls = "auto"
[limits]
max_uri_bytes = %d
[[sites]]
domain = "localhost"
root = %q
[sites.tls]
cert = %q
key = %q
[reverse_proxy]
enabled = true
[[reverse_proxy.routes]]
domain = "localhost"
path_prefix = "/up/"
upstreams = [%q]
`, e.f.addr, e.pidFile(), maxURI(gen), root, e.f.cert, e.f.key, up)
	return os.WriteFile(e.conf(), []byte(c), 0o644)
}

func (e *engineServer) Start(gen int) error {
	if err := e.write(gen); err != nil {
		return err
	}
	lf, err := os.Create(filepath.Join(e.f.dir, "engine.log"))
	if err != nil {
		return err
	}
	e.cmd = exec.Command(e.bin, "serve", "-c", e.conf())
	e.cmd.Stdout, e.cmd.Stderr = lf, lf
	if err := e.cmd.Start(); err != nil {
		return err
	}
	e.reaped = make(chan struct{})
	go func() { e.cmd.Wait(); lf.Close(); close(e.reaped) }()
	e.pid = e.cmd.Process.Pid // Stop stops it whatever happens next
	for deadline := time.Now().Add(peer.StartTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if readPid(e.pidFile()) == e.cmd.Process.Pid {
			return e.f.awaitGen(gen, e.limit, true)
		}
	}
	return fmt.Errorf("engine did not write its pid file within %s:\n%s", peer.StartTimeout, e.Log())
}

// limit checks that generation gen's max_uri_bytes is the one applied.
func (e *engineServer) limit(gen int) error {
	for _, n := range []int{maxURI(gen), maxURI(gen) + 1} {
		code, _, err := e.f.fresh("/" + strings.Repeat("u", n-1))
		if err != nil {
			return err
		}
		if tooLong := code == http.StatusRequestURITooLong; tooLong != (n > maxURI(gen)) {
			return fmt.Errorf("generation %d: a %d-byte target got %d (max_uri_bytes = %d)", gen, n, code, maxURI(gen))
		}
	}
	return nil
}

func (e *engineServer) Reload(gen int) error {
	if err := e.write(gen); err != nil {
		return err
	}
	if err := syscall.Kill(e.pid, syscall.SIGHUP); err != nil {
		return err
	}
	return e.f.awaitGen(gen, e.limit, true)
}

// BrokenReload writes a configuration that fails validation and asks
// for a reload: the server must refuse it and keep serving gen.
func (e *engineServer) BrokenReload(gen int) error {
	if err := os.WriteFile(e.conf(), []byte(fmt.Sprintf("listen = %q\n[limits]\nmax_uri_bytes = \"many\"\n", e.f.addr)), 0o644); err != nil {
		return err
	}
	if err := syscall.Kill(e.pid, syscall.SIGHUP); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(e.Log(), "configuration not reloaded") {
			if !strings.Contains(e.Log(), "engine.toml:3: limits.max_uri_bytes") {
				return fmt.Errorf("the refusal does not name the file, line and key:\n%s", e.Log())
			}
			if err := e.f.awaitGen(gen, e.limit, true); err != nil {
				return fmt.Errorf("after a refused reload: %w", err)
			}
			return e.write(gen)
		}
	}
	return errors.New("no log line refusing the broken configuration")
}

func (e *engineServer) Upgrade() error {
	old := e.pid
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if p := readPid(e.pidFile()); p != old && p != 0 {
			e.pid = p
			return awaitExit(old, 90*time.Second)
		}
	}
	return fmt.Errorf("no new process took over within a minute:\n%s", e.Log())
}

func (e *engineServer) Stop() {
	if pidAlive(e.pid) {
		syscall.Kill(e.pid, syscall.SIGTERM)
		if awaitExit(e.pid, peer.StopTimeout) != nil {
			syscall.Kill(e.pid, syscall.SIGKILL)
		}
	}
	if e.cmd != nil {
		select {
		case <-e.reaped:
		case <-time.After(peer.StopTimeout):
			e.cmd.Process.Kill()
		}
	}
}

// nginxServer is Debian's nginx, reloaded with HUP and upgraded with
// USR2 then QUIT to the old master (its documented binary upgrade).
type nginxServer struct {
	f      *fixture
	bin    string
	protos []string
	pid    int
}

func (n *nginxServer) Name() string { return "nginx" }

// Protos leaves out h3: Debian 12's nginx 1.22 has no HTTP/3.
func (n *nginxServer) Protos() []string {
	var out []string
	for _, p := range n.protos {
		if p != "h3" {
			out = append(out, p)
		}
	}
	return out
}
func (n *nginxServer) Addr() string { return n.f.addr }
func (n *nginxServer) Log() string {
	b, _ := os.ReadFile(filepath.Join(n.f.dir, "nginx-error.log"))
	return string(b)
}
func (n *nginxServer) conf() string    { return filepath.Join(n.f.dir, "nginx.conf") }
func (n *nginxServer) pidFile() string { return filepath.Join(n.f.dir, "nginx.pid") }

func (n *nginxServer) write(gen int) error {
	root, err := n.f.root(gen)
	if err != nil {
		return err
	}
	up, _ := n.f.upstream(gen)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	d := n.f.dir
	c := fmt.Sprintf(`%s
worker_processes 2;
pid %s;
error_log %s/nginx-error.log warn;
# Without it an old worker lives as long as a client keeps its HTTP/2
# connection busy (it is never idle, so never closed), and a binary
# upgrade's old master never exits; the engine's GOAWAY moves such
# clients on. 10 s: the engine's drains here take 2 to 6 s.
worker_shutdown_timeout 10s;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    client_body_temp_path %[3]s/body;
    proxy_temp_path %[3]s/proxy;
    fastcgi_temp_path %[3]s/fastcgi;
    uwsgi_temp_path %[3]s/uwsgi;
    scgi_temp_path %[3]s/scgi;
    keepalive_requests 1000000;
    server {
        listen %s ssl http2;
        server_name localhost;
        ssl_certificate %s;
        ssl_certificate_key %s;
        ssl_protocols TLSv1.3;
        client_max_body_size %dk;
        root %s;
        location /up/ { proxy_pass http://%s; }
    }
}
`, user, n.pidFile(), d, n.f.addr, n.f.cert, n.f.key, gen+1, root, up)
	return os.WriteFile(n.conf(), []byte(c), 0o644)
}

func (n *nginxServer) Start(gen int) error {
	if err := n.write(gen); err != nil {
		return err
	}
	// A daemon, as deployed: the binary upgrade's new master then
	// outlives the old one without a foreground parent in the way.
	if out, err := exec.Command(n.bin, "-c", n.conf(), "-e", filepath.Join(n.f.dir, "nginx-error.log")).CombinedOutput(); err != nil {
		return fmt.Errorf("nginx: %v: %s", err, out)
	}
	for deadline := time.Now().Add(peer.StartTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n.pid = readPid(n.pidFile()); n.pid != 0 {
			return n.f.awaitGen(gen, nil, false)
		}
	}
	return errors.New("nginx wrote no pid file")
}

func (n *nginxServer) Reload(gen int) error {
	if err := n.write(gen); err != nil {
		return err
	}
	if err := syscall.Kill(n.pid, syscall.SIGHUP); err != nil {
		return err
	}
	return n.f.awaitGen(gen, nil, false)
}

func (n *nginxServer) Upgrade() error {
	old := n.pid
	if err := syscall.Kill(old, syscall.SIGUSR2); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if p := readPid(n.pidFile()); p != old && p != 0 {
			n.pid = p
			// The new master's workers accept now; the old master
			// stops its workers gracefully and exits.
			syscall.Kill(old, syscall.SIGQUIT)
			return awaitExit(old, 90*time.Second)
		}
	}
	return errors.New("nginx: no new master after USR2")
}

func (n *nginxServer) Stop() {
	if pidAlive(n.pid) {
		syscall.Kill(n.pid, syscall.SIGQUIT)
		if awaitExit(n.pid, peer.StopTimeout) != nil {
			syscall.Kill(n.pid, syscall.SIGKILL)
		}
	}
}
