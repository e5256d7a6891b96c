// Command obs measures what observability costs the engine: requests per
// second and server CPU per request for a 1 KiB file on keep-alive HTTP/1.1
// connections, with the access log off, in nginx's combined format and in
// JSON (both to a file), and with a scraper reading /metrics every 100 ms,
// side by side in one run: one engine process per configuration, taking
// turns, repeated. It writes docs/BENCHMARKS-observability.md.
//
//	go run ./bench/obs [--repeats 5] [--duration 5s] [--connections 64] [--out docs/BENCHMARKS-observability.md]
//
// The client is engine bench in this process: every response is checked
// against the file's BLAKE3 (a sample with one wrong byte does not count).
// The server runs one reactor (workers = 1), so the client has the other
// CPU of a 2-CPU machine; when the client is what limits requests per
// second, the server's CPU per request is the figure that shows the cost.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/bench/peer"
	"github.com/mediaship/engine/integrity"
)

// variant is one configuration measured.
type variant struct {
	name   string
	log    string // access_log_format, or "" for access_log = "off"
	scrape bool   // a scraper reads /metrics every 100 ms
	nginx  bool   // nginx instead, for reference: its own log's cost
}

var variants = []variant{
	{"access log off", "", false, false},
	{"access log combined (file)", "combined", false, false},
	{"access log json (file)", "json", false, false},
	{"access log off, /metrics every 100 ms", "", true, false},
	{"access log json, /metrics every 100 ms", "json", true, false},
	{"nginx, access_log off", "", false, true},
	{"nginx, access_log combined (file)", "combined", false, true},
}

func main() {
	repeats := flag.Int("repeats", 5, "turns of every configuration")
	duration := flag.Duration("duration", 5*time.Second, "measured time of one run")
	conns := flag.Int("connections", 64, "keep-alive connections")
	rate := flag.Float64("rate", 10000, "requests per second offered in the verified runs (open loop)")
	out := flag.String("out", "docs/BENCHMARKS-observability.md", "page to write")
	flag.Parse()
	log.SetFlags(0)
	pinned := bench.PinSelf()

	h, err := bench.NewHarness("bench-obs-")
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	work, bin := h.Work, h.Engine

	root := filepath.Join(work, "root")
	os.MkdirAll(root, 0o755)
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	os.WriteFile(filepath.Join(root, "1k.bin"), body, 0o644)
	d, _, err := integrity.Sum(bytes.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}

	nginxBin, _ := exec.LookPath("nginx")
	if nginxBin == "" {
		log.Printf("nginx is not installed (apt-get install nginx): no reference rows")
		variants = variants[:5]
	}
	procs := make([]*engineProc, len(variants))
	for i, v := range variants {
		if v.nginx {
			procs[i] = startNginx(nginxBin, work, root, i, v)
		} else {
			procs[i] = startEngine(bin, work, root, i, v)
		}
		defer procs[i].stop()
	}
	// Ctrl-C stops the servers too: they are not left running.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		for _, p := range procs {
			p.stop()
		}
		h.Close()
		os.Exit(1)
	}()
	p99 := make([][]float64, len(variants)) // ms, verified runs
	cpu := make([][]float64, len(variants))
	wrkBin, _ := exec.LookPath("wrk")
	wrkScript := filepath.Join(work, "done.lua")
	os.WriteFile(wrkScript, []byte(wrkLua), 0o644)
	wrps := make([][]float64, len(variants))
	wcpu := make([][]float64, len(variants))
	logged := make([]int64, len(variants))
	dropped := make([]float64, len(variants))
	for r := 0; r < *repeats; r++ {
		for k := range variants {
			i := (k + r) % len(variants) // each takes each place in the order
			p := procs[i]
			stop := make(chan struct{})
			var scrapes sync.WaitGroup
			var nScrapes int
			if variants[i].scrape {
				scrapes.Add(1)
				go func() { defer scrapes.Done(); nScrapes = scraper(p.admin, stop) }()
			}
			c := bench.Config{URLs: []string{"http://" + p.addr + "/1k.bin"}, Protocol: "h1", Connections: *conns, Rate: *rate,
				Duration: *duration, Samples: 5, Warmup: time.Second, ExpectDigest: &d, ExpectSize: 1024, RangeLast: -1, ServerPID: p.cmd.Process.Pid}
			rep, err := bench.Run(context.Background(), c)
			close(stop)
			scrapes.Wait()
			if err != nil {
				log.Fatal(err)
			}
			if rep.Accepted != len(rep.Samples) || rep.Server == nil {
				log.Fatalf("%s: %d of %d samples accepted (errors %v)", variants[i].name, rep.Accepted, len(rep.Samples), rep.Errors)
			}
			if rep.RPS.Median < 0.97*(*rate) {
				log.Fatalf("%s: %.0f req/s, below the %.0f offered: lower --rate", variants[i].name, rep.RPS.Median, *rate)
			}
			responses := rep.RPS.Median * duration.Seconds()
			p99[i] = append(p99[i], float64(rep.Latency.P99.Microseconds())/1000)
			cpu[i] = append(cpu[i], rep.Server.CPUSeconds*1e6/responses)
			extra := ""
			if variants[i].scrape {
				extra = fmt.Sprintf(", %d scrapes", nScrapes)
			}
			log.Printf("%-40s %8.0f req/s offered, p99 %v, %.2f µs server CPU/request%s", variants[i].name, rep.RPS.Median, rep.Latency.P99, rep.Server.CPUSeconds*1e6/responses, extra)
			if wrkBin == "" {
				continue
			}
			stop = make(chan struct{})
			if variants[i].scrape {
				scrapes.Add(1)
				go func() { defer scrapes.Done(); scraper(p.admin, stop) }()
			}
			w := runWrk(wrkBin, wrkScript, "http://"+p.addr+"/1k.bin", *conns, *duration, p)
			close(stop)
			scrapes.Wait()
			wrps[i] = append(wrps[i], w.rps)
			wcpu[i] = append(wcpu[i], w.cpuPerReq)
			log.Printf("%-40s %8.0f req/s  %.2f µs server CPU/request (wrk)", variants[i].name, w.rps, w.cpuPerReq)
		}
	}
	for i, v := range variants {
		procs[i].stop()
		if v.log != "" {
			logged[i] = countLines(procs[i].logPath)
		}
		dropped[i] = procs[i].dropped
	}

	page := render(results{
		command:  strings.Join(append([]string{"go run ./bench/obs"}, os.Args[1:]...), " "),
		when:     time.Now().UTC(),
		preamble: h.Preamble(), treeNote: h.TreeNote(), pinned: pinned,
		repeats: *repeats, duration: *duration, conns: *conns, rate: *rate,
		nginx: nginxAbout(nginxBin), wrk: wrkAbout(wrkBin), variants: variants,
		wrps: wrps, wcpu: wcpu, cpu: cpu, p99: p99, logged: logged, dropped: dropped,
	})
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(page)
}

// scraper reads /metrics every 100 ms until stop, and returns how many
// times it did.
func scraper(admin string, stop chan struct{}) int {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	c := &http.Client{Timeout: 5 * time.Second}
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-t.C:
		}
		resp, err := c.Get("http://" + admin + "/metrics")
		if err != nil {
			log.Fatalf("scrape: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			log.Fatalf("scrape: %s", resp.Status)
		}
		n++
	}
}

type engineProc struct {
	cmd     *exec.Cmd
	addr    string
	admin   string
	logPath string
	dropped float64
	stopped bool
}

func startEngine(bin, work, root string, i int, v variant) *engineProc {
	e := &engineProc{logPath: filepath.Join(work, fmt.Sprintf("access-%d.log", i))}
	cfg := fmt.Sprintf("listen = \"127.0.0.1:0\"\nworkers = 1\nroot = %q\n", root)
	if v.log != "" {
		cfg += fmt.Sprintf("access_log = %q\naccess_log_format = %q\n", e.logPath, v.log)
	}
	cfg += "[admin]\nlisten = \"127.0.0.1:0\"\n"
	path := filepath.Join(work, fmt.Sprintf("engine-%d.toml", i))
	os.WriteFile(path, []byte(cfg), 0o644)
	pe, err := peer.StartEngine(bin, path, 1, true) // the harness keeps CPU 0
	if err != nil {
		log.Fatal(err)
	}
	e.cmd, e.addr, e.admin = pe.Cmd, pe.Addr, pe.Admin
	return e
}

// startNginx runs Debian's nginx with one worker, serving root, with or
// without its access log in the combined format (unbuffered: a write per
// line, nginx's default).
func startNginx(bin, work, root string, i int, v variant) *engineProc {
	dir := filepath.Join(work, fmt.Sprintf("nginx-%d", i))
	os.MkdirAll(dir, 0o755)
	addr, err := peer.FreeAddr()
	if err != nil {
		log.Fatal(err)
	}
	e := &engineProc{logPath: filepath.Join(dir, "access.log"), addr: addr}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	logLine := "access_log off;"
	if v.log != "" {
		logLine = fmt.Sprintf("access_log %s combined;", e.logPath)
	}
	conf := fmt.Sprintf(`%[1]s
worker_processes 1;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
http {
    %[3]s
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    server { listen %[4]s; root %[5]s; }
}
`, user, dir, logLine, e.addr, root)
	path := filepath.Join(dir, "nginx.conf")
	os.WriteFile(path, []byte(conf), 0o644)
	e.cmd = peer.Command(1, bin, "-c", path, "-e", filepath.Join(dir, "error.log"))
	if err := e.cmd.Start(); err != nil {
		log.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + e.addr + "/1k.bin"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			log.Fatalf("nginx did not start:\n%s", b)
		}
	}
	return e
}

// stop reads the final drop count and stops the server.
func (e *engineProc) stop() {
	if e.stopped {
		return
	}
	e.stopped = true
	sig := os.Signal(syscall.SIGQUIT) // nginx's graceful stop
	if e.admin != "" {
		sig = os.Interrupt
		if resp, err := http.Get("http://" + e.admin + "/metrics"); err == nil {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "engine_access_log_dropped_lines_total "); ok {
					e.dropped, _ = strconv.ParseFloat(v, 64)
				}
			}
			resp.Body.Close()
		}
	}
	peer.Stop(e.cmd, sig)
}

func countLines(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
	}
	return n
}

// base is the index of the row variant i is compared with: the same
// server with no log and no scraper.
func base(variants []variant, i int) int {
	for j := i; j >= 0; j-- {
		if variants[j].nginx == variants[i].nginx && variants[j].log == "" && !variants[j].scrape {
			return j
		}
	}
	return 0
}

// wrkLua has wrk print its exact counters in one line.
const wrkLua = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("obs-wrk: duration_us=%d requests=%d bytes=%d errors=%d status=%d\n",
    summary.duration, summary.requests, summary.bytes, e.connect + e.read + e.write + e.timeout, e.status))
end
`

type wrkResult struct{ rps, cpuPerReq float64 }

// runWrk runs wrk against url and checks what it can: no error, no
// status of 400 or above, a plausible byte count per response.
func runWrk(bin, script, url string, conns int, d time.Duration, p *engineProc) wrkResult {
	cpu0 := bench.ProcessCPU(p.cmd.Process.Pid)
	out, err := exec.Command(bin, "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(int(d.Seconds()))+"s", "-s", script, url).CombinedOutput()
	cpu := (bench.ProcessCPU(p.cmd.Process.Pid) - cpu0).Seconds()
	if err != nil {
		log.Fatalf("wrk: %v\n%s", err, out)
	}
	var dur, reqs, bytes, errs, status int64
	found := false
	for _, l := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(l, "obs-wrk: "); ok {
			fmt.Sscanf(rest, "duration_us=%d requests=%d bytes=%d errors=%d status=%d", &dur, &reqs, &bytes, &errs, &status)
			found = true
		}
	}
	if !found || reqs == 0 || errs > 0 || status > 0 || bytes < reqs*1024 || bytes > (reqs+int64(conns))*(1024+600) {
		log.Fatalf("wrk run does not count: requests %d bytes %d errors %d statuses>=400 %d\n%s", reqs, bytes, errs, status, out)
	}
	return wrkResult{rps: float64(reqs) / (float64(dur) / 1e6), cpuPerReq: cpu * 1e6 / float64(reqs)}
}
