package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/testtool"
)

// requireDebTool skips (or, in CI, fails) when a Debian tool the test
// runs is missing, naming the command that installs it.
func requireDebTool(t *testing.T, tool debTool) {
	t.Helper()
	if what := tool.missing(); what != "" {
		testtool.Lacking(t, what, tool.installCommand()+"; .ci/run does")
	}
}

// toolNginx is Debian's nginx, for the configurations without the stream
// module.
var toolNginx = debTool{bin: "nginx", pkgs: []string{"nginx"}}

// requireCaddy returns the Caddy the harness measures when --caddy names
// none: $CADDY, or else the one findCaddy built into the user's cache;
// and only at the pinned caddyVersion, so that CI's copy and the pin
// cannot drift apart. It never builds one (that takes minutes).
func requireCaddy(t *testing.T) string {
	t.Helper()
	const module = "github.com/caddyserver/caddy/v2"
	install := fmt.Sprintf("build it with `GOBIN=DIR go install %s/cmd/caddy@%s` and set CADDY=DIR/caddy (.ci/run does)", module, caddyVersion)
	bin := os.Getenv("CADDY")
	if bin == "" {
		var err error
		if bin, err = cachedCaddy(); err != nil {
			testtool.Lacking(t, fmt.Sprintf("caddy %s (%v)", caddyVersion, err), install)
		}
		install += ", or let `go run ./bench/compare` build it into " + filepath.Dir(bin) + " once"
	}
	bi, err := buildinfo.ReadFile(bin)
	switch {
	case err != nil:
		testtool.Lacking(t, fmt.Sprintf("caddy %s (%v)", caddyVersion, err), install)
	case bi.Main.Path != module || bi.Main.Version != caddyVersion:
		testtool.Lacking(t, fmt.Sprintf("caddy %s (%s is %s %s)", caddyVersion, bin, bi.Main.Path, bi.Main.Version), install)
	}
	return bin
}

// peerRig is what every peer in TestPeersAnswer serves: the harness's
// fixtures and certificate in one work folder, and its templates.
type peerRig struct {
	work     string
	peers    peerTemplates
	manifest []integrity.Entry
	large    int64
}

// peerTestLarge is the "large" file's size here: a few MiB, not a
// whole number of anything, so that a length off by a buffer shows.
const peerTestLarge = 3<<20 + 4099

func newPeerRig(t *testing.T) *peerRig {
	t.Helper()
	// Not t.TempDir: its parent is private, and nginx's workers (nobody,
	// when the test runs as root) must read the files, as they do from
	// the harness's work folder.
	work, err := os.MkdirTemp("", "engine-compare-peers-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest, err := fixtures(work, peerTestLarge)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeCert(work); err != nil {
		t.Fatal(err)
	}
	sub, err := fs.Sub(embeddedPeers, "peers")
	if err != nil {
		t.Fatal(err)
	}
	return &peerRig{work: work, peers: peerTemplates{fs: sub, name: "bench/compare/peers"}, manifest: manifest, large: peerTestLarge}
}

// startPeer runs one of the harness's start functions, as main does (new
// ports when one was taken meanwhile), and stops the server when the
// test ends.
func startPeer(t *testing.T, what string, f func() (*server, error)) *server {
	t.Helper()
	s, err := startOnFreePorts(f)
	if err != nil {
		t.Fatalf("%s did not start: %v", what, err)
	}
	t.Cleanup(s.stop)
	if s.about == "" {
		t.Errorf("%s: the page would say nothing about it (empty about)", what)
	}
	return s
}

// The ways a server is reached, as the page's rows reach it.
const (
	viaPlain = "h1 plain"
	viaTLS   = "h1 TLS"
	viaTLSNR = "h1 TLS, no resumption"
	viaH2    = "h2 TLS"
	viaH3    = "h3"
)

// answers has engine bench, the harness's own client, fetch the 1 KiB and
// the large fixture from s each way in via, and fails unless every one
// was offered (the server has the URL for it) and every response was
// whole: status 200, the protocol asked for, the length and the BLAKE3
// digest of the file.
func (r *peerRig) answers(t *testing.T, s *server, via ...string) {
	t.Helper()
	for _, v := range via {
		base, proto := "", "h1"
		switch v {
		case viaPlain:
			base = s.plain
		case viaTLS:
			base = s.tls
		case viaTLSNR:
			base = s.tlsNR
		case viaH2:
			if s.h2 {
				base, proto = s.tls, "h2"
			}
		case viaH3:
			base, proto = s.h3, "h3"
		}
		if base == "" {
			t.Errorf("%s offers no %s", s.name, v)
			continue
		}
		r.answer(t, s.name+" "+v, proto, base)
	}
}

func (r *peerRig) answer(t *testing.T, what, proto, base string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, bench.Config{URLs: []string{base + "/1k.bin", base + "/large.bin"}, Protocol: proto, Requests: 2, Samples: 1,
		Manifest: r.manifest, LocalRoot: filepath.Join(r.work, "www"), ExpectSize: -1, RangeLast: -1, Insecure: true, Timeout: time.Minute})
	// Read as the page reads a cell.
	o := newOutcome(1, rep, err, "mibps")
	switch {
	case o.err != "":
		t.Errorf("%s (%s): %s", what, base, o.err)
	case o.samples == 0 || o.accepted != o.samples || len(rep.Errors) > 0:
		t.Errorf("%s (%s): %d of %d samples accepted, errors %v, rejected %v", what, base, o.accepted, o.samples, rep.Errors, o.rejected)
	case rep.Bytes < r.large+1024:
		t.Errorf("%s (%s): %d bytes verified, want both files (%d)", what, base, rep.Bytes, r.large+1024)
	}
}

// peerWarning matches a line where a peer says something is wrong:
// nginx's [warn] and worse, HAProxy's [WARNING] and [ALERT], lighttpd's
// WARNING (how it reports a setting it does not know, and then ignores),
// Caddy's warn and error levels.
var peerWarning = regexp.MustCompile(`\[(warn|error|crit|alert|emerg|WARNING|ALERT)\]|WARNING:|"level":"(warn|error|fatal)"`)

// expectedWarnings are warnings the templates cause on purpose, each with
// the setting behind it.
var expectedWarnings = []string{
	`"msg":"admin endpoint disabled"`,                // Caddy: admin off
	`"msg":"HTTP/2 skipped because it requires TLS"`, // Caddy: protocols h1 h2 h3, on the plain site too
	`"msg":"HTTP/3 skipped because it requires TLS"`,
	// nginx, not root: Debian's built-in error log, opened before the
	// configuration names its own, is root's.
	`could not open error log file: open() "/var/log/nginx/error.log" failed (13: Permission denied)`,
}

// noWarnings fails when a peer's logs (its output, and the error log its
// configuration names) hold a warning: a setting a peer ignores while it
// serves anyway is a configuration that does not do what the page says.
// Read while the peer runs, before a stop adds its own lines.
func noWarnings(t *testing.T, what string, logs ...string) {
	t.Helper()
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v", what, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			expected := slices.ContainsFunc(expectedWarnings, func(w string) bool { return strings.Contains(line, w) })
			if peerWarning.MatchString(line) && !expected {
				t.Errorf("%s: %s says: %s", what, filepath.Base(f), line)
			}
		}
	}
}

// TestPeersAnswer starts every peer configuration bench/compare writes,
// as it writes it (the embedded templates, filled and started by the
// harness's own start functions), and has each answer on every protocol
// its rows use, every byte checked; then it runs each external client
// once, through the harness's own code, against nginx. So a template a
// peer refuses, a peer that serves something else than the file, or a
// client whose output the harness no longer reads fails here, not in a
// benchmark run. .ci/run installs every peer and client (Caddy at the
// pinned version, named by $CADDY); elsewhere a missing one skips its
// part and says how to install it. The engine's own configurations are
// TestQuick's, TestQuickProxy's and TestQuickPassthrough's.
func TestPeersAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	r := newPeerRig(t)
	ktls := probeKernelTLS() == nil // nginx is offered kernel TLS where the kernel has it, as main does
	var gohttpBin string
	buildGoHTTP := func(t *testing.T) string {
		t.Helper()
		if gohttpBin == "" {
			repo, err := repoRoot()
			if err != nil {
				t.Fatal(err)
			}
			if gohttpBin, err = goBuild(repo, r.work, "gohttp", "./bench/compare/gohttp"); err != nil {
				t.Fatalf("bench/compare/gohttp: %v", err)
			}
		}
		return gohttpBin
	}

	t.Run("nginx", func(t *testing.T) {
		requireDebTool(t, toolNginx)
		s := startPeer(t, "nginx (nginx.conf.tmpl)", func() (*server, error) { return startNginx(r.work, r.peers, ktls) })
		r.answers(t, s, viaPlain, viaTLS, viaH2, viaTLSNR)
		noWarnings(t, "nginx", s.proc.Log, r.errorLog("nginx"))
		t.Run("clients", func(t *testing.T) { r.clients(t, s) })
	})
	t.Run("lighttpd", func(t *testing.T) {
		requireDebTool(t, toolLighttpd)
		s := startPeer(t, "lighttpd (lighttpd.conf.tmpl)", func() (*server, error) { return startLighttpd(r.work, r.peers) })
		r.answers(t, s, viaPlain, viaTLS, viaH2)
		noWarnings(t, "lighttpd", s.proc.Log, r.errorLog("lighttpd"))
	})
	t.Run("gohttp", func(t *testing.T) {
		bin := buildGoHTTP(t)
		s := startPeer(t, "gohttp", func() (*server, error) { return startGoHTTP(r.work, bin) })
		r.answers(t, s, viaPlain, viaTLS, viaH2)
		noWarnings(t, "gohttp", s.proc.Log)
	})
	t.Run("caddy", func(t *testing.T) {
		bin := requireCaddy(t)
		s := startPeer(t, "caddy (Caddyfile.tmpl)", func() (*server, error) { return startCaddy(r.work, r.peers, bin) })
		r.answers(t, s, viaPlain, viaTLS, viaH2, viaH3)
		noWarnings(t, "caddy", s.proc.Log)
	})
	// --client proxy: every proxy in front of the nginx file server.
	t.Run("proxy", func(t *testing.T) {
		requireDebTool(t, toolNginx)
		b, err := startBackend(r.work, r.peers)
		if err != nil {
			t.Fatalf("nginx backend (nginx-backend.conf.tmpl) did not start: %v", err)
		}
		t.Cleanup(b.proc.stop)
		r.answer(t, "nginx backend", "h1", "http://"+b.addr)
		noWarnings(t, "nginx backend", b.proc.Log, r.errorLog("nginx-backend"))
		proxies := []struct {
			name     string
			tools    []debTool
			start    func(t *testing.T) func() (*server, error)
			via      []string
			errorLog string // besides its output
		}{
			{"nginx (nginx-proxy.conf.tmpl)", nil, func(*testing.T) func() (*server, error) {
				return func() (*server, error) { return startNginxProxy(r.work, r.peers, ktls, b) }
			}, []string{viaTLS, viaH2}, r.errorLog("nginx-proxy")},
			{"haproxy (haproxy.cfg.tmpl)", []debTool{toolHAProxy}, func(*testing.T) func() (*server, error) {
				return func() (*server, error) { return startHAProxy(r.work, r.peers, b) }
			}, []string{viaTLS, viaH2}, ""},
			{"caddy (Caddyfile-proxy.tmpl)", nil, func(t *testing.T) func() (*server, error) {
				bin := requireCaddy(t)
				return func() (*server, error) { return startCaddyProxy(r.work, r.peers, bin, b) }
			}, []string{viaTLS, viaH2, viaH3}, ""},
		}
		for _, p := range proxies {
			t.Run(p.name, func(t *testing.T) {
				for _, tool := range p.tools {
					requireDebTool(t, tool)
				}
				f := p.start(t)
				before, err := b.accepts()
				if err != nil {
					t.Fatal(err)
				}
				s := startPeer(t, p.name, f)
				r.answers(t, s, p.via...)
				noWarnings(t, p.name, s.proc.Log, p.errorLog)
				// The answers came through the backend, not from a
				// file the proxy found some other way.
				if after, err := b.accepts(); err != nil || after-before < 2 {
					t.Errorf("the backend accepted %d connections while %s started and answered (err %v), want at least one besides the status requests", after-before-1, p.name, err)
				}
			})
		}
	})
	// --client passthrough: every relay in front of the nginx TLS origin
	// (and quic-go's HTTP/3 server at the same port number).
	t.Run("passthrough", func(t *testing.T) {
		requireDebTool(t, toolNginxStream)
		o, err := startOrigin(r.work, r.peers, true, buildGoHTTP(t))
		if err != nil {
			t.Fatalf("origin (nginx-origin.conf.tmpl, gohttp -h3) did not start: %v", err)
		}
		t.Cleanup(o.stop)
		origin := &server{name: "origin", tls: "https://" + o.addr, h2: true, h3: "https://" + o.addr}
		r.answers(t, origin, viaTLS, viaH2, viaH3)
		noWarnings(t, "origin", o.tcp.Log, r.errorLog("nginx-origin"), o.udp.Log)
		t.Run("nginx (nginx-pass.conf.tmpl)", func(t *testing.T) {
			s := startPeer(t, "nginx (nginx-pass.conf.tmpl)", func() (*server, error) { return startNginxPass(r.work, r.peers, o) })
			r.answers(t, s, viaTLS, viaH2)
			noWarnings(t, "nginx (nginx-pass.conf.tmpl)", s.proc.Log, r.errorLog("nginx-pass"))
		})
		t.Run("haproxy (haproxy-pass.cfg.tmpl)", func(t *testing.T) {
			requireDebTool(t, toolHAProxy)
			s := startPeer(t, "haproxy (haproxy-pass.cfg.tmpl)", func() (*server, error) { return startHAProxyPass(r.work, r.peers, o) })
			r.answers(t, s, viaTLS, viaH2)
			noWarnings(t, "haproxy (haproxy-pass.cfg.tmpl)", s.proc.Log)
		})
	})
}

// errorLog is the error log a peer's template names: logs/NAME-error.log.
func (r *peerRig) errorLog(name string) string {
	return filepath.Join(r.work, "logs", name+"-error.log")
}

// clients runs each external client once against s, on the external
// page's rows, through measureExternal: the probe, the warmup and one
// sample, parsed and checked as on the page. One row per client, and
// s_time both ways (-reuse must resume every connection, -new none).
func (r *peerRig) clients(t *testing.T, s *server) {
	env, err := newExtEnv(r.work, r.manifest, r.large, 1, time.Second, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"large-h1-tls", "1k-h1-tls-64c", "large-h2-tls-16c", "1k-h1-tls-new-resumed", "1k-h1-tls-new-full"} {
		i := slices.IndexFunc(externalMatrix(), func(rw row) bool { return rw.id == id })
		if i < 0 {
			t.Fatalf("the external page has no row %q", id)
		}
		rw := externalMatrix()[i]
		t.Run(rw.client+" "+id, func(t *testing.T) {
			requireDebTool(t, clientTool(rw.client))
			base, why := s.base(rw)
			if base == "" {
				t.Fatalf("%s cannot be measured on %s: %s", s.name, rw.name, why)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// measureExternal logs why it rejected a sample; the
			// failure says it too. (No test in this package runs in
			// parallel with another.)
			var logged bytes.Buffer
			log.SetOutput(&logged)
			o := measureExternal(ctx, env, rw, s, base, 1)
			log.SetOutput(os.Stderr)
			switch {
			case o.err != "":
				t.Fatalf("%s: %s\n%s", rw.name, o.err, logged.String())
			case o.samples == 0 || o.accepted != o.samples:
				t.Fatalf("%s: %d of %d samples accepted, rejected %v\n%s", rw.name, o.accepted, o.samples, o.rejected, logged.String())
			case o.value <= 0:
				t.Errorf("%s: figure %v", rw.name, o.value)
			case rw.client == clientWrk && !o.hasP99:
				t.Errorf("%s: wrk gave no p99", rw.name)
			case rw.client == clientSTime && o.conns == 0:
				t.Errorf("%s: s_time timed no connection", rw.name)
			case rw.client == clientSTime && rw.resume && o.resumed != o.conns:
				t.Errorf("%s: %d of %d connections resumed, want all", rw.name, o.resumed, o.conns)
			case rw.client == clientSTime && !rw.resume && o.resumed != 0:
				t.Errorf("%s: %d of %d connections resumed, want none", rw.name, o.resumed, o.conns)
			}
			t.Logf("%s: %s", rw.name, o.logLine(rw))
		})
	}
}
