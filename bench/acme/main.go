// Command acme measures the engine's automatic HTTPS against Pebble, Let's
// Encrypt's test CA, on loopback, and writes docs/BENCHMARKS-acme.md:
//
//   - the time from starting `engine serve` (with an empty ACME storage) to
//     the first HTTPS response whose certificate chains to Pebble's root
//     and whose body's BLAKE3 is the file's, repeated with a new storage
//     (a new account and order) each time;
//
//   - full TLS handshakes per second (no resumption), and the server's CPU
//     per handshake, with the certificate from ACME (looked up in
//     certmagic's cache at every handshake) against the same certificate
//     and key given as files: two engine processes, the same chain bytes,
//     measured in turns.
//
//     go run ./bench/acme [--repeats 5] [--duration 5s] [--conns 16] [--out docs/BENCHMARKS-acme.md]
//
// Pebble and pebble-challtestsrv are found on $PATH or in $(go env
// GOPATH)/bin, and installed there with go install when missing.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/bench/peer"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/internal/stats"
)

const pebbleVersion = "v2.10.3"

func main() {
	repeats := flag.Int("repeats", 5, "repeats of each measurement")
	duration := flag.Duration("duration", 5*time.Second, "length of one handshake run")
	conns := flag.Int("conns", 16, "handshakes in flight at once")
	out := flag.String("out", "docs/BENCHMARKS-acme.md", "page to write")
	flag.Parse()
	log.SetFlags(0)

	h, err := bench.NewHarness("bench-acme-")
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	work, engineBin := h.Work, h.Engine

	root := filepath.Join(work, "root")
	os.MkdirAll(root, 0o755)
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i*7 + i>>9)
	}
	os.WriteFile(filepath.Join(root, "file.bin"), body, 0o644)
	want := blake3.Sum256(body)

	ca := startCA(work)
	defer ca.stop()

	// 1. Start to the first verified response, with a new storage each time.
	var startTimes []time.Duration
	for i := 0; i < *repeats; i++ {
		storage := filepath.Join(work, fmt.Sprintf("storage-%d", i))
		cfg := ca.engineConfig(work, fmt.Sprintf("start%d", i), root, storage, fmt.Sprintf("[[sites]]\ndomain = \"a.example.com\"\nroot = %q\n[sites.tls]\nacme = true\n", root))
		t0 := time.Now()
		e := startEngine(engineBin, cfg)
		var d time.Duration
		for {
			got, err := get(e.Addr, "a.example.com", "/file.bin", ca.roots)
			if err == nil && blake3.Sum256(got) == want {
				d = time.Since(t0)
				break
			}
			if time.Since(t0) > time.Minute {
				e.Stop()
				log.Fatalf("no verified response within a minute: %v\n%s", err, e.Log())
			}
			time.Sleep(5 * time.Millisecond)
		}
		e.Stop() // the next engine takes the same port, where Pebble validates
		startTimes = append(startTimes, d)
		log.Printf("start to first verified response: %v", d.Round(time.Millisecond))
	}

	// 2. Handshakes per second: ACME vs the same certificate from files.
	storage := filepath.Join(work, "storage-hs")
	acmeSite := fmt.Sprintf("[[sites]]\ndomain = \"a.example.com\"\nroot = %q\n[sites.tls]\nacme = true\n", root)
	acmeCfg := ca.engineConfig(work, "acme", root, storage, acmeSite)
	acmeE := startEngine(engineBin, acmeCfg)
	defer acmeE.Stop()
	for {
		if _, err := get(acmeE.Addr, "a.example.com", "/file.bin", ca.roots); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	certFile, keyFile := storedCert(storage, "a.example.com")
	fileSite := fmt.Sprintf("[[sites]]\ndomain = \"a.example.com\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n", root, certFile, keyFile)
	fileCfg := ca.engineConfig(work, "file", root, "", fileSite)
	fileE := startEngine(engineBin, fileCfg)
	defer fileE.Stop()
	servers := []*peer.Engine{acmeE, fileE}
	names := []string{"ACME certificate (certmagic cache)", "the same certificate and key from files"}
	rates := make([][]float64, 2)
	cpus := make([][]float64, 2)
	kx := []map[string]int64{{}, {}}
	for r := 0; r < *repeats; r++ {
		for k := range servers {
			i := (k + r) % 2 // alternate which goes first
			n, cpu, groups := handshakes(servers[i], *conns, *duration, ca.roots)
			rate := float64(n) / duration.Seconds()
			rates[i] = append(rates[i], rate)
			cpus[i] = append(cpus[i], cpu.Seconds()*1e6/float64(n))
			for g, c := range groups {
				kx[i][g] += c
			}
			log.Printf("%s: %.0f handshakes/s, %.0f µs server CPU each, %s", names[i], rate, cpu.Seconds()*1e6/float64(n), bench.KeyExchangeCounts(groups))
		}
	}

	page := render(results{
		command: strings.Join(append([]string{"go run ./bench/acme"}, os.Args[1:]...), " "), when: time.Now().UTC(),
		preamble: h.Preamble(), treeNote: h.TreeNote(), pebble: pebbleAbout(ca), workers: runtime.NumCPU(),
		repeats: *repeats, duration: *duration, conns: *conns,
		startTimes: startTimes, names: names, rates: rates, cpus: cpus, kx: kx,
	})
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(page)
}

// ca is Pebble and its DNS.
type ca struct {
	dir              string
	port, mgmt       int
	httpPort         int
	tlsPort          int
	caRoot           string
	roots            *x509.CertPool
	procs            []*exec.Cmd
	pebbleBin, dnsBn string
}

func startCA(work string) *ca {
	c := &ca{dir: filepath.Join(work, "pebble"), port: freePort(), mgmt: freePort(), httpPort: freePort(), tlsPort: freePort()}
	os.MkdirAll(c.dir, 0o755)
	c.pebbleBin, c.dnsBn = goTool("pebble"), goTool("pebble-challtestsrv")
	cert, err := selfsigned.New("pebble", 24*time.Hour, "localhost")
	if err != nil {
		log.Fatal(err)
	}
	cp, kp, _ := selfsigned.PEM(cert)
	c.caRoot = filepath.Join(c.dir, "cert.pem")
	os.WriteFile(c.caRoot, cp, 0o644)
	os.WriteFile(filepath.Join(c.dir, "key.pem"), kp, 0o600)
	dns := fmt.Sprintf("127.0.0.1:%d", freePort())
	c.run(exec.Command(c.dnsBn, "-dnsserver", dns, "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-http01", "", "-https01", "",
		"-tlsalpn01", "", "-doh", "", "-management", fmt.Sprintf("127.0.0.1:%d", freePort())))
	conf := map[string]any{"pebble": map[string]any{
		"listenAddress": fmt.Sprintf("127.0.0.1:%d", c.port), "managementListenAddress": fmt.Sprintf("127.0.0.1:%d", c.mgmt),
		"certificate": c.caRoot, "privateKey": filepath.Join(c.dir, "key.pem"), "httpPort": c.httpPort, "tlsPort": c.tlsPort,
		"externalAccountBindingRequired": false, "keyAlgorithm": "ecdsa", "retryAfter": map[string]int{"authz": 1, "order": 1},
		"profiles": map[string]any{"default": map[string]any{"description": "bench", "validityPeriod": 7776000}},
	}}
	jb, _ := json.Marshal(conf)
	os.WriteFile(filepath.Join(c.dir, "pebble.json"), jb, 0o644)
	cmd := exec.Command(c.pebbleBin, "-config", filepath.Join(c.dir, "pebble.json"), "-dnsserver", dns)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	c.run(cmd)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var root []byte
	for i := 0; i < 100; i++ {
		resp, err := hc.Get(fmt.Sprintf("https://localhost:%d/roots/0", c.mgmt))
		if err == nil {
			root, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.roots = x509.NewCertPool()
	if !c.roots.AppendCertsFromPEM(root) {
		log.Fatal("no root from Pebble's management API")
	}
	return c
}

func (c *ca) run(cmd *exec.Cmd) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		log.Fatalf("%s: %v", cmd.Path, err)
	}
	c.procs = append(c.procs, cmd)
}

func (c *ca) stop() {
	for _, p := range c.procs {
		p.Process.Kill()
		p.Wait()
	}
}

// engineConfig writes an engine config on the CA's TLS-ALPN-01 port.
// An engine without ACME (storage "") gets a port of its own.
func (c *ca) engineConfig(work, name, root, storage, sites string) string {
	p := filepath.Join(work, name+".toml")
	port := c.tlsPort
	if storage == "" {
		port = freePort()
	}
	text := fmt.Sprintf("listen = \"127.0.0.1:%d\"\nworkers = %d\n[kernel]\nktls = \"auto\"\n%s", port, runtime.NumCPU(), sites)
	if storage != "" {
		text += fmt.Sprintf("[acme]\nemail = \"bench@example.com\"\nagree = true\nca = \"https://localhost:%d/dir\"\nca_root = %q\nstorage = %q\nchallenges = [\"tls-alpn-01\"]\n",
			c.port, c.caRoot, storage)
	}
	os.WriteFile(p, []byte(text), 0o644)
	return p
}

// goTool finds a Pebble tool, installing it with go install if missing.
func goTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gp, _ := exec.Command("go", "env", "GOPATH").Output()
	bin := filepath.Join(strings.TrimSpace(string(gp)), "bin")
	p := filepath.Join(bin, name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	log.Printf("installing %s %s with go install", name, pebbleVersion)
	cmd := exec.Command("go", "install", "github.com/letsencrypt/pebble/v2/cmd/"+name+"@"+pebbleVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if b, err := cmd.CombinedOutput(); err != nil {
		log.Fatalf("go install %s: %v\n%s", name, err, b)
	}
	return p
}

// startEngine starts bin serve -c cfg, or ends the run.
func startEngine(bin, cfg string) *peer.Engine {
	e, err := peer.StartEngine(bin, cfg, -1, false)
	if err != nil {
		log.Fatal(err)
	}
	return e
}

func get(addr, name, path string, roots *x509.CertPool) ([]byte, error) {
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + name + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return b, err
}

// handshakes runs conns loops of full handshakes against e for d and
// returns how many completed, the server CPU they cost and the key
// exchanges they negotiated.
func handshakes(e *peer.Engine, conns int, d time.Duration, roots *x509.CertPool) (int64, time.Duration, map[string]int64) {
	var n, fails atomic.Int64
	var mu sync.Mutex
	groups := map[string]int64{}
	stop := time.Now().Add(d)
	cpu0 := bench.ProcessCPU(e.Cmd.Process.Pid)
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conf := &tls.Config{RootCAs: roots, ServerName: "a.example.com", SessionTicketsDisabled: true}
			for time.Now().Before(stop) {
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.Addr, conf)
				if err != nil {
					fails.Add(1)
					continue
				}
				g := bench.KeyExchangeOf(c.ConnectionState())
				c.Close()
				n.Add(1)
				mu.Lock()
				groups[g]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	cpu := bench.ProcessCPU(e.Cmd.Process.Pid) - cpu0
	if fails.Load() > 0 {
		log.Printf("%d handshakes failed", fails.Load())
	}
	return n.Load(), cpu, groups
}

// storedCert returns the certificate and key certmagic saved for name.
func storedCert(storage, name string) (string, string) {
	var crt, key string
	filepath.Walk(storage, func(p string, info os.FileInfo, err error) error {
		switch filepath.Base(p) {
		case name + ".crt":
			crt = p
		case name + ".key":
			key = p
		}
		return nil
	})
	if crt == "" || key == "" {
		log.Fatalf("no certificate for %s in %s", name, storage)
	}
	return crt, key
}

func freePort() int {
	p, err := peer.FreePort()
	if err != nil {
		log.Fatal(err)
	}
	return p
}

func durs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d)
	}
	return out
}

func minD(v []time.Duration) time.Duration {
	return time.Duration(stats.Min(durs(v))).Round(time.Millisecond)
}

func maxD(v []time.Duration) time.Duration {
	return time.Duration(stats.Max(durs(v))).Round(time.Millisecond)
}
