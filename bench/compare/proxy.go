package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/bench/peer"
)

// proxyMatrix compares reverse proxies: each server terminates TLS in
// front of the same nginx file server, so only the proxy differs.
func proxyMatrix() []row {
	return []row{
		{id: "proxy-large-h1-tls", name: "proxied large file, 1 connection, h1 TLS", unit: "MiB/s [proxy CPU s/GiB]", proto: "h1", tls: true, file: "large.bin", connections: 1, metric: "mibps", client: clientCurl},
		{id: "proxy-1k-h1-tls-64c", name: "proxied 1 KiB, 64 keep-alive connections, h1 TLS", unit: "req/s (p99 ms) [proxy µs/req]", proto: "h1", tls: true, file: "1k.bin", connections: 64, metric: "rps", client: clientWrk},
		{id: "proxy-1k-h1-tls-5000", name: "proxied 1 KiB at a fixed 5,000 req/s, 64 connections, h1 TLS", unit: "p50 / p99 ms, failed [proxy µs/req]", proto: "h1", tls: true, file: "1k.bin", connections: 64, rate: 5000, metric: "latency"},
	}
}

// proxyScenario is --client proxy: each server a TLS-terminating reverse
// proxy in front of one nginx file server, the backend, started once for
// the whole run.
type proxyScenario struct {
	backend *backend // set by setup
}

func (*proxyScenario) name() string { return "proxy" }

func (*proxyScenario) defaults(baseline bool) (servers, out string) {
	if baseline {
		return "engine,baseline,nginx,caddy,haproxy", baselineOut
	}
	return "engine,nginx,caddy,haproxy", "docs/BENCHMARKS-proxy.md"
}

func (*proxyScenario) rows(bool) []row { return proxyMatrix() }

func (p *proxyScenario) setup(l *launcher, _ []row) error {
	b, err := startBackend(l.work, l.peers)
	if err != nil {
		return fmt.Errorf("the proxies' file server: %v", err)
	}
	p.backend = b
	log.Printf("backend (nginx, files): http://%s", b.addr)
	return nil
}

func (p *proxyScenario) teardown() {
	if p.backend != nil {
		p.backend.proc.stop()
	}
}

func (p *proxyScenario) server(id string, l *launcher) (func() (*server, error), error) {
	switch id {
	case "engine", "baseline":
		spec, err := l.engine(id)
		if err != nil {
			return nil, err
		}
		return func() (*server, error) { return startEngineProxy(spec, l.work, p.backend) }, nil
	case "nginx":
		return func() (*server, error) { return startNginxProxy(l.work, l.peers, l.offerKTLS, p.backend) }, nil
	case "caddy":
		bin, err := l.caddy()
		if err != nil {
			return nil, err
		}
		return func() (*server, error) { return startCaddyProxy(l.work, l.peers, bin, p.backend) }, nil
	case "haproxy":
		if err := l.tool("haproxy", toolHAProxy); err != nil {
			return nil, err
		}
		return func() (*server, error) { return startHAProxy(l.work, l.peers, p.backend) }, nil
	case "lighttpd", "gohttp":
		return nil, fmt.Errorf("%s has no reverse proxy configuration here: --client proxy compares engine, baseline, nginx, caddy and haproxy", id)
	}
	return nil, unknownServer(id)
}

// measure counts the connections the backend accepted during the run.
func (p *proxyScenario) measure(run func() outcome) outcome {
	var o outcome
	n, ok := p.backend.opened(func() { o = run() })
	o.backendConns, o.hasBackend = n, ok
	return o
}

func (p *proxyScenario) upstream() string { return upstreamAbout(p.backend, nil) }

// toolHAProxy is Debian's HAProxy, a peer of the proxy rows.
var toolHAProxy = debTool{bin: "haproxy", pkgs: []string{"haproxy"}}

// backend is the nginx file server every proxy forwards to.
type backend struct {
	addr string // 127.0.0.1:port
	proc *proc
}

// startBackend runs nginx from nginx-backend.conf.tmpl on the fixtures.
func startBackend(work string, peers peerTemplates) (*backend, error) {
	addr, p, err := startNginxFile(work, peers, "nginx-backend", "__BACKEND_PORT__", false, "the proxies' file server", "http")
	if err != nil {
		return nil, err
	}
	b := &backend{addr: addr, proc: p}
	if _, err := b.accepts(); err != nil {
		b.proc.stop()
		return nil, err
	}
	return b, nil
}

// startNginxFile runs nginx from name.conf.tmpl (__DIR__ the work folder,
// portKey a free 127.0.0.1 port, with UDP free at the same number when
// udp is set), until it answers /1k.bin over scheme. role names what the
// run needs it for, in the error when nginx is missing.
func startNginxFile(work string, peers peerTemplates, name, portKey string, udp bool, role, scheme string) (string, *proc, error) {
	if _, err := exec.LookPath("nginx"); err != nil {
		return "", nil, fmt.Errorf("nginx not installed (%s): install Debian's package with `apt-get install -y nginx` (as root) and run this again", role)
	}
	ports, err := peer.FreePorts(udp)
	if err != nil {
		return "", nil, err
	}
	conf, err := peers.fill(name+".conf.tmpl", "__DIR__", work, portKey, strconv.Itoa(ports[0]))
	if err != nil {
		return "", nil, err
	}
	for _, d := range []string{"run", "logs"} {
		os.MkdirAll(filepath.Join(work, d), 0o755)
	}
	path := filepath.Join(work, name+".conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return "", nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p, err := startProc(filepath.Join(work, name+".log"), "nginx", []string{"-c", path, "-e", filepath.Join(work, "logs", name+"-error.log")})
	if err != nil {
		return "", nil, err
	}
	if err := p.waitReady(scheme + "://" + addr + "/1k.bin"); err != nil {
		p.stop()
		return "", nil, err
	}
	return addr, p, nil
}

var stubAccepts = regexp.MustCompile(`server accepts handled requests\s+(\d+) `)

// accepts is nginx's count of the connections it has accepted, this
// status request's own included.
func (b *backend) accepts() (int64, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + b.addr + "/_backend_status")
	if err != nil {
		return 0, fmt.Errorf("backend stub_status: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return parseStubAccepts(string(body))
}

func parseStubAccepts(status string) (int64, error) {
	m := stubAccepts.FindStringSubmatch(status)
	if m == nil {
		return 0, fmt.Errorf("backend stub_status: no accepts counter in %q", status)
	}
	return strconv.ParseInt(m[1], 10, 64)
}

// opened runs f and returns the connections the backend accepted
// meanwhile; ok is false when the counter could not be read.
func (b *backend) opened(f func()) (n int64, ok bool) {
	before, err1 := b.accepts()
	f()
	after, err2 := b.accepts()
	if err1 != nil || err2 != nil {
		return 0, false
	}
	// The second status request's connection is among them.
	return after - before - 1, true
}

// startEngineProxy runs the engine with one route, every name and path
// to the backend, TLS terminated with the run's certificate.
func startEngineProxy(spec engineSpec, work string, b *backend) (*server, error) {
	ports, err := peer.FreePorts(true) // TLS, with HTTP/3 on UDP at the same number
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfg := fmt.Sprintf("listen = %q\n[kernel]\nktls = \"auto\"\n[reverse_proxy]\nenabled = true\n[reverse_proxy.tls]\ncert = %q\nkey = %q\n%s[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [%q]\n",
		addr, filepath.Join(work, "cert.pem"), filepath.Join(work, "key.pem"), spec.keyExchangesLine(), b.addr)
	cfgPath := filepath.Join(work, spec.id+"-proxy.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	binary, err := newEngineBinary(spec)
	if err != nil {
		return nil, err
	}
	s := &server{id: spec.id, name: spec.name, sha: binary.sha, tls: "https://" + addr, h3: "https://" + addr, h2: true, binary: binary,
		about: "`[reverse_proxy]` with one route, `domain = \"*\"`, to the backend, every pool and timeout setting at its default; `ktls = \"auto\"`; h1, h2 and h3" + spec.keyExchangesNote()}
	// The TLS log name is the one the kernel TLS statement reads.
	return s.runTLS(filepath.Join(work, spec.id+"-tls.log"), spec.bin, []string{"serve", "-c", cfgPath})
}

// startNginxProxy runs the system's nginx from nginx-proxy.conf.tmpl.
func startNginxProxy(work string, peers peerTemplates, withKTLS bool, b *backend) (*server, error) {
	ports, err := peer.FreePorts(false)
	if err != nil {
		return nil, err
	}
	ktls, ktlsNote := nginxKTLS(withKTLS)
	conf, err := peers.fill("nginx-proxy.conf.tmpl", "__DIR__", work, "__KTLS__", ktls, "__TLS_PORT__", strconv.Itoa(ports[0]),
		"__BACKEND_PORT__", portOf(b.addr))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(work, "nginx-proxy.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	version, _ := exec.Command("nginx", "-v").CombinedOutput()
	s := &server{id: "nginx", name: "nginx", h2: true, tls: fmt.Sprintf("https://127.0.0.1:%d", ports[0]),
		about: strings.TrimSpace(string(version)) + " (" + peers.name + "/nginx-proxy.conf.tmpl: `upstream` with `keepalive 64`, `proxy_http_version 1.1`, `Connection \"\"`; buffering on, as by default; HTTP/2 on TLS; " + ktlsNote + ")"}
	return s.runTLS(filepath.Join(work, "nginx-proxy.log"), "nginx", []string{"-c", path, "-e", filepath.Join(work, "logs", "nginx-proxy-error.log")})
}

// startCaddyProxy runs Caddy from Caddyfile-proxy.tmpl.
func startCaddyProxy(work string, peers peerTemplates, bin string, b *backend) (*server, error) {
	ports, err := peer.FreePorts(true)
	if err != nil {
		return nil, err
	}
	conf, err := peers.fill("Caddyfile-proxy.tmpl", "__DIR__", work, "__TLS_PORT__", strconv.Itoa(ports[0]), "__BACKEND_PORT__", portOf(b.addr))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(work, "Caddyfile-proxy")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	u := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	s := &server{id: "caddy", name: "caddy", tls: u, h3: u, h2: true,
		about: "caddy " + caddyAbout(bin) + " (" + peers.name + "/Caddyfile-proxy.tmpl: `reverse_proxy` with its defaults; h1 h2 h3; automatic HTTPS and admin endpoint off)"}
	data := filepath.Join(work, "caddy-data")
	return s.runTLS(filepath.Join(work, "caddy-proxy.log"), bin, []string{"run", "--config", path, "--adapter", "caddyfile"},
		"XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+data)
}

// startHAProxy runs Debian's HAProxy from haproxy.cfg.tmpl, in the
// foreground.
func startHAProxy(work string, peers peerTemplates, b *backend) (*server, error) {
	ports, err := peer.FreePorts(false)
	if err != nil {
		return nil, err
	}
	// HAProxy takes the certificate and its key from one file.
	cert, err := os.ReadFile(filepath.Join(work, "cert.pem"))
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(work, "key.pem"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(work, "haproxy.pem"), append(cert, key...), 0o600); err != nil {
		return nil, err
	}
	conf, err := peers.fill("haproxy.cfg.tmpl", "__DIR__", work, "__TLS_PORT__", strconv.Itoa(ports[0]), "__BACKEND_PORT__", portOf(b.addr))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(work, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	version, _ := exec.Command("haproxy", "-v").Output()
	s := &server{id: "haproxy", name: "haproxy", h2: true, tls: fmt.Sprintf("https://127.0.0.1:%d", ports[0]),
		about: strings.TrimSpace(firstLine(string(version))) + " (" + peers.name + "/haproxy.cfg.tmpl: `mode http`, `http-reuse always`, one thread per CPU; ALPN h2 and HTTP/1.1; kernel TLS not offered)"}
	// -db: stay in the foreground, so that the harness owns the process.
	return s.runTLS(filepath.Join(work, "haproxy.log"), "haproxy", []string{"-db", "-f", path})
}

// runTLS starts a proxy's one process and waits until it answers on its
// TLS URL; a process that never does is stopped.
func (s *server) runTLS(logFile, bin string, args []string, env ...string) (*server, error) {
	var err error
	if s.proc, err = startProc(logFile, bin, args, env...); err != nil {
		return nil, err
	}
	if err := s.proc.waitReady(s.tls + "/1k.bin"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func portOf(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}

// proxyIntro opens the proxy page: what is in front of what.
const proxyIntro = "Each server is a TLS-terminating reverse proxy in front of the same upstream: Debian's nginx serving the fixtures over plain HTTP/1.1 on loopback (`bench/compare/peers/nginx-backend.conf.tmpl`), one process tree started once for the whole run. The clients speak to the proxy only, over TLS 1.3. A proxy's figures therefore include the backend's work, the same for every proxy; the CPU in brackets is the proxy's alone (its processes and their children, from /proc), not the backend's. Every proxy keeps idle backend connections for reuse (for nginx, the `upstream` `keepalive` its documentation gives; the others by default); the table \"Backend connections opened\" counts, from nginx's `stub_status`, the connections each proxy opened during each run of a cell.\n\n"

// backendSection is the connections each proxy opened to the backend,
// per cell and repeat.
func (p page) backendSection(b *strings.Builder) {
	b.WriteString("## Backend connections opened\n\nConnections the backend accepted during each repeat's run of the cell (its warmup included), from nginx's `stub_status` `accepts` read before and after (the harness's own status request left out), in repeat order. A proxy that keeps its pool between cells opens none on later ones; the servers take turns, so a pool must survive the other servers' runs in between (the backend's keep-alive timeout is 65 s).\n\n| workload |")
	p.serverColumns(b)
	for i, r := range p.rows {
		fmt.Fprintf(b, "| %s |", r.name)
		for _, s := range p.servers {
			c := p.cells[i][s.name]
			var parts []string
			for _, o := range c.repeats {
				if o.hasBackend {
					parts = append(parts, strconv.FormatInt(o.backendConns, 10))
				} else {
					parts = append(parts, "?")
				}
			}
			switch {
			case c.cannot != "":
				fmt.Fprintf(b, " %s |", tableSafe(c.cannot))
			case len(parts) == 0:
				b.WriteString(" - |")
			default:
				fmt.Fprintf(b, " %s |", strings.Join(parts, ", "))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}
