// Command compare runs the same integrity-gated benchmark matrix against
// this engine, nginx and Caddy on loopback, interleaved and repeated, and
// writes docs/BENCHMARKS.md with the table and the ratios.
//
//	go run ./bench/compare [--quick] [--repeats 3] [--servers engine,nginx,caddy] [--caddy PATH]
//
// It generates the fixtures (a 99,943,778-byte file, 1 MiB, 1 KiB and
// their B3SUMS), one self-signed certificate, and configurations for the
// peers from shared/peers. nginx comes from Debian (apt-get install
// nginx); Caddy is built from the Go module proxy
// (GOBIN=DIR go install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9).
// A server that is missing is left out of the table, and a cell a server
// cannot do (a protocol it does not speak) says so.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"debug/buildinfo"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/selfsigned"
)

// A server under test: its URLs per protocol and its process.
type server struct {
	name  string
	plain string // base URL, http://
	tls   string // base URL, https:// (h1, h2)
	tlsNR string // https without session resumption (new connection rows); "" = tls
	h3    string // base URL for HTTP/3, "" if not spoken
	h2    bool
	pid   int
	cmd   *exec.Cmd
	// The engine serves plain and TLS from two processes; the TLS one is
	// measured on TLS rows.
	tlsCmd *exec.Cmd
}

// A row of the matrix.
type row struct {
	name, unit  string
	proto       string // h1, h2, h3
	tls         bool
	file        string
	connections int
	streams     int // concurrent requests per connection (h2, h3)
	newConns    bool
	rate        float64
	metric      string // "mibps", "rps", "p99"
}

func matrix(quick bool) []row {
	rows := []row{
		{name: "large file, 1 connection, h1 plain", unit: "MiB/s", proto: "h1", file: "large.bin", connections: 1, metric: "mibps"},
		{name: "large file, 1 connection, h1 TLS", unit: "MiB/s", proto: "h1", tls: true, file: "large.bin", connections: 1, metric: "mibps"},
		{name: "large file, 1 connection, h2 TLS", unit: "MiB/s", proto: "h2", tls: true, file: "large.bin", connections: 1, metric: "mibps"},
		{name: "large file, 1 connection, h3", unit: "MiB/s", proto: "h3", tls: true, file: "large.bin", connections: 1, metric: "mibps"},
		{name: "large file, 16 streams on 1 connection, h2 TLS", unit: "MiB/s", proto: "h2", tls: true, file: "large.bin", connections: 1, streams: 16, metric: "mibps"},
		{name: "large file, 16 streams on 1 connection, h3", unit: "MiB/s", proto: "h3", tls: true, file: "large.bin", connections: 1, streams: 16, metric: "mibps"},
		{name: "large file, 16 connections, h1 plain", unit: "MiB/s", proto: "h1", file: "large.bin", connections: 16, metric: "mibps"},
		{name: "large file, 16 connections, h1 TLS", unit: "MiB/s", proto: "h1", tls: true, file: "large.bin", connections: 16, metric: "mibps"},
		{name: "large file, 16 connections, h2 TLS", unit: "MiB/s", proto: "h2", tls: true, file: "large.bin", connections: 16, metric: "mibps"},
		{name: "large file, 16 connections, h3", unit: "MiB/s", proto: "h3", tls: true, file: "large.bin", connections: 16, metric: "mibps"},
		{name: "1 KiB, 64 keep-alive connections, h1 plain", unit: "req/s", proto: "h1", file: "1k.bin", connections: 64, metric: "rps"},
		{name: "1 KiB, new TLS connection per request (16 at once)", unit: "req/s", proto: "h1", tls: true, file: "1k.bin", connections: 16, newConns: true, metric: "rps"},
		{name: "1 KiB at a fixed 5,000 req/s, h1 plain: p99 latency", unit: "ms p99", proto: "h1", file: "1k.bin", connections: 64, rate: 5000, metric: "p99"},
		{name: "1 KiB, 32 streams on each of 4 connections, h2 TLS", unit: "req/s", proto: "h2", tls: true, file: "1k.bin", connections: 4, streams: 32, metric: "rps"},
	}
	if quick {
		return []row{rows[0], rows[1], rows[2], rows[10], rows[12]}
	}
	return rows
}

func main() {
	out := flag.String("out", "docs/BENCHMARKS.md", "report to write")
	repeats := flag.Int("repeats", 3, "interleaved repeats")
	duration := flag.Duration("duration", 6*time.Second, "measured time per cell")
	samples := flag.Int("samples", 3, "samples per cell")
	warmup := flag.Duration("warmup", time.Second, "warmup per cell")
	quick := flag.Bool("quick", false, "a short run over a few rows (a smoke test, not a measurement)")
	servers := flag.String("servers", "engine,nginx,caddy", "servers to compare")
	caddyBin := flag.String("caddy", os.Getenv("CADDY"), "caddy binary (default: caddy on PATH)")
	only := flag.String("rows", "", "measure only the rows whose name matches this regular expression")
	peers := flag.String("peers", "", "shared/peers directory (default: ../shared/peers beside the repository)")
	flag.Parse()
	if *quick {
		*repeats, *duration, *samples, *warmup = 1, 2*time.Second, 2, 500*time.Millisecond
	}
	repo, err := repoRoot()
	if err != nil {
		log.Fatal(err)
	}
	if *peers == "" {
		*peers = filepath.Join(repo, "..", "shared", "peers")
	}
	work, err := os.MkdirTemp("", "engine-compare-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755) // nginx workers run as www-data
	log.Printf("fixtures and configurations in %s", work)
	manifest, err := fixtures(work)
	if err != nil {
		log.Fatal(err)
	}
	if err := writeCert(work); err != nil {
		log.Fatal(err)
	}
	var list []*server
	for _, name := range strings.Split(*servers, ",") {
		var s *server
		var err error
		switch name {
		case "engine":
			s, err = startEngine(repo, work)
		case "nginx":
			s, err = startNginx(work, *peers)
		case "caddy":
			s, err = startCaddy(work, *peers, *caddyBin)
		default:
			log.Fatalf("unknown server %q", name)
		}
		if err != nil {
			log.Printf("%s left out: %v", name, err)
			continue
		}
		defer s.stop()
		list = append(list, s)
	}
	if len(list) == 0 {
		log.Fatal("no server to measure")
	}

	rows := matrix(*quick)
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			log.Fatalf("--rows: %v", err)
		}
		rows = slices.DeleteFunc(rows, func(r row) bool { return !re.MatchString(r.name) })
		if len(rows) == 0 {
			log.Fatalf("--rows %q matches no row", *only)
		}
	}
	// results[row][server] collects one figure per repeat.
	results := make([]map[string][]float64, len(rows))
	notes := make([]map[string]string, len(rows))
	cpu := make([]map[string][]float64, len(rows))
	for i := range rows {
		results[i], notes[i], cpu[i] = map[string][]float64{}, map[string]string{}, map[string][]float64{}
	}
	// Ctrl-C or SIGTERM stops the run and the servers; nothing is written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	interrupted := func() bool {
		if ctx.Err() == nil {
			return false
		}
		log.Print("interrupted: servers stopped, no report written")
		for _, s := range list {
			s.stop()
		}
		os.RemoveAll(work)
		return true
	}
	for r := 0; r < *repeats; r++ {
		for i, rw := range rows {
			order := rotate(list, r+i)
			for _, s := range order {
				base, why := s.base(rw)
				if base == "" {
					notes[i][s.name] = why
					continue
				}
				c := bench.Config{URLs: []string{base + "/" + rw.file}, Protocol: rw.proto, Connections: rw.connections, Streams: rw.streams,
					Duration: *duration, Samples: *samples, Warmup: *warmup, Rate: rw.rate, Manifest: manifest,
					LocalRoot: filepath.Join(work, "www"), ExpectSize: -1, RangeLast: -1, Insecure: true,
					NewConnectionPerRequest: rw.newConns, ServerPID: s.pidFor(rw), Timeout: 30 * time.Second}
				rep, err := bench.Run(ctx, c)
				if interrupted() {
					os.Exit(130)
				}
				if err != nil {
					notes[i][s.name] = err.Error()
					continue
				}
				if rep.Accepted < len(rep.Samples) {
					notes[i][s.name] = fmt.Sprintf("%d of %d samples rejected (%s)", len(rep.Samples)-rep.Accepted, len(rep.Samples), rejections(rep))
				}
				if rep.Accepted == 0 {
					continue
				}
				v := rep.MiBps.Median
				switch rw.metric {
				case "rps":
					v = rep.RPS.Median
				case "p99":
					v = float64(rep.Latency.P99) / 1e6
				}
				results[i][s.name] = append(results[i][s.name], v)
				if rep.Server != nil && rep.Bytes > 0 {
					cpu[i][s.name] = append(cpu[i][s.name], rep.Server.CPUSeconds/(float64(rep.Bytes)/(1<<30)))
				}
				log.Printf("repeat %d  %-52s %-7s %10.1f %s", r+1, rw.name, s.name, v, rw.unit)
			}
		}
	}
	ceil := selfChecks(ctx, *duration, *samples, *warmup)
	if interrupted() {
		os.Exit(130)
	}
	doc := render(rows, list, results, notes, cpu, ceil, *repeats, *duration, *samples, *quick)
	if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, *out)), 0o755); err != nil {
		log.Fatal(err)
	}
	path := *out
	if !filepath.IsAbs(path) {
		path = filepath.Join(repo, path)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(doc)
	log.Printf("wrote %s", path)
}

// base returns the URL base for a row, or "" and why the server cannot.
func (s *server) base(r row) (string, string) {
	switch {
	case r.proto == "h3":
		if s.h3 == "" {
			return "", "no HTTP/3"
		}
		return s.h3, ""
	case r.proto == "h2":
		if !s.h2 {
			return "", "no HTTP/2"
		}
		return s.tls, ""
	case r.tls && r.newConns && s.tlsNR != "":
		return s.tlsNR, ""
	case r.tls:
		return s.tls, ""
	}
	return s.plain, ""
}

func rotate(l []*server, k int) []*server {
	out := make([]*server, 0, len(l))
	for i := range l {
		out = append(out, l[(i+k)%len(l)])
	}
	return out
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type ceiling struct {
	name string
	rep  *bench.Report
}

// selfChecks measures the client alone, for the rows it could limit.
func selfChecks(ctx context.Context, d time.Duration, samples int, warmup time.Duration) []ceiling {
	var out []ceiling
	for _, sc := range []struct {
		name  string
		conns int
		size  int64
		tls   bool
	}{
		{"h1 plain, 1 connection, 99,943,778 bytes", 1, 99943778, false},
		{"h1 plain, 16 connections, 99,943,778 bytes", 16, 99943778, false},
		{"h1 TLS, 1 connection, 99,943,778 bytes", 1, 99943778, true},
		{"h1 plain, 64 connections, 1 KiB", 64, 1024, false},
	} {
		r, err := bench.SelfCheck(ctx, bench.Config{Connections: sc.conns, Duration: d, Samples: samples, Warmup: warmup}, sc.size, sc.tls)
		if err == nil {
			out = append(out, ceiling{sc.name, r})
		}
	}
	return out
}

func render(rows []row, list []*server, results []map[string][]float64, notes []map[string]string, cpu []map[string][]float64,
	ceil []ceiling, repeats int, d time.Duration, samples int, quick bool) string {
	var b strings.Builder
	kernel, _ := exec.Command("uname", "-sr").Output()
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# Benchmarks\n\nGenerated by `%s` on %s.\n\n", strings.Join(append([]string{"go run ./bench/compare"}, os.Args[1:]...), " "), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	if quick {
		b.WriteString("**Quick mode: a smoke test of the harness, not a measurement.**\n\n")
	}
	fmt.Fprintf(&b, "Machine: %s, %d CPUs, %s, %s. Client: `engine bench` in the same process as this harness; servers on loopback, one certificate (ECDSA P-256), TLS 1.3.\n\n",
		host, runtime.NumCPU(), strings.TrimSpace(string(kernel)), runtime.Version())
	fmt.Fprintf(&b, "Every figure is the median over %d interleaved repeats (the server order rotating) of the median over %d samples of %v, after a warmup; a sample counts only when every response in it had the right status, the exact length and the BLAKE3 digest from the fixtures' B3SUMS. Servers:\n\n", repeats, samples, d/time.Duration(samples))
	for _, s := range list {
		fmt.Fprintf(&b, "- **%s**: %s\n", s.name, s.describe())
	}
	b.WriteString("\n| workload | unit |")
	for _, s := range list {
		fmt.Fprintf(&b, " %s |", s.name)
	}
	ratios := []string{}
	for _, s := range list {
		if s.name != "engine" {
			ratios = append(ratios, s.name)
			fmt.Fprintf(&b, " engine/%s |", s.name)
		}
	}
	b.WriteString("\n|---|---|")
	for range list {
		b.WriteString("---:|")
	}
	for range ratios {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for i, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |", r.name, r.unit)
		for _, s := range list {
			if v := results[i][s.name]; len(v) > 0 {
				fmt.Fprintf(&b, " %.1f |", median(v))
			} else {
				fmt.Fprintf(&b, " %s |", orDash(notes[i][s.name]))
			}
		}
		e := results[i]["engine"]
		for _, name := range ratios {
			o := results[i][name]
			if len(e) == 0 || len(o) == 0 || median(o) == 0 {
				b.WriteString(" - |")
				continue
			}
			ratio := median(e) / median(o)
			if r.metric == "p99" {
				ratio = median(o) / median(e) // lower is better: show how many times better
			}
			fmt.Fprintf(&b, " %.2f |", ratio)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nRatios above 1 favour the engine (for p99, the other server's latency divided by the engine's).\n")
	b.WriteString("\nServer CPU seconds per GiB served (median), on the throughput rows:\n\n| workload |")
	for _, s := range list {
		fmt.Fprintf(&b, " %s |", s.name)
	}
	b.WriteString("\n|---|")
	for range list {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for i, r := range rows {
		if r.metric != "mibps" {
			continue
		}
		fmt.Fprintf(&b, "| %s |", r.name)
		for _, s := range list {
			if v := cpu[i][s.name]; len(v) > 0 {
				fmt.Fprintf(&b, " %.3f |", median(v))
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
	notesShown := false
	for i, r := range rows {
		for _, s := range list {
			if n := notes[i][s.name]; n != "" && len(results[i][s.name]) > 0 {
				if !notesShown {
					b.WriteString("\nNotes:\n\n")
					notesShown = true
				}
				fmt.Fprintf(&b, "- %s, %s: %s\n", r.name, s.name, n)
			}
		}
	}
	b.WriteString("\n## The client's ceiling (`engine bench --self-check`)\n\nThe same client against an in-process source that answers from memory: a server measured near these figures was limited by the client (which hashes every byte), not by itself.\n\n| self-check | MiB/s | req/s |\n|---|---:|---:|\n")
	for _, c := range ceil {
		fmt.Fprintf(&b, "| %s | %.1f | %.1f |\n", c.name, c.rep.MiBps.Median, c.rep.RPS.Median)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (s *server) describe() string {
	switch s.name {
	case "engine":
		out, _ := exec.Command(s.cmd.Path, "version").Output()
		return strings.TrimSpace(string(out)) + " (two processes: plain, and TLS with HTTP/1.1, HTTP/2 and HTTP/3; kernel TLS as this kernel allows)"
	case "nginx":
		out, _ := exec.Command("nginx", "-v").CombinedOutput()
		return strings.TrimSpace(string(out)) + " (shared/peers/nginx.conf.tmpl: sendfile on, access log off; HTTP/2 on TLS)"
	case "caddy":
		v := "(version unknown)"
		// A caddy built with go install says "unknown" to "caddy version";
		// its build information still names the module version.
		if bi, err := buildinfo.ReadFile(s.cmd.Path); err == nil && bi.Main.Version != "" {
			v = bi.Main.Version + ", " + bi.GoVersion
		} else if out, err := exec.Command(s.cmd.Path, "version").Output(); err == nil {
			v = strings.TrimSpace(string(out))
		}
		return "caddy " + v + " (shared/peers/Caddyfile.tmpl with h1 h2 h3)"
	}
	return ""
}

// pidFor is the process serving a row.
func (s *server) pidFor(r row) int {
	if r.tls && s.tlsCmd != nil {
		return s.tlsCmd.Process.Pid
	}
	return s.pid
}

func (s *server) stop() {
	if s.tlsCmd != nil {
		(&server{cmd: s.tlsCmd}).stop()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
		}
	}
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run from inside the repository")
	}
	return filepath.Dir(mod), nil
}

// fixtures writes the files and their manifest.
func fixtures(work string) ([]integrity.Entry, error) {
	www := filepath.Join(work, "www")
	if err := os.MkdirAll(www, 0o755); err != nil {
		return nil, err
	}
	for name, size := range map[string]int64{"large.bin": 99943778, "1m.bin": 1 << 20, "1k.bin": 1024} {
		f, err := os.Create(filepath.Join(www, name))
		if err != nil {
			return nil, err
		}
		buf := make([]byte, 1<<20)
		for left := size; left > 0; left -= int64(len(buf)) {
			rand.Read(buf)
			f.Write(buf[:min(left, int64(len(buf)))])
		}
		f.Close()
	}
	entries, errs, err := integrity.HashTree(www, integrity.TreeOptions{})
	if err != nil || len(errs) > 0 {
		return nil, fmt.Errorf("hashing fixtures: %v %v", err, errs)
	}
	f, err := os.Create(filepath.Join(www, "B3SUMS"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return entries, integrity.WriteManifest(f, entries)
}

func writeCert(work string) error {
	c, err := selfsigned.New("localhost", 48*time.Hour, "localhost")
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := selfsigned.PEM(c)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "cert.pem"), certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(work, "key.pem"), keyPEM, 0o644)
}

// waitReady polls a URL until it answers 200.
func waitReady(url string) error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for i := 0; i < 100; i++ {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer", url)
}

func startProc(logFile string, name string, args []string, env ...string) (*exec.Cmd, error) {
	lf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = dieWithParent()
	return cmd, cmd.Start()
}

func startEngine(repo, work string) (*server, error) {
	bin := filepath.Join(work, "engine")
	build := exec.Command("go", "build", "-o", bin, "./cmd/engine")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %v\n%s", err, out)
	}
	www := filepath.Join(work, "www")
	cfg := fmt.Sprintf("listen = \"127.0.0.1:9443\"\n[[sites]]\ndomain = \"*\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n[kernel]\nktls = \"auto\"\n",
		www, filepath.Join(work, "cert.pem"), filepath.Join(work, "key.pem"))
	if err := os.WriteFile(filepath.Join(work, "engine-tls.toml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	plain, err := startProc(filepath.Join(work, "engine-plain.log"), bin, []string{"serve", "--root", www, "--listen", "127.0.0.1:9080"})
	if err != nil {
		return nil, err
	}
	tlsCmd, err := startProc(filepath.Join(work, "engine-tls.log"), bin, []string{"serve", "-c", filepath.Join(work, "engine-tls.toml")})
	if err != nil {
		plain.Process.Kill()
		return nil, err
	}
	s := &server{name: "engine", plain: "http://127.0.0.1:9080", tls: "https://127.0.0.1:9443", cmd: plain, pid: plain.Process.Pid,
		tlsCmd: tlsCmd, h2: true, h3: "https://127.0.0.1:9443"}
	if err := waitReady(s.plain + "/1k.bin"); err != nil {
		return nil, err
	}
	return s, waitReady(s.tls + "/1k.bin")
}

func startNginx(work, peers string) (*server, error) {
	if _, err := exec.LookPath("nginx"); err != nil {
		return nil, fmt.Errorf("nginx not installed (apt-get install nginx)")
	}
	tmpl, err := os.ReadFile(filepath.Join(peers, "nginx.conf.tmpl"))
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"run", "logs"} {
		os.MkdirAll(filepath.Join(work, d), 0o755)
	}
	conf := strings.NewReplacer("__DIR__", work, "__KTLS__", "").Replace(string(tmpl))
	path := filepath.Join(work, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd, err := startProc(filepath.Join(work, "nginx.log"), "nginx", []string{"-c", path})
	if err != nil {
		return nil, err
	}
	s := &server{name: "nginx", plain: "http://127.0.0.1:8080", tls: "https://127.0.0.1:8443", tlsNR: "https://127.0.0.1:8444",
		h2: true, cmd: cmd, pid: cmd.Process.Pid}
	return s, waitReady(s.plain + "/1k.bin")
}

func startCaddy(work, peers, bin string) (*server, error) {
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("caddy"); err != nil {
			return nil, fmt.Errorf("no caddy binary (--caddy PATH, or on PATH)")
		}
	}
	tmpl, err := os.ReadFile(filepath.Join(peers, "Caddyfile.tmpl"))
	if err != nil {
		return nil, err
	}
	plain := fmt.Sprintf("http://:9081 {\n\tbind 127.0.0.1\n\troot * %s/www\n\tfile_server\n}\n", work)
	// __PLAIN__ also appears in the template's first comment line: replace
	// only the line that is nothing but the placeholder.
	conf := strings.Replace(string(tmpl), "\n__PLAIN__", "\n"+plain, 1)
	conf = strings.NewReplacer("__DIR__", work, "__TLSPORT__", "9453", "protocols h1 h2", "protocols h1 h2 h3").Replace(conf)
	path := filepath.Join(work, "Caddyfile")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	data := filepath.Join(work, "caddy-data")
	cmd, err := startProc(filepath.Join(work, "caddy.log"), bin, []string{"run", "--config", path, "--adapter", "caddyfile"},
		"XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+data)
	if err != nil {
		return nil, err
	}
	s := &server{name: "caddy", plain: "http://127.0.0.1:9081", tls: "https://127.0.0.1:9453", h3: "https://127.0.0.1:9453",
		h2: true, cmd: cmd, pid: cmd.Process.Pid}
	return s, waitReady(s.tls + "/1k.bin")
}

// rejections sums the reasons the report's samples were rejected for, as
// "reason xN" in a stable order; "unverified" means no response that passed
// its checks streamed during the sample, so none of its bytes were proven.
func rejections(rep *bench.Report) string {
	why := map[string]int{}
	for _, s := range rep.Samples {
		for k, v := range s.Rejected {
			why[k] += v
		}
	}
	keys := make([]string, 0, len(why))
	for k := range why {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s x%d", k, why[k])
	}
	return strings.Join(parts, ", ")
}
