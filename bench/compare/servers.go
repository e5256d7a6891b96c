package main

import (
	"crypto/tls"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/bench/peer"
)

// caddyVersion is the Caddy measured when --caddy names none: pinned, so
// that pages generated months apart compare the same peer.
const caddyVersion = "v2.11.9"

// A server under test: its URLs per protocol and its processes.
type server struct {
	id    string // as --servers names it: engine, baseline, nginx, caddy
	name  string // the column header
	sha   string // an engine binary's SHA-256, when the page names it
	about string // what the page says it is: version and configuration (an engine's configuration only)
	// binary is what an engine binary was built from, or says it was;
	// nil for the peers.
	binary *engineBinary
	plain  string // base URL, http://
	tls    string // base URL, https:// (h1, h2)
	tlsNR  string // https without session resumption (new connection rows); "" = tls
	h3     string // base URL for HTTP/3, "" if not spoken
	h2     bool
	proc   *proc
	// The engine serves plain and TLS from two processes; the TLS one is
	// measured on TLS rows.
	tlsProc *proc
}

// proc is a started server process: a peer.Process, whose Done is closed
// once it has exited, with what this harness asks of it (to answer, to
// stop).
type proc struct{ *peer.Process }

// peerTemplates is where the nginx and Caddy templates come from: the
// embedded peers/ folder, or the one --peers names.
type peerTemplates struct {
	fs   fs.FS
	name string // as the page cites it
}

// fill reads a template and replaces its placeholders, given as pairs
// (placeholder, value). A template that lacks one (an old copy passed
// with --peers, with fixed ports) is refused rather than run on ports the
// harness does not know.
func (p peerTemplates) fill(file string, pairs ...string) (string, error) {
	b, err := fs.ReadFile(p.fs, file)
	if err != nil {
		return "", fmt.Errorf("peer template: %w", err)
	}
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(string(b), pairs[i]) {
			return "", fmt.Errorf("peer template %s/%s lacks %s", p.name, file, pairs[i])
		}
	}
	return strings.NewReplacer(pairs...).Replace(string(b)), nil
}

// errPortTaken: a server could not bind a port that was free when it was
// chosen (another process took it in between). Choosing again helps.
var errPortTaken = errors.New("compare: a port was taken before the server bound it")

// startOnFreePorts runs start, which picks its own free ports, and runs it
// again with new ones when a port was taken in the meantime.
func startOnFreePorts(start func() (*server, error)) (*server, error) {
	const attempts = 3
	for i := 1; ; i++ {
		s, err := start()
		if err == nil || !errors.Is(err, errPortTaken) || i == attempts {
			return s, err
		}
		log.Printf("%v; choosing other ports", err)
	}
}

// portTaken reports whether a server's log says it could not bind. nginx:
// "bind() to 127.0.0.1:8080 failed (98: Address already in use)"; Go
// servers: "listen tcp 127.0.0.1:8080: bind: address already in use".
func portTaken(logText string) bool {
	return strings.Contains(strings.ToLower(logText), "address already in use")
}

// startProc runs a server with its output in logFile and env added to
// this harness's environment; it inherits the harness's CPU affinity and
// limits, and is not pinned.
func startProc(logFile string, name string, args []string, env ...string) (*proc, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	p, err := peer.Start(cmd, logFile)
	if err != nil {
		return nil, err
	}
	return &proc{p}, nil
}

// stop asks the process to end (SIGINT), and kills it if it has not
// within peer.StopTimeout. Stopping a stopped process, or a nil one, does
// nothing.
func (p *proc) stop() {
	if p == nil {
		return
	}
	p.Stop(os.Interrupt)
}

// tail is the end of the process's log, for an error message.
func (p *proc) tail() string { return p.Tail(600) }

// waitReady polls a URL until it answers 200, and fails early when the
// process exits: with errPortTaken when its log says a port was taken.
func (p *proc) waitReady(url string) error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer c.CloseIdleConnections()
	exited := func() error {
		if !p.Exited() {
			return nil
		}
		name := filepath.Base(p.Cmd.Path)
		if t := p.tail(); portTaken(t) {
			return fmt.Errorf("%s exited: %w:\n%s", name, errPortTaken, t)
		}
		return fmt.Errorf("%s exited (%v):\n%s", name, p.Cmd.ProcessState, p.tail())
	}
	// nginx retries a failed bind five times, 500 ms apart, before it
	// gives up; 15 s leaves room for that and a slow first start.
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		if err := exited(); err != nil {
			return err
		}
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				// Something answered; make sure it was this process and
				// not one that holds the port it failed to bind.
				time.Sleep(100 * time.Millisecond)
				return exited()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer within 15 s:\n%s", url, p.tail())
}

// where lists the server's URLs, for the log.
func (s *server) where() string {
	parts := []string{s.plain, s.tls}
	if s.tlsNR != "" {
		parts = append(parts, s.tlsNR+" (no resumption)")
	}
	if s.h3 != "" {
		parts = append(parts, s.h3+" (HTTP/3, UDP)")
	}
	return strings.Join(parts, ", ")
}

// pidFor is the process serving a row.
func (s *server) pidFor(r row) int {
	if r.tls && s.tlsProc != nil {
		return s.tlsProc.Cmd.Process.Pid
	}
	return s.proc.Cmd.Process.Pid
}

// exited says which of the server's processes has exited, with the end
// of its log; "" while all of them run.
func (s *server) exited() string {
	for _, p := range []*proc{s.proc, s.tlsProc} {
		if p != nil && p.Exited() {
			return fmt.Sprintf("%s exited during the run (%v): %s", filepath.Base(p.Cmd.Path), p.Cmd.ProcessState, oneLine(p.tail()))
		}
	}
	return ""
}

func (s *server) stop() {
	s.tlsProc.stop()
	s.proc.stop()
}

// goBuild builds the Go command in pkg (the Go net/http peer in
// ./bench/compare/gohttp) of the repository into work/name, with the Go
// toolchain running this harness. The engine is built by
// bench.BuildEngine, which stamps it with the commit it was built from.
func goBuild(repo, work, name, pkg string) (string, error) {
	bin := filepath.Join(work, name)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build: %v\n%s", err, out)
	}
	return bin, nil
}

// startEngine runs an engine binary as two processes, plain and TLS, on
// the fixtures in work. The engine under test and its baseline are both
// started here, so they get the same configuration (only the ports and
// the file names, prefixed with spec.id, differ), the same files, and the
// same environment, CPU affinity and limits (inherited from this harness
// by startProc).
func startEngine(spec engineSpec, work string) (*server, error) {
	ports, err := peer.FreePorts(false, true) // plain; TLS, with HTTP/3 on UDP at the same number
	if err != nil {
		return nil, err
	}
	plainAddr, tlsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	www := filepath.Join(work, "www")
	cfg := fmt.Sprintf("listen = %q\n[[sites]]\ndomain = \"*\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n%s[kernel]\nktls = \"auto\"\n",
		tlsAddr, www, filepath.Join(work, "cert.pem"), filepath.Join(work, "key.pem"), spec.keyExchangesLine())
	cfgPath := filepath.Join(work, spec.id+"-tls.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	binary, err := newEngineBinary(spec)
	if err != nil {
		return nil, err
	}
	about := "two processes: plain, and TLS with HTTP/1.1, HTTP/2 and HTTP/3; `ktls = \"auto\"`" + spec.keyExchangesNote()
	s := &server{id: spec.id, sha: binary.sha, name: spec.name, plain: "http://" + plainAddr, tls: "https://" + tlsAddr, h2: true, h3: "https://" + tlsAddr,
		about: about, binary: binary}
	if s.proc, err = startProc(filepath.Join(work, spec.id+"-plain.log"), spec.bin, []string{"serve", "--root", www, "--listen", plainAddr}); err != nil {
		return nil, err
	}
	if s.tlsProc, err = startProc(filepath.Join(work, spec.id+"-tls.log"), spec.bin, []string{"serve", "-c", cfgPath}); err != nil {
		s.stop()
		return nil, err
	}
	if err := s.proc.waitReady(s.plain + "/1k.bin"); err != nil {
		s.stop()
		return nil, err
	}
	if err := s.tlsProc.waitReady(s.tls + "/1k.bin"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startNginx runs the system's nginx (Debian's package) with the peers'
// template; withKTLS offers it kernel TLS, as the template allows.
func startNginx(work string, peers peerTemplates, withKTLS bool) (*server, error) {
	if _, err := exec.LookPath("nginx"); err != nil {
		return nil, fmt.Errorf("nginx not installed: install Debian's package with `apt-get install -y nginx` (as root) and run this again")
	}
	ports, err := peer.FreePorts(false, false, false) // plain, TLS, TLS without resumption
	if err != nil {
		return nil, err
	}
	ktls, ktlsNote := nginxKTLS(withKTLS)
	conf, err := peers.fill("nginx.conf.tmpl", "__DIR__", work, "__KTLS__", ktls, "__PLAIN_PORT__", strconv.Itoa(ports[0]),
		"__TLS_PORT__", strconv.Itoa(ports[1]), "__TLS_NR_PORT__", strconv.Itoa(ports[2]))
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"run", "logs"} {
		os.MkdirAll(filepath.Join(work, d), 0o755)
	}
	path := filepath.Join(work, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	version, _ := exec.Command("nginx", "-v").CombinedOutput()
	s := &server{id: "nginx", name: "nginx", h2: true,
		plain: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), tls: fmt.Sprintf("https://127.0.0.1:%d", ports[1]), tlsNR: fmt.Sprintf("https://127.0.0.1:%d", ports[2]),
		about: strings.TrimSpace(string(version)) + " (" + peers.name + "/nginx.conf.tmpl: sendfile on, access log off; HTTP/2 on TLS; " + ktlsNote + ")"}
	if s.proc, err = startProc(filepath.Join(work, "nginx.log"), "nginx", []string{"-c", path}); err != nil {
		return nil, err
	}
	// The master binds every listen address before it serves any, so one
	// answering means all are bound.
	if err := s.proc.waitReady(s.plain + "/1k.bin"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// nginxKTLS is the __KTLS__ directive for an nginx template, and what
// the page says of it.
func nginxKTLS(offer bool) (directive, note string) {
	if offer {
		return "ssl_conf_command Options KTLS;", "kernel TLS offered with `ssl_conf_command Options KTLS`"
	}
	return "", "kernel TLS not offered: the kernel lacks it"
}

func startCaddy(work string, peers peerTemplates, bin string) (*server, error) {
	ports, err := peer.FreePorts(false, true) // plain; TLS, with HTTP/3 on UDP at the same number
	if err != nil {
		return nil, err
	}
	conf, err := peers.fill("Caddyfile.tmpl", "__DIR__", work, "__PLAIN_PORT__", strconv.Itoa(ports[0]), "__TLS_PORT__", strconv.Itoa(ports[1]))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(work, "Caddyfile")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	tlsURL := fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	s := &server{id: "caddy", name: "caddy", plain: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), tls: tlsURL, h3: tlsURL, h2: true,
		about: "caddy " + caddyAbout(bin) + " (" + peers.name + "/Caddyfile.tmpl: h1 h2 h3; automatic HTTPS and admin endpoint off)"}
	data := filepath.Join(work, "caddy-data")
	if s.proc, err = startProc(filepath.Join(work, "caddy.log"), bin, []string{"run", "--config", path, "--adapter", "caddyfile"},
		"XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+data); err != nil {
		return nil, err
	}
	if err := s.waitServing(); err != nil {
		return nil, err
	}
	return s, nil
}

// waitServing waits until the server answers on its plain and TLS URLs,
// and stops it if it never does.
func (s *server) waitServing() error {
	for _, u := range []string{s.plain, s.tls} {
		if err := s.proc.waitReady(u + "/1k.bin"); err != nil {
			s.stop()
			return err
		}
	}
	return nil
}

// caddyAbout is the binary's version: a caddy built with go install says
// "unknown" to "caddy version", but its build information still names the
// module version.
func caddyAbout(bin string) string {
	if bi, err := buildinfo.ReadFile(bin); err == nil && bi.Main.Version != "" {
		return bi.Main.Version + ", " + bi.GoVersion
	}
	if out, err := exec.Command(bin, "version").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "(version unknown)"
}

// cachedCaddy is where findCaddy builds Caddy caddyVersion, and looks
// for it before building: a folder of the user's cache directory per
// version.
func cachedCaddy() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory to build Caddy into (%v); name a binary with --caddy PATH", err)
	}
	return filepath.Join(cache, "engine-compare", "caddy-"+caddyVersion, "caddy"), nil
}

// findCaddy returns the caddy binary to measure: the one named, or else
// Caddy caddyVersion, built once from the Go module proxy into the user's
// cache directory and reused from there.
func findCaddy(named string) (string, error) {
	if named != "" {
		if _, err := os.Stat(named); err != nil {
			return "", fmt.Errorf("--caddy/$CADDY: %w", err)
		}
		return named, nil
	}
	bin, err := cachedCaddy()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(bin)
	if bi, err := buildinfo.ReadFile(bin); err == nil && bi.Main.Version == caddyVersion {
		log.Printf("caddy %s: using %s (built before)", caddyVersion, bin)
		return bin, nil
	}
	// go install writes into a fresh folder that is renamed into place
	// once the build is complete, so an interrupted build is never taken
	// for a cached binary.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "caddy-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	pkg := "github.com/caddyserver/caddy/v2/cmd/caddy@" + caddyVersion
	log.Printf("caddy %s not built yet: GOBIN=%s go install %s (then moved to %s; a few minutes the first time)", caddyVersion, tmp, pkg, dir)
	cmd := exec.Command("go", "install", pkg)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install %s: %v (the Go module proxy must be reachable; or name a binary with --caddy PATH)", pkg, err)
	}
	os.RemoveAll(dir) // a stale build of another version, if any
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	log.Printf("caddy %s built: %s", caddyVersion, bin)
	return bin, nil
}
