// Command gatecompare measures what a signed-URL check and a response
// header policy cost on small requests: 1 KiB files over 64 keep-alive
// HTTP/1.1 connections (wrk), from the engine and from nginx, each
// serving one path with no policy and one gated path (a signature
// checked, three fields added, Cache-Control set), in one run, the four
// rows taking turns in an order that rotates each repeat.
//
//	go run ./bench/gatecompare [--repeats 7] [--duration 5s] [--layout pinned|shared] [--out docs/BENCHMARKS-gated.md]
//
// --layout pinned (the default) gives each server one CPU (CPU 0: the
// engine with workers = 1, nginx with one worker) and wrk the other (one
// thread, 32 connections): on a 2-CPU machine the rows then measure the
// server alone, not where the scheduler put wrk's threads beside its
// loops. --layout shared lets every process use both CPUs (2 workers,
// wrk with 2 threads and 64 connections).
//
// nginx does the same work with secure_link (MD5 over the expiry, the
// path and a secret: its only choice) and add_header. Before any sample,
// every URL is fetched and its body compared with the file, and the
// gated ones are asked for without their signature: a 403 proves the
// check is on.
package main

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/bench/peer"
	"github.com/mediaship/engine/engine/policy"
)

const secret = "gatecompare-secret-0123456789abcdef"

type row struct {
	name, url string
	server    string // engine or nginx
	gated     bool
	part      bool // one part of the gated row's work, for its decomposition
}

func main() {
	repeats := flag.Int("repeats", 7, "interleaved repeats")
	layout := flag.String("layout", "pinned", "pinned: servers on CPU 0, wrk on CPU 1; shared: every process on every CPU")
	duration := flag.Duration("duration", 5*time.Second, "wrk's time per sample")
	out := flag.String("out", "docs/BENCHMARKS-gated.md", "page to write")
	flag.Parse()
	log.SetFlags(log.Ltime)
	if *layout != "pinned" && *layout != "shared" {
		log.Fatalf("--layout %q: pinned or shared", *layout)
	}
	pinned := *layout == "pinned"
	if pinned && runtime.NumCPU() < 2 {
		log.Fatal("--layout pinned needs 2 CPUs; use --layout shared")
	}
	// on runs a command on CPU cpu when pinned.
	on := func(cpu string, name string, args ...string) *exec.Cmd {
		if !pinned {
			return exec.Command(name, args...)
		}
		return exec.Command("taskset", append([]string{"-c", cpu, name}, args...)...)
	}
	workers, nginxWorkers := 0, "auto"
	if pinned {
		workers, nginxWorkers = 1, "1"
	}
	for _, tool := range []string{"nginx", "wrk"} {
		if _, err := exec.LookPath(tool); err != nil {
			log.Fatalf("%s not installed: apt-get install -y %s, and run this again", tool, tool)
		}
	}
	work, err := os.MkdirTemp("", "gatecompare-*")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	repo, _ := os.Getwd()
	build, err := bench.BuildEngine(repo, filepath.Join(work, "engine"))
	if err != nil {
		log.Fatal(err)
	}
	www := filepath.Join(work, "www")
	body := make([]byte, 1024)
	rand.Read(body)
	for _, d := range []string{"pub", "gated", "hdr", "sig"} {
		os.MkdirAll(filepath.Join(www, d), 0o755)
		os.WriteFile(filepath.Join(www, d, "1k.bin"), body, 0o644)
	}
	os.Chmod(work, 0o755) // nginx's workers run as www-data

	// The engine: one process, the two paths.
	keyFile := filepath.Join(work, "k1")
	os.WriteFile(keyFile, []byte(secret), 0o600)
	ports, err := peer.FreePorts(false, false)
	if err != nil {
		log.Fatal(err)
	}
	cfg := filepath.Join(work, "engine.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`listen = "127.0.0.1:%d"
workers = %d
[[sites]]
domain = "*"
root = %q
[[sites.paths]]
prefix = "/gated/"
auth = "signed"
cache_control = "private, max-age=3600"
set_headers = { "X-Frame-Options" = "DENY", "X-Content-Type-Options" = "nosniff", "Referrer-Policy" = "no-referrer" }
[[sites.paths]]
prefix = "/hdr/"
cache_control = "private, max-age=3600"
set_headers = { "X-Frame-Options" = "DENY", "X-Content-Type-Options" = "nosniff", "Referrer-Policy" = "no-referrer" }
[[sites.paths]]
prefix = "/sig/"
auth = "signed"
cache_control = "no-cache"
[signing]
keys = { k1 = %q }
[integrity]
state_dir = %q
`, ports[0], workers, www, keyFile, filepath.Join(work, "state"))), 0o644)
	eng := on("0", build.Path, "serve", "-c", cfg)
	eng.Stderr = os.Stderr
	if err := eng.Start(); err != nil {
		log.Fatal(err)
	}
	// nginx: the same two paths; secure_link and add_header on one.
	for _, d := range []string{"run", "logs"} {
		os.MkdirAll(filepath.Join(work, d), 0o755)
	}
	ncfg := filepath.Join(work, "nginx.conf")
	os.WriteFile(ncfg, []byte(fmt.Sprintf(`worker_processes %[5]s;
daemon off;
pid %[1]s/run/nginx.pid;
error_log %[1]s/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    client_body_temp_path %[1]s/run/b; proxy_temp_path %[1]s/run/p; fastcgi_temp_path %[1]s/run/f; uwsgi_temp_path %[1]s/run/u; scgi_temp_path %[1]s/run/s;
    server {
        listen 127.0.0.1:%[2]d;
        root %[3]s;
        location /gated/ {
            secure_link $arg_md5,$arg_expires;
            secure_link_md5 "$secure_link_expires$uri %[4]s";
            if ($secure_link = "") { return 403; }
            if ($secure_link = "0") { return 410; }
            add_header Cache-Control "private, max-age=3600";
            add_header X-Frame-Options DENY;
            add_header X-Content-Type-Options nosniff;
            add_header Referrer-Policy no-referrer;
        }
    }
}
`, work, ports[1], www, secret, nginxWorkers)), 0o644)
	ngx := on("0", "nginx", "-c", ncfg)
	ngx.Stderr = os.Stderr
	if err := ngx.Start(); err != nil {
		log.Fatal(err)
	}
	stop := func() {
		eng.Process.Signal(os.Interrupt)
		ngx.Process.Signal(os.Interrupt)
		eng.Wait()
		ngx.Wait()
	}
	die := func(format string, args ...any) {
		stop()
		os.RemoveAll(work)
		log.Fatalf(format, args...)
	}

	keys, err := policy.LoadKeys(map[string]string{"k1": keyFile})
	if err != nil {
		die("%v", err)
	}
	exp := time.Now().Add(24 * time.Hour)
	q, err := keys.Sign(policy.SignRequest{KeyID: "k1", Path: "/gated/1k.bin", Expires: exp})
	if err != nil {
		die("%v", err)
	}
	sum := md5.Sum([]byte(strconv.FormatInt(exp.Unix(), 10) + "/gated/1k.bin " + secret))
	nq := "md5=" + base64.RawURLEncoding.EncodeToString(sum[:]) + "&expires=" + strconv.FormatInt(exp.Unix(), 10)
	e, n := fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	qs, err := keys.Sign(policy.SignRequest{KeyID: "k1", Path: "/sig/1k.bin", Expires: exp})
	if err != nil {
		die("%v", err)
	}
	rows := []row{
		{"engine, no policy", e + "/pub/1k.bin", "engine", false, false},
		{"engine, signed URL + header policy", e + "/gated/1k.bin?" + q, "engine", true, false},
		{"nginx, no policy", n + "/pub/1k.bin", "nginx", false, false},
		{"nginx, secure_link + add_header", n + "/gated/1k.bin?" + nq, "nginx", true, false},
		// The gated row's work in parts: its request's bytes (the same
		// query, read by nobody), its response fields alone, its
		// signature alone.
		{"engine, no policy, the signed URL's query ignored", e + "/pub/1k.bin?" + q, "engine", false, true},
		{"engine, header policy alone", e + "/hdr/1k.bin", "engine", false, true},
		{"engine, signed URL alone", e + "/sig/1k.bin?" + qs, "engine", false, true},
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range rows {
		for {
			err = check(r, body)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			die("%s: %v", r.name, err)
		}
	}
	res := map[string][]float64{}
	cpu := map[string][]float64{} // server CPU per request, µs
	for rep := range *repeats {
		for k := range rows {
			r := rows[(rep+k)%len(rows)]
			pid := eng.Process.Pid
			if r.server == "nginx" {
				pid = ngx.Process.Pid
			}
			before := bench.ProcessCPU(pid) // nginx's with its workers
			rps, n, err := wrk(on, pinned, r.url, *duration)
			if err != nil {
				die("%s: %v", r.name, err)
			}
			us := float64((bench.ProcessCPU(pid) - before).Microseconds()) / float64(n)
			res[r.name] = append(res[r.name], rps)
			cpu[r.name] = append(cpu[r.name], us)
			log.Printf("repeat %d  %-36s %9.0f req/s  server CPU %.2f us/request", rep+1, r.name, rps, us)
		}
	}
	stop()
	page := render(build, rows, res, cpu, *repeats, *duration, pinned)
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", *out)
}

// check fetches a row's URL (the body must be the file; a header policy
// must show) and, for a signed row, the same URL without its query (it
// must be refused).
func check(r row, body []byte) error {
	resp, err := http.Get(r.url)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != string(body) {
		return fmt.Errorf("status %d, %d bytes: not the file", resp.StatusCode, len(b))
	}
	if r.gated || strings.Contains(r.url, "/hdr/") {
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Cache-Control") != "private, max-age=3600" {
			return fmt.Errorf("the header policy is missing: %v", resp.Header)
		}
	}
	if r.gated || strings.Contains(r.url, "/sig/") {
		bare, _, _ := strings.Cut(r.url, "?")
		resp, err := http.Get(bare)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			return fmt.Errorf("without its signature: status %d, want 403", resp.StatusCode)
		}
	}
	return nil
}

var rpsLine = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
var countLine = regexp.MustCompile(`(\d+) requests in`)
var errLine = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)`)

// wrk runs keep-alive connections against url (pinned: 32 on one thread
// on CPU 1; else 64 on 2 threads), and returns the requests a second and
// the requests answered.
func wrk(on func(string, string, ...string) *exec.Cmd, pinned bool, url string, d time.Duration) (float64, int64, error) {
	threads, conns := "-t2", "-c64"
	if pinned {
		threads, conns = "-t1", "-c32"
	}
	out, err := on("1", "wrk", threads, conns, "-d"+strconv.Itoa(int(d.Seconds()))+"s", "--latency", url).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	if m := errLine.FindString(string(out)); m != "" {
		return 0, 0, fmt.Errorf("wrk saw failures (%s):\n%s", m, out)
	}
	m, c := rpsLine.FindSubmatch(out), countLine.FindSubmatch(out)
	if m == nil || c == nil {
		return 0, 0, fmt.Errorf("no Requests/sec or request count in wrk's output:\n%s", out)
	}
	rps, err := strconv.ParseFloat(string(m[1]), 64)
	n, _ := strconv.ParseInt(string(c[1]), 10, 64)
	if err != nil || n == 0 {
		return 0, 0, fmt.Errorf("wrk's output unreadable:\n%s", out)
	}
	return rps, n, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func render(b *bench.Build, rows []row, res, cpu map[string][]float64, repeats int, d time.Duration, pinned bool) string {
	var w strings.Builder
	fmt.Fprintf(&w, "# What a signed URL and a header policy cost: 1 KiB requests\n\n")
	layout, client := "shared", "wrk, 2 threads, 64 keep-alive HTTP/1.1 connections; every process free to use both CPUs"
	if pinned {
		layout, client = "pinned", "each server on CPU 0 alone (the engine with `workers = 1`, nginx with one worker), wrk on CPU 1 (one thread, 32 keep-alive HTTP/1.1 connections)"
	}
	fmt.Fprintf(&w, "Generated by `go run ./bench/gatecompare --repeats %d --duration %s --layout %s` on %s.\n\n", repeats, d, layout, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	ngxV, _ := exec.Command("nginx", "-v").CombinedOutput()
	wrkV, _ := exec.Command("wrk", "--version").CombinedOutput()
	fmt.Fprintf(&w, "- engine: %s.\n- nginx: %s.\n- Client: %s.\n- Machine: %s. Clients and servers on the same machine, over loopback.\n\n", b.Describe(), bench.VersionLine(ngxV), bench.VersionLine(wrkV), bench.Machine())
	fmt.Fprintf(&w, "One 1,024-byte file under two paths of one server: `/pub/` with no policy, `/gated/` with a signed URL checked and a header policy (Cache-Control `private, max-age=3600`, X-Frame-Options, X-Content-Type-Options, Referrer-Policy); the engine with `auth = \"signed\"` (HMAC-SHA-256) and `set_headers`, nginx with `secure_link` (MD5, its only choice) and `add_header`, access logs off on both. %s, %s a sample, %d repeats, the rows taking turns in an order that rotates each repeat, all on one 2-CPU machine over loopback. Before any sample every URL was fetched and its body compared with the file, and every gated URL was asked for without its query: 403 on both servers. wrk counts responses, not bytes: a sample with any non-2xx answer or socket error fails the run.\n\n", client, d, repeats)
	fmt.Fprintf(&w, "| row | req/s (median) | per repeat | / the server's no-policy row | server CPU µs/request (median) | / the server's no-policy row |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		v, c := res[r.name], cpu[r.name]
		ratio, cratio := "", ""
		if r.gated || r.part {
			for _, o := range rows {
				if o.server == r.server && !o.gated && !o.part {
					ratio = fmt.Sprintf("%.3f", median(v)/median(res[o.name]))
					cratio = fmt.Sprintf("%.3f", median(c)/median(cpu[o.name]))
				}
			}
		}
		fmt.Fprintf(&w, "| %s | %.0f | %.0f–%.0f | %s | %.2f | %s |\n", r.name, median(v), slices.Min(v), slices.Max(v), ratio, median(c), cratio)
	}
	fmt.Fprintf(&w, "\nServer CPU is the server's user and system time (nginx's master and workers together, from /proc) over each sample, divided by the requests wrk counted in it: the server's own cost, apart from wrk's, which shares the two CPUs.\n")
	eg, ng := median(res[rows[1].name]), median(res[rows[3].name])
	fmt.Fprintf(&w, "\nThe engine's gated row against nginx's: %.2f×. The last three rows take the engine's gated row apart: the same request bytes with nothing checked, the response fields alone (a path with `set_headers` and `cache_control`, no auth), and the signature alone (`auth = \"signed\"`, the default `no-cache`).\n\n", eg/ng)
	fmt.Fprintf(&w, "## What this page does not measure\n\n- TLS, HTTP/2 and HTTP/3 (the check is the same code for every protocol; the rows here isolate it).\n- Basic auth (a password hash is computed once per credential, on a worker, then remembered) and forward auth (an HTTP round trip per credential per cache period): their cost is the hash or the endpoint's, not the engine's.\n- Large files: the check runs once per request, before the file is opened.\n")
	return w.String()
}
