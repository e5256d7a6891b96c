// Command cachecompare measures the engine's edge cache against nginx
// (proxy_cache with proxy_cache_lock and the slice module, as an
// operator sets it up for large files) and Varnish (Debian's, behind
// hitch for TLS), all three in front of the same origin (nginx, sending
// at --origin-rate per connection), in one run, the servers taking turns
// in an order that rotates each repeat; and the engine serving the same
// file from its own root, the bar for its hits. It writes a page.
//
//	go run ./bench/cachecompare [--repeats 5] [--size 100MiB] [--duration 5s] [--origin-rate 100m] [--out docs/BENCHMARKS-cache.md]
//
// Rows: hit throughput of one object over one and 16 HTTP/1.1 TLS
// connections (the bench client: every byte verified against the
// object's BLAKE3), the servers' CPU per GiB over those runs; 50 clients
// of a cold object (the bytes the origin sent, from its access log, and
// the time until the last client had all its bytes, each client's
// verified); the time to the first byte of a 1 MiB range from the
// middle of a cold 1 GiB object (verified), and the origin's bytes for
// it. Every server runs on CPU 1 (the engine with workers = 1, nginx
// with one worker, Varnish and hitch together), the client and the
// origin on CPU 0. Missing Debian packages (nginx, varnish, hitch) are
// installed with apt-get.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/bench/peer"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/internal/stats"
)

// server is one of the compared servers.
type server struct {
	name  string
	url   string // https://127.0.0.1:port
	pids  func() []int
	cache bool // a cache in front of the origin (not the engine's own root)
}

// Sizes of the cold range row.
const (
	rangeSize = 1 << 30
	rangeOff  = 512 << 20
	rangeLen  = 1 << 20
)

func main() {
	repeats := flag.Int("repeats", 5, "interleaved repeats")
	sizeFlag := flag.String("size", "100MiB", "the object's size (hit and cold rows)")
	duration := flag.Duration("duration", 5*time.Second, "measured time of each hit run")
	originRate := flag.String("origin-rate", "100m", "the origin's rate per connection (nginx limit_rate)")
	out := flag.String("out", "docs/BENCHMARKS-cache.md", "page to write")
	flag.Parse()
	log.SetFlags(log.Ltime)
	size, err := parseSize(*sizeFlag)
	if err != nil {
		log.Fatalf("--size: %v", err)
	}
	if err := peer.InstallDebian(map[string]string{"nginx": "nginx", "varnishd": "varnish", "hitch": "hitch"}, log.Printf); err != nil {
		log.Fatal(err)
	}
	h, err := bench.NewHarness("cachecompare-")
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	pin := bench.PinSelf()
	work := h.Work
	os.Chmod(work, 0o755)
	var procs []*peer.Process
	die := func(format string, args ...any) {
		for _, p := range procs {
			p.Stop(os.Interrupt)
		}
		h.Close()
		log.Fatalf(format, args...)
	}
	start := func(cmd *exec.Cmd, name string) *peer.Process {
		p, err := peer.Start(cmd, filepath.Join(work, name+".log"))
		if err != nil {
			die("%s: %v", name, err)
		}
		procs = append(procs, p)
		return p
	}

	// The files: the object, its cold copies (one name per server and
	// repeat, hard links), and the range object (sparse, random bytes
	// around its middle).
	www := filepath.Join(work, "www")
	os.MkdirAll(www, 0o755)
	obj := make([]byte, size)
	rand.Read(obj)
	os.WriteFile(filepath.Join(www, "hit.bin"), obj, 0o644)
	objSum := integrity.Digest(blake3.Sum256(obj))
	mid := make([]byte, 4<<20)
	rand.Read(mid)
	rf, err := os.Create(filepath.Join(www, "range.bin"))
	if err != nil {
		die("%v", err)
	}
	rf.WriteAt(mid, rangeOff-1<<20)
	rf.Truncate(rangeSize)
	rf.Close()
	os.Chmod(filepath.Join(www, "range.bin"), 0o644)
	wantRange := mid[1<<20 : 1<<20+rangeLen]

	cert, err := selfsigned.New("cachecompare", 24*time.Hour, "localhost")
	if err != nil {
		die("%v", err)
	}
	certPEM, keyPEM, _ := selfsigned.PEM(cert)
	certFile, keyFile, pemFile := filepath.Join(work, "cert.pem"), filepath.Join(work, "key.pem"), filepath.Join(work, "hitch.pem")
	os.WriteFile(certFile, certPEM, 0o644)
	os.WriteFile(keyFile, keyPEM, 0o600)
	os.WriteFile(pemFile, append(append([]byte{}, keyPEM...), certPEM...), 0o600)

	ports, err := peer.FreePorts(false, false, false, false, false, false, false)
	if err != nil {
		die("%v", err)
	}
	origin := fmt.Sprintf("127.0.0.1:%d", ports[0])
	for _, d := range []string{"run", "logs", "ngxcache", "enginecache", "varnish"} {
		os.MkdirAll(filepath.Join(work, d), 0o755)
	}
	originLog := filepath.Join(work, "logs", "origin-access.log")
	temps := func(tag string) string {
		return fmt.Sprintf("client_body_temp_path %[1]s/run/%[2]sb; proxy_temp_path %[1]s/run/%[2]sp; fastcgi_temp_path %[1]s/run/%[2]sf; uwsgi_temp_path %[1]s/run/%[2]su; scgi_temp_path %[1]s/run/%[2]ss;", work, tag)
	}
	// The origin: plain HTTP, every response fresh for an hour, each
	// request's bytes in its access log.
	ocfg := filepath.Join(work, "origin.conf")
	os.WriteFile(ocfg, []byte(fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/run/origin.pid;
error_log %[1]s/logs/origin-error.log warn;
events { worker_connections 4096; }
http {
    log_format bytes '$uri $status $bytes_sent';
    access_log %[2]s bytes;
    sendfile on;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    %[5]s
    server {
        listen %[3]s;
        root %[4]s;
        location / { expires 1h; limit_rate %[6]s; }
        location = /_status { stub_status; }
    }
}
`, work, originLog, origin, www, temps("o"), *originRate)), 0o644)
	start(peer.Command(0, "nginx", "-c", ocfg), "origin")

	// The engine's cache, and the engine serving the files itself.
	ecfg := filepath.Join(work, "engine-cache.toml")
	os.WriteFile(ecfg, []byte(fmt.Sprintf(`listen = "127.0.0.1:%d"
workers = 1
[kernel]
ktls = "auto"
[integrity]
state_dir = %q
[reverse_proxy]
enabled = true
[reverse_proxy.tls]
cert = %q
key = %q
[[reverse_proxy.routes]]
domain = "*"
upstreams = [%q]
cache = true
[cache]
path = %q
min_free = "1GiB"
`, ports[1], filepath.Join(work, "state-cache"), certFile, keyFile, origin, filepath.Join(work, "enginecache"))), 0o644)
	rcfg := filepath.Join(work, "engine-root.toml")
	os.WriteFile(rcfg, []byte(fmt.Sprintf(`listen = "127.0.0.1:%d"
workers = 1
[kernel]
ktls = "auto"
[integrity]
state_dir = %q
[[sites]]
domain = "*"
root = %q
[sites.tls]
cert = %q
key = %q
`, ports[2], filepath.Join(work, "state-root"), www, certFile, keyFile)), 0o644)
	ec := start(peer.Command(1, h.Engine, "serve", "-c", ecfg), "engine-cache")
	er := start(peer.Command(1, h.Engine, "serve", "-c", rcfg), "engine-root")

	// nginx: proxy_cache, proxy_cache_lock, slice (1 MiB), the slice's
	// range in the key, 200 and 206 kept.
	ncfg := filepath.Join(work, "nginx-cache.conf")
	os.WriteFile(ncfg, []byte(fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/run/nginx-cache.pid;
error_log %[1]s/logs/nginx-cache-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    %[6]s
    proxy_cache_path %[1]s/ngxcache levels=1:2 keys_zone=edge:64m max_size=20g inactive=1d use_temp_path=off;
    upstream origin { server %[2]s; keepalive 64; }
    server {
        listen 127.0.0.1:%[3]d ssl;
        ssl_certificate %[4]s;
        ssl_certificate_key %[5]s;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            slice 1m;
            proxy_cache edge;
            proxy_cache_key $uri$is_args$args$slice_range;
            proxy_set_header Range $slice_range;
            proxy_cache_valid 200 206 1h;
            proxy_cache_lock on;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://origin;
        }
    }
}
`, work, origin, ports[3], certFile, keyFile, temps("n"))), 0o644)
	nc := start(peer.Command(1, "nginx", "-c", ncfg), "nginx-cache")

	// Varnish (file storage) behind hitch (TLS, PROXY protocol v2).
	vcl := filepath.Join(work, "default.vcl")
	os.WriteFile(vcl, []byte(fmt.Sprintf("vcl 4.1;\nbackend origin { .host = \"127.0.0.1\"; .port = \"%d\"; }\n", ports[0])), 0o644)
	vc := start(peer.Command(1, "varnishd", "-F", "-j", "none", "-n", filepath.Join(work, "varnish", "n"),
		"-a", fmt.Sprintf("127.0.0.1:%d,PROXY", ports[4]), "-f", vcl, "-s", "file,"+filepath.Join(work, "varnish", "store")+",8G"), "varnish")
	hc := start(peer.Command(1, "hitch", "--daemon=off", "--workers=1", "--user=nobody", "--group=nogroup", "--write-proxy-v2=on", "--alpn-protos=http/1.1",
		"--frontend=[127.0.0.1]:"+strconv.Itoa(ports[5]), "--backend=[127.0.0.1]:"+strconv.Itoa(ports[4]), pemFile), "hitch")

	pids := func(ps ...*peer.Process) func() []int {
		return func() []int {
			var out []int
			for _, p := range ps {
				out = append(out, p.Cmd.Process.Pid)
			}
			return out
		}
	}
	servers := []server{
		{"engine, edge cache", fmt.Sprintf("https://127.0.0.1:%d", ports[1]), pids(ec), true},
		{"nginx, proxy_cache + lock + slice", fmt.Sprintf("https://127.0.0.1:%d", ports[3]), pids(nc), true},
		{"Varnish (file storage) + hitch", fmt.Sprintf("https://127.0.0.1:%d", ports[5]), pids(vc, hc), true},
		{"engine, its own root (the bar)", fmt.Sprintf("https://127.0.0.1:%d", ports[2]), pids(er), false},
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 64, DisableCompression: true}}
	for _, s := range servers {
		if err := waitUp(client, s.url+"/hit.bin", obj, 30*time.Second); err != nil {
			for _, p := range procs {
				log.Printf("%s:\n%s", filepath.Base(p.Log), p.Tail(2000))
			}
			die("%s: %v", s.name, err)
		}
	}

	type rowKey struct{ server, row string }
	res := map[rowKey][]float64{}
	var notes []string
	for rep := range *repeats {
		for k := range servers {
			s := servers[(rep+k)%len(servers)]
			for _, conns := range []int{1, 16} {
				before := cpuOf(s.pids())
				r, err := bench.Run(context.Background(), bench.Config{URLs: []string{s.url + "/hit.bin"}, Connections: conns,
					Duration: *duration, Warmup: time.Second, ExpectDigest: &objSum, ExpectSize: size, Insecure: true, RangeLast: -1})
				if err != nil {
					die("%s, %d connections: %v", s.name, conns, err)
				}
				if r.Accepted == 0 || len(r.Errors) > 0 {
					die("%s, %d connections: %d samples accepted, errors %v", s.name, conns, r.Accepted, r.Errors)
				}
				cpu := (cpuOf(s.pids()) - before).Seconds()
				gib := float64(r.BytesReceived) / (1 << 30)
				row := fmt.Sprintf("hit, %d conn", conns)
				res[rowKey{s.name, row}] = append(res[rowKey{s.name, row}], r.MiBps.Median)
				res[rowKey{s.name, row + " cpu"}] = append(res[rowKey{s.name, row + " cpu"}], cpu/gib)
				busy := 0.0
				if r.Client != nil {
					busy = r.Client.Busy()
				}
				res[rowKey{s.name, row + " client"}] = append(res[rowKey{s.name, row + " client"}], busy)
				log.Printf("repeat %d  %-36s %2d conn  %7.0f MiB/s  server %.2f CPU s/GiB  client busy %.0f%%", rep+1, s.name, conns, r.MiBps.Median, cpu/gib, busy*100)
			}
			if !s.cache {
				continue
			}
			// 50 clients of a cold object.
			name := fmt.Sprintf("/cold-%d-%d.bin", k, rep)
			os.Link(filepath.Join(www, "hit.bin"), filepath.Join(www, name[1:]))
			took, err := cold(client, s.url+name, objSum, 50)
			if err != nil {
				die("%s, 50 clients of a cold object: %v", s.name, err)
			}
			sent := settle(origin, originLog, name)
			res[rowKey{s.name, "cold time"}] = append(res[rowKey{s.name, "cold time"}], took.Seconds())
			res[rowKey{s.name, "cold origin"}] = append(res[rowKey{s.name, "cold origin"}], float64(sent)/float64(size))
			log.Printf("repeat %d  %-36s 50 clients of a cold object: %.2f s, the origin sent %.2f× the object", rep+1, s.name, took.Seconds(), float64(sent)/float64(size))
			// A range from the middle of a cold 1 GiB object.
			name = fmt.Sprintf("/range-%d-%d.bin", k, rep)
			os.Link(filepath.Join(www, "range.bin"), filepath.Join(www, name[1:]))
			ttfb, total, err := coldRange(client, s.url+name, wantRange)
			if err != nil {
				die("%s, a cold range: %v", s.name, err)
			}
			sent = settle(origin, originLog, name)
			res[rowKey{s.name, "range ttfb"}] = append(res[rowKey{s.name, "range ttfb"}], ttfb.Seconds()*1000)
			res[rowKey{s.name, "range total"}] = append(res[rowKey{s.name, "range total"}], total.Seconds()*1000)
			res[rowKey{s.name, "range origin"}] = append(res[rowKey{s.name, "range origin"}], float64(sent)/(1<<20))
			log.Printf("repeat %d  %-36s a cold range: first byte %.0f ms, whole %.0f ms, the origin sent %.0f MiB", rep+1, s.name, ttfb.Seconds()*1000, total.Seconds()*1000, float64(sent)/(1<<20))
		}
	}
	for _, p := range procs {
		p.Stop(os.Interrupt)
	}
	_ = notes
	page := render(h, pin, servers, func(s, r string) []float64 { return res[rowKey{s, r}] }, *repeats, size, *duration, *originRate)
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", *out)
}

// varnishName is "Varnish 7.1.1" from varnishd -V's output.
func varnishName(v []byte) string {
	if m := regexp.MustCompile(`varnish-([0-9.]+)`).FindSubmatch(v); m != nil {
		return "Varnish " + string(m[1])
	}
	return "Varnish"
}

func parseSize(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("%q: a size such as 100MiB", s)
			}
			return n * u.mult, nil
		}
	}
	return 0, fmt.Errorf("%q: a size such as 100MiB", s)
}

func cpuOf(pids []int) time.Duration {
	var d time.Duration
	for _, p := range pids {
		d += bench.ProcessCPU(p)
	}
	return d
}

// waitUp fetches url until its body is want (the first fetch fills the
// cache: the hit rows measure hits).
func waitUp(c *http.Client, url string, want []byte, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		resp, err := c.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case rerr != nil:
				err = rerr
			case resp.StatusCode != 200 || !slices.Equal(b, want):
				err = fmt.Errorf("status %d, %d bytes: not the object", resp.StatusCode, len(b))
			default:
				return nil
			}
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// cold starts n clients of url at once, each on a connection of its own,
// and returns the time until the last one had all its bytes (each
// verified against sum).
func cold(c *http.Client, url string, sum integrity.Digest, n int) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	t0 := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableCompression: true}, Timeout: 5 * time.Minute}
			defer own.CloseIdleConnections()
			resp, err := own.Get(url)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			h := blake3.New()
			if _, err := io.Copy(h, resp.Body); err != nil {
				errs <- err
				return
			}
			if resp.StatusCode != 200 || integrity.Digest(h.Sum(nil)) != sum {
				errs <- fmt.Errorf("status %d: not the object", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	took := time.Since(t0)
	close(errs)
	for err := range errs {
		return 0, err
	}
	return took, nil
}

// coldRange asks for rangeLen bytes at rangeOff of url on a new
// connection and returns the time to the first body byte and to the
// last.
func coldRange(c *http.Client, url string, want []byte) (ttfb, total time.Duration, err error) {
	own := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableCompression: true}, Timeout: 5 * time.Minute}
	defer own.CloseIdleConnections()
	// The handshake first, apart: the row measures the cache, not TLS.
	if resp, err := own.Get(strings.Replace(url, "/range-", "/hit.bin?warm=", 1)); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", rangeOff, rangeOff+rangeLen-1))
	t0 := time.Now()
	resp, err := own.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		return 0, 0, err
	}
	ttfb = time.Since(t0)
	rest, err := io.ReadAll(resp.Body)
	total = time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	if got := append(first, rest...); resp.StatusCode != 206 || !slices.Equal(got, want) {
		return 0, 0, fmt.Errorf("status %d, %d bytes: not the range", resp.StatusCode, len(got))
	}
	return ttfb, total, nil
}

var (
	logLine = regexp.MustCompile(`^(\S+) (\d+) (\d+)$`)
	writing = regexp.MustCompile(`Writing: (\d+)`)
)

// settle waits until the origin has no response in progress but the
// status request's own for a second (a cache may go on fetching after
// its clients are done: that is part of its cost, and it must not run
// into the next row; nginx logs a response when it ends), and returns
// the bytes the origin sent for uri.
func settle(origin, originLog, uri string) int64 {
	idleSince := time.Time{}
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get("http://" + origin + "/_status")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := writing.FindSubmatch(b)
		if m == nil || string(m[1]) != "1" {
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		if time.Since(idleSince) >= time.Second {
			break
		}
	}
	b, _ := os.ReadFile(originLog)
	var n int64
	for _, l := range strings.Split(string(b), "\n") {
		if m := logLine.FindStringSubmatch(l); m != nil && m[1] == uri {
			v, _ := strconv.ParseInt(m[3], 10, 64)
			n += v
		}
	}
	return n
}

func render(h *bench.Harness, pin string, servers []server, res func(server, row string) []float64, repeats int, size int64, d time.Duration, rate string) string {
	var w strings.Builder
	bench.WriteHead(&w, "The edge cache against nginx and Varnish",
		fmt.Sprintf("go run ./bench/cachecompare --repeats %d --size %dMiB --duration %s --origin-rate %s", repeats, size>>20, d, rate),
		time.Now().UTC(), h.Preamble(), h.TreeNote())
	ngxV, _ := exec.Command("nginx", "-v").CombinedOutput()
	vV, _ := exec.Command("varnishd", "-V").CombinedOutput()
	hV, _ := exec.Command("hitch", "--version").CombinedOutput()
	fmt.Fprintf(&w, "Peers: %s; %s; %s. %s\n\n", bench.VersionLine(ngxV), bench.VersionLine(vV), bench.VersionLine(hV), pin)
	fmt.Fprintf(&w, "All three caches sit in front of one origin (nginx, plain HTTP on loopback, `limit_rate %s` per connection, every response `Cache-Control: max-age=3600`) and answer HTTP/1.1 over TLS on loopback: the engine with `cache = true` on a proxy route (workers = 1); nginx with `proxy_cache`, `proxy_cache_lock on` and `slice 1m` (the slice's range in the key; its documented setup for large files), one worker; %s with file storage behind hitch (TLS, PROXY protocol v2), as Varnish is deployed for TLS. The engine serving the same file from its own root over TLS is the bar for the hits. The servers took turns in an order that rotated each repeat, %d repeats; medians, with each repeat's range.\n\n", rate, varnishName(vV), repeats)

	fmt.Fprintf(&w, "## Hits: one %d MiB object\n\n", size>>20)
	fmt.Fprintf(&w, "The bench client (`bench.Run`: every body verified against the object's BLAKE3, a sample counts only verified bytes), %s measured after a 1 s warm-up, keep-alive connections. Server CPU is user and system time of the server's processes (Varnish's and hitch's together) over the run, per GiB received.\n\n", d)
	fmt.Fprintf(&w, "| server | 1 connection MiB/s | per repeat | 16 connections MiB/s | per repeat | CPU s/GiB (1 conn) | CPU s/GiB (16 conns) | client busy (16 conns) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range servers {
		a, b := res(s.name, "hit, 1 conn"), res(s.name, "hit, 16 conn")
		fmt.Fprintf(&w, "| %s | %.0f | %.0f–%.0f | %.0f | %.0f–%.0f | %.2f | %.2f | %.0f%% |\n", s.name, stats.Median(a), slices.Min(a), slices.Max(a), stats.Median(b), slices.Min(b), slices.Max(b),
			stats.Median(res(s.name, "hit, 1 conn cpu")), stats.Median(res(s.name, "hit, 16 conn cpu")), 100*stats.Median(res(s.name, "hit, 16 conn client")))
	}
	fmt.Fprintf(&w, "\n## Cold: 50 clients of a %d MiB object nobody asked for before\n\n", size>>20)
	fmt.Fprintf(&w, "50 clients start at once, each on a TLS connection of its own; each body is verified against the object's BLAKE3. The origin's bytes are what its access log says it sent for that object's name (every request of the cache, slices too), after the cache stopped asking.\n\n")
	fmt.Fprintf(&w, "| server | until the last client is done, s | per repeat | origin bytes / object size | per repeat |\n|---|---:|---:|---:|---:|\n")
	for _, s := range servers {
		if !s.cache {
			continue
		}
		t, o := res(s.name, "cold time"), res(s.name, "cold origin")
		fmt.Fprintf(&w, "| %s | %.2f | %.2f–%.2f | %.2f | %.2f–%.2f |\n", s.name, stats.Median(t), slices.Min(t), slices.Max(t), stats.Median(o), slices.Min(o), slices.Max(o))
	}
	fmt.Fprintf(&w, "\n## Cold range: 1 MiB from the middle of a 1 GiB object\n\n")
	fmt.Fprintf(&w, "One client asks for bytes %d–%d of an object no one asked for before, on a connection whose TLS handshake was made before (with a hit of another object); the bytes are compared with the file's. Origin MiB is everything the origin sent for that object, including what the cache fetched after the client was done.\n\n", rangeOff, rangeOff+rangeLen-1)
	fmt.Fprintf(&w, "| server | first byte, ms | per repeat | last byte, ms | origin MiB | per repeat |\n|---|---:|---:|---:|---:|---:|\n")
	for _, s := range servers {
		if !s.cache {
			continue
		}
		t, l, o := res(s.name, "range ttfb"), res(s.name, "range total"), res(s.name, "range origin")
		fmt.Fprintf(&w, "| %s | %.1f | %.1f–%.1f | %.1f | %.0f | %.0f–%.0f |\n", s.name, stats.Median(t), slices.Min(t), slices.Max(t), stats.Median(l), stats.Median(o), slices.Min(o), slices.Max(o))
	}
	fmt.Fprintf(&w, "\n## What this page does not measure\n\n- HTTP/2 and HTTP/3 hits (nginx's and Varnish's are HTTP/1.1 here; the engine's hits take its file path for every protocol).\n- Kernel TLS: this machine's kernel has none, so every server encrypts in user space.\n- Revalidation, eviction and purge costs; an origin over a real network (loopback with a per-connection rate stands in for it).\n- Objects larger than the page cache: every hit here is read from memory.\n")
	return w.String()
}
