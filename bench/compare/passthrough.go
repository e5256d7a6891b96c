package main

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mediaship/engine/bench/peer"
)

// passthroughMatrix compares relaying TLS unopened: each server relays it
// to the same nginx TLS origin; the HTTP/3 row relays QUIC to a quic-go
// origin at the same port number over UDP.
func passthroughMatrix() []row {
	return []row{
		{id: "pass-large-h1-tls", name: "relayed large file, 1 connection, h1 TLS", unit: "MiB/s [relay CPU s/GiB]", proto: "h1", tls: true, file: "large.bin", connections: 1, metric: "mibps", client: clientCurl},
		{id: "pass-large-h1-tls-16c", name: "relayed large file, 16 connections, h1 TLS", unit: "MiB/s [relay CPU s/GiB]", proto: "h1", tls: true, file: "large.bin", connections: 16, metric: "mibps", client: clientWrk},
		{id: "pass-1k-new-resumed", name: "new relayed connection per request, 1 KiB, resumed TLS (16 at once)", unit: "conn/s [relay µs/conn]", proto: "h1", tls: true, file: "1k.bin", connections: 16, newConns: true, resume: true, metric: "rps", client: clientSTime},
		{id: "pass-large-h3", name: "relayed large file, 1 connection, h3 (QUIC passthrough)", unit: "MiB/s [relay CPU s/GiB]", proto: "h3", tls: true, file: "large.bin", connections: 1, metric: "mibps"},
	}
}

// passScenario is --client passthrough: each server relaying TLS
// unopened to one nginx TLS origin, and QUIC to a quic-go one, started
// once for the whole run.
type passScenario struct {
	origin *origin // set by setup
}

func (*passScenario) name() string { return "passthrough" }

func (*passScenario) defaults(baseline bool) (servers, out string) {
	if baseline {
		return "engine,baseline,nginx,haproxy", baselineOut
	}
	return "engine,nginx,haproxy", "docs/BENCHMARKS-passthrough.md"
}

func (*passScenario) rows(bool) []row { return passthroughMatrix() }

// setup starts the origin, with its QUIC side when a row speaks HTTP/3.
func (p *passScenario) setup(l *launcher, rows []row) error {
	withH3 := slices.ContainsFunc(rows, func(r row) bool { return r.proto == "h3" })
	gohttpBin := ""
	if withH3 {
		var err error
		if gohttpBin, err = goBuild(l.repo, l.work, "gohttp", "./bench/compare/gohttp"); err != nil {
			return fmt.Errorf("the QUIC origin (bench/compare/gohttp): %v", err)
		}
	}
	o, err := startOrigin(l.work, l.peers, withH3, gohttpBin)
	if err != nil {
		return fmt.Errorf("the relays' origin: %v", err)
	}
	p.origin = o
	log.Printf("origin (nginx, TLS; quic-go on UDP for h3): %s", o.addr)
	return nil
}

func (p *passScenario) teardown() {
	if p.origin != nil {
		p.origin.stop()
	}
}

func (p *passScenario) server(id string, l *launcher) (func() (*server, error), error) {
	switch id {
	case "engine", "baseline":
		spec, err := l.engine(id)
		if err != nil {
			return nil, err
		}
		return func() (*server, error) { return startEnginePass(spec, l.work, p.origin) }, nil
	case "nginx":
		if err := l.tool("nginx", toolNginxStream); err != nil {
			return nil, err
		}
		return func() (*server, error) { return startNginxPass(l.work, l.peers, p.origin) }, nil
	case "haproxy":
		if err := l.tool("haproxy", toolHAProxy); err != nil {
			return nil, err
		}
		return func() (*server, error) { return startHAProxyPass(l.work, l.peers, p.origin) }, nil
	case "lighttpd", "gohttp", "caddy":
		return nil, fmt.Errorf("%s has no passthrough configuration here (Caddy needs the caddy-l4 plugin): --client passthrough compares engine, baseline, nginx and haproxy", id)
	}
	return nil, unknownServer(id)
}

func (*passScenario) measure(run func() outcome) outcome { return run() }

func (p *passScenario) upstream() string { return upstreamAbout(nil, p.origin) }

// toolNginxStream is nginx's stream module, which nginx's passthrough
// (ssl_preread) needs.
var toolNginxStream = debTool{bin: "nginx", files: []string{"/usr/lib/nginx/modules/ngx_stream_module.so"}, pkgs: []string{"nginx", "libnginx-mod-stream"}}

// origin is what every relay forwards to: nginx over TLS on TCP, and a
// quic-go HTTP/3 server on UDP at the same port number (a relay's one
// upstream address serves both).
type origin struct {
	addr string // 127.0.0.1:port
	tcp  *proc  // nginx
	udp  *proc  // gohttp -h3; nil without an HTTP/3 row
}

func (o *origin) stop() {
	o.tcp.stop()
	o.udp.stop()
}

// startOrigin runs nginx from nginx-origin.conf.tmpl and, when withH3,
// bench/compare/gohttp serving the same files over HTTP/3 (gohttpBin).
func startOrigin(work string, peers peerTemplates, withH3 bool, gohttpBin string) (*origin, error) {
	addr, p, err := startNginxFile(work, peers, "nginx-origin", "__ORIGIN_PORT__", true, "the relays' TLS origin", "https")
	if err != nil {
		return nil, err
	}
	o := &origin{addr: addr, tcp: p}
	if withH3 {
		args := []string{"-root", filepath.Join(work, "www"), "-h3", o.addr, "-cert", filepath.Join(work, "cert.pem"), "-key", filepath.Join(work, "key.pem")}
		if o.udp, err = startProc(filepath.Join(work, "gohttp-h3-origin.log"), gohttpBin, args); err != nil {
			o.stop()
			return nil, err
		}
	}
	return o, nil
}

// startEnginePass runs the engine with one passthrough route, every name
// (and none) to the origin, over TCP and QUIC.
func startEnginePass(spec engineSpec, work string, o *origin) (*server, error) {
	ports, err := peer.FreePorts(true) // QUIC passthrough on UDP at the same number
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	cfg := fmt.Sprintf("listen = %q\n[reverse_proxy]\nenabled = true\ntls_termination = false\n[[reverse_proxy.routes]]\ndomain = \"*\"\nupstreams = [%q]\n", addr, o.addr)
	cfgPath := filepath.Join(work, spec.id+"-pass.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	binary, err := newEngineBinary(spec)
	if err != nil {
		return nil, err
	}
	s := &server{id: spec.id, name: spec.name, sha: binary.sha, tls: "https://" + addr, h3: "https://" + addr, h2: true, binary: binary,
		about: "`[reverse_proxy]` with `tls_termination = false` and one route, `domain = \"*\"`, to the origin; every other setting at its default; TCP relayed with splice(2), QUIC by the router on the same port; no TLS of its own (the origin's handshake passes through)"}
	return s.runTLS(filepath.Join(work, spec.id+"-pass.log"), spec.bin, []string{"serve", "-c", cfgPath})
}

// startNginxPass runs nginx from nginx-pass.conf.tmpl.
func startNginxPass(work string, peers peerTemplates, o *origin) (*server, error) {
	ports, err := peer.FreePorts(false)
	if err != nil {
		return nil, err
	}
	conf, err := peers.fill("nginx-pass.conf.tmpl", "__DIR__", work, "__PASS_PORT__", strconv.Itoa(ports[0]), "__ORIGIN_PORT__", portOf(o.addr))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(work, "nginx-pass.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	version, _ := exec.Command("nginx", "-v").CombinedOutput()
	s := &server{id: "nginx", name: "nginx", h2: true, tls: fmt.Sprintf("https://127.0.0.1:%d", ports[0]),
		about: strings.TrimSpace(string(version)) + " (" + peers.name + "/nginx-pass.conf.tmpl: `stream` with `ssl_preread` and a `map` of the server name, defaults otherwise; nginx has no QUIC passthrough)"}
	return s.runTLS(filepath.Join(work, "nginx-pass.log"), "nginx", []string{"-c", path, "-e", filepath.Join(work, "logs", "nginx-pass-error.log")})
}

// startHAProxyPass runs HAProxy from haproxy-pass.cfg.tmpl, in the
// foreground.
func startHAProxyPass(work string, peers peerTemplates, o *origin) (*server, error) {
	ports, err := peer.FreePorts(false)
	if err != nil {
		return nil, err
	}
	conf, err := peers.fill("haproxy-pass.cfg.tmpl", "__PASS_PORT__", strconv.Itoa(ports[0]), "__ORIGIN_PORT__", portOf(o.addr))
	if err != nil {
		return nil, err
	}
	path := filepath.Join(work, "haproxy-pass.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	version, _ := exec.Command("haproxy", "-v").Output()
	s := &server{id: "haproxy", name: "haproxy", h2: true, tls: fmt.Sprintf("https://127.0.0.1:%d", ports[0]),
		about: strings.TrimSpace(firstLine(string(version))) + " (" + peers.name + "/haproxy-pass.cfg.tmpl: `mode tcp`, `req.ssl_sni`, `option splice-auto`; one thread per CPU; HAProxy 2.6 has no QUIC passthrough)"}
	return s.runTLS(filepath.Join(work, "haproxy-pass.log"), "haproxy", []string{"-db", "-f", path})
}

// passIntro opens the passthrough page.
const passIntro = "Each server is a TLS passthrough relay in front of the same origin: Debian's nginx holding the certificate and serving the fixtures over TLS on loopback (`bench/compare/peers/nginx-origin.conf.tmpl`), and, for the HTTP/3 row, quic-go's HTTP/3 server (`bench/compare/gohttp -h3`) on UDP at the same port number. No relay decrypts anything: it reads the ClientHello, connects to the origin and moves bytes both ways. The clients connect to the relay's address and send no server name, so each relay routes by its catch-all (the engine's `domain = \"*\"`, nginx's `map` default, HAProxy's `default_backend`) after reading the ClientHello. A figure therefore includes the origin's work (its TLS and its files), the same for every relay; the CPU in brackets is the relay's alone (its processes and their children, from /proc), not the origin's.\n\n"
