// Command fairshare attacks the engine and nginx from many loopback
// addresses at once (127.2.0.0/16; loopback routes all of 127.0.0.0/8)
// and measures what an honest client on another address (127.1.0.1)
// still gets: its 100 MiB download over HTTP/1.1, HTTP/2 and HTTP/3 (each
// verified against the file's SHA-256) against its speed with no attack,
// and its 1 KiB requests (each on a new TLS connection, half of them
// through the reverse proxy) answered within 1 s; and the servers' peak
// memory (RSS) and CPU during each attack. It writes a page.
//
//	go run ./bench/fairshare [--repeats 3] [--addrs 200] [--per-addr 8] [--capacity 1024] [--out docs/BENCHMARKS-fairshare.md]
//
// The engine runs with its defaults but for max_connections (--capacity)
// and the timeouts both servers get; nginx (one worker, the same
// worker_connections) with the limit_conn and timeouts a careful operator
// sets. Both serve TLS on CPU 1; the attackers, the honest client and the
// origin behind both reverse proxies (nginx, plain HTTP) share CPU 0.
// Debian's nginx is installed with apt-get when missing.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/bench/peer"
	"github.com/mediaship/engine/internal/selfsigned"
)

// server is one of the compared servers.
type server struct {
	name string
	addr string // 127.0.0.1:port: TLS on TCP, and HTTP/3 on UDP when h3
	h3   bool
	wt   bool
	pid  int // its process; its children (nginx's workers) count with it
}

// engineAdmin is the engine's admin listener (metrics, profiles).
var engineAdmin string

// honest is the honest client's address.
var honest = net.IPv4(127, 1, 0, 1)

const bigSize = 100 << 20

func main() {
	repeats := flag.Int("repeats", 3, "interleaved repeats")
	addrs := flag.Int("addrs", 200, "attacking addresses (127.2.x.y)")
	perAddr := flag.Int("per-addr", 8, "connections per attacking address")
	capacity := flag.Int("capacity", 1024, "max_connections (engine) and worker_connections (nginx)")
	ramp := flag.Duration("ramp", 10*time.Second, "attack time before the honest client starts")
	out := flag.String("out", "docs/BENCHMARKS-fairshare.md", "page to write")
	only := flag.String("only", "", "run only the attacks whose names contain one of these (comma-separated)")
	child := flag.String("attack-child", "", "(internal) run this attack against --target until stdin closes")
	target := flag.String("target", "", "(internal) the attacked server's address")
	flag.Parse()
	log.SetFlags(log.Ltime)
	if *child != "" {
		attackChild(*child, *target, *addrs, *perAddr)
		return
	}
	if err := peer.InstallDebian(map[string]string{"nginx": "nginx"}, log.Printf); err != nil {
		log.Fatal(err)
	}
	h, err := bench.NewHarness("fairshare-")
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

	// The files, served by both and by the origin (under /proxy/ there).
	www := filepath.Join(work, "www")
	os.MkdirAll(filepath.Join(www, "proxy"), 0o755)
	big := make([]byte, bigSize)
	rand.Read(big)
	sum := sha256.Sum256(big)
	bigSum := hex.EncodeToString(sum[:])
	small := make([]byte, 1024)
	rand.Read(small)
	for _, f := range []struct {
		name string
		b    []byte
	}{{"big.bin", big}, {"small.bin", small}} {
		os.WriteFile(filepath.Join(www, f.name), f.b, 0o644)
		os.Link(filepath.Join(www, f.name), filepath.Join(www, "proxy", f.name))
	}
	cert, err := selfsigned.New("fairshare", 24*time.Hour, "localhost")
	if err != nil {
		die("%v", err)
	}
	certPEM, keyPEM, _ := selfsigned.PEM(cert)
	certFile, keyFile := filepath.Join(work, "cert.pem"), filepath.Join(work, "key.pem")
	os.WriteFile(certFile, certPEM, 0o644)
	os.WriteFile(keyFile, keyPEM, 0o600)
	for _, d := range []string{"run", "logs"} {
		os.MkdirAll(filepath.Join(work, d), 0o755)
	}
	ports, err := peer.FreePorts(false, true, false, false)
	if err != nil {
		die("%v", err)
	}
	origin := fmt.Sprintf("127.0.0.1:%d", ports[0])
	temps := func(tag string) string {
		return fmt.Sprintf("client_body_temp_path %[1]s/run/%[2]sb; proxy_temp_path %[1]s/run/%[2]sp; fastcgi_temp_path %[1]s/run/%[2]sf; uwsgi_temp_path %[1]s/run/%[2]su; scgi_temp_path %[1]s/run/%[2]ss;", work, tag)
	}
	ocfg := filepath.Join(work, "origin.conf")
	os.WriteFile(ocfg, []byte(fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/run/origin.pid;
error_log %[1]s/logs/origin-error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    %[4]s
    server { listen %[2]s; root %[3]s; }
}
`, work, origin, www, temps("o"))), 0o644)
	start(peer.Command(0, "nginx", "-c", ocfg), "origin")

	// The timeouts a careful operator sets, the same for both.
	const (
		headerTimeout = "10s"
		idleTimeout   = "15s"
		sendTimeout   = "30s"
	)
	ecfg := filepath.Join(work, "engine.toml")
	os.WriteFile(ecfg, []byte(fmt.Sprintf(`listen = "127.0.0.1:%d"
workers = 1
[kernel]
ktls = "auto"
[integrity]
state_dir = %q
[limits]
max_connections = %d
header_timeout = %q
idle_timeout = %q
send_timeout = %q
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
path_prefix = "/proxy/"
upstreams = [%q]
max_conns = 64
[webtransport]
enabled = true
path = "/wt"
allowed_origins = ["*"]
[admin]
listen = "127.0.0.1:%d"
pprof = true
`, ports[1], filepath.Join(work, "state"), *capacity, headerTimeout, idleTimeout, sendTimeout, www, certFile, keyFile, origin, ports[3])), 0o644)
	engineAdmin = fmt.Sprintf("http://127.0.0.1:%d", ports[3])
	ec := start(peer.Command(1, h.Engine, "serve", "-c", ecfg), "engine")

	ncfg := filepath.Join(work, "nginx.conf")
	os.WriteFile(ncfg, []byte(fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/run/nginx.pid;
error_log %[1]s/logs/nginx-error.log error;
worker_rlimit_nofile 65536;
events { worker_connections %[2]d; }
http {
    access_log off;
    sendfile on;
    default_type application/octet-stream;
    %[9]s
    limit_conn_zone $binary_remote_addr zone=perip:10m;
    limit_conn perip %[3]d;
    limit_conn_status 503;
    client_header_timeout %[4]s;
    client_body_timeout %[4]s;
    keepalive_timeout %[5]s;
    send_timeout %[6]s;
    reset_timedout_connection on;
    upstream origin { server %[7]s max_conns=64; keepalive 64; }
    server {
        listen 127.0.0.1:%[8]d ssl http2;
        ssl_certificate %[10]s;
        ssl_certificate_key %[11]s;
        ssl_protocols TLSv1.2 TLSv1.3;
        root %[12]s;
        location /proxy/ {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`, work, *capacity, max(64, *capacity/8), headerTimeout, idleTimeout, sendTimeout, origin, ports[2], temps("n"), certFile, keyFile, www)), 0o644)
	nc := start(peer.Command(1, "nginx", "-c", ncfg), "nginx")

	pid := func(p *peer.Process) int { return p.Cmd.Process.Pid }
	servers := []server{
		{"engine", fmt.Sprintf("127.0.0.1:%d", ports[1]), true, true, pid(ec)},
		{"nginx", fmt.Sprintf("127.0.0.1:%d", ports[2]), false, false, pid(nc)},
	}
	tlsConf := &tls.Config{InsecureSkipVerify: true, ServerName: "localhost", NextProtos: []string{"http/1.1"}}
	for _, s := range servers {
		c := newHonest(s, tlsConf)
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := c.get(context.Background(), "/small.bin", small); err == nil {
				break
			} else if time.Now().After(deadline) {
				for _, p := range procs {
					log.Printf("%s:\n%s", filepath.Base(p.Log), p.Tail(2000))
				}
				die("%s: %v", s.name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	chosen := []attack{{name: "none", what: "no attack: the honest client's own speed"}}
	for _, a := range attacks {
		if *only == "" || slices.ContainsFunc(strings.Split(*only, ","), func(o string) bool { return strings.Contains(a.name, o) }) {
			chosen = append(chosen, a)
		}
	}
	res := results{}
	for rep := range *repeats {
		for _, a := range chosen {
			for k := range servers {
				s := servers[(rep+k)%len(servers)]
				if a.quic && !s.h3 || a.wt && !s.wt {
					continue
				}
				r := runCell(s, a, *addrs, *perAddr, *ramp, tlsConf, bigSum, small)
				res.add(s.name, a.name, r)
				log.Printf("repeat %d  %-28s %-7s %s", rep+1, a.name, s.name, r)
			}
		}
	}
	for _, p := range procs {
		p.Stop(os.Interrupt)
		if os.Getenv("FAIRSHARE_DEBUG") != "" {
			log.Printf("%s:\n%s", p.Log, p.Tail(6000))
		}
	}
	page := render(h, pin, servers, chosen, res, *repeats, *addrs, *perAddr, *capacity, *ramp, headerTimeout, idleTimeout, sendTimeout)
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", *out)
}

// cell is one attack against one server, once.
type cell struct {
	mibps         map[string]float64 // the honest download by protocol; 0: failed
	dlErr         map[string]string
	small         []time.Duration // each 1 KiB request's time; failed ones count as failedAfter
	smallFailed   int
	smallErrs     []string // the first few failures and slow ones, for the log
	wtOK, wtTried int
	rssPeak       float64 // MiB
	cpu           float64 // server CPU share over the attack, 1 = one CPU
	opened, ended int64
}

func (c cell) String() string {
	var b strings.Builder
	for _, p := range []string{"h1", "h2", "h3"} {
		if v, ok := c.mibps[p]; ok {
			fmt.Fprintf(&b, "%s %5.0f MiB/s  ", p, v)
		}
	}
	mx := time.Duration(0)
	if len(c.small) > 0 {
		mx = slices.Max(c.small)
	}
	fmt.Fprintf(&b, "1 KiB: %d, max %v, failed %d  ", len(c.small), mx.Round(time.Millisecond), c.smallFailed)
	if c.wtTried > 0 {
		fmt.Fprintf(&b, "wt %d/%d  ", c.wtOK, c.wtTried)
	}
	fmt.Fprintf(&b, "rss %.0f MiB  cpu %.0f%%  attack conns %d (ended %d)", c.rssPeak, c.cpu*100, c.opened, c.ended)
	for _, e := range c.smallErrs {
		fmt.Fprintf(&b, "\n    1 KiB: %s", e)
	}
	for p, e := range c.dlErr {
		fmt.Fprintf(&b, "  %s error: %s", p, e)
	}
	return b.String()
}

// failedAfter is how long a failed 1 KiB request counts for.
const failedAfter = 5 * time.Second

// runCell attacks s with a from addrs addresses (perAddr connections
// each, unless the attack says otherwise), lets it ramp up, and measures
// the honest client meanwhile.
func runCell(s server, a attack, addrs, perAddr int, ramp time.Duration, tlsConf *tls.Config, bigSum string, small []byte) cell {
	r := cell{mibps: map[string]float64{}, dlErr: map[string]string{}}
	// The attackers run in a process of their own at the lowest
	// priority on the honest client's CPU: attackers are other machines,
	// and the honest client's speed should not be what their crypto
	// leaves of its CPU.
	var child *exec.Cmd
	var childIn io.WriteCloser
	var childOut strings.Builder
	if a.run != nil {
		self, _ := os.Executable()
		child = peer.Command(0, "nice", "-n", "19", self, "--attack-child", a.name, "--target", s.addr,
			"--addrs", strconv.Itoa(addrs), "--per-addr", strconv.Itoa(perAddr))
		childIn, _ = child.StdinPipe()
		child.Stdout = &childOut
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			log.Fatalf("attackers: %v", err)
		}
		time.Sleep(ramp)
	}
	cpu0 := bench.ProcessCPU(s.pid)
	t0 := time.Now()
	if dir := os.Getenv("FAIRSHARE_PPROF"); dir != "" && s.name == "engine" {
		go func() {
			if resp, err := http.Get(engineAdmin + "/debug/pprof/profile?seconds=5"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				os.WriteFile(filepath.Join(dir, strings.ReplaceAll(a.name, " ", "_")+".cpu"), b, 0o644)
			}
		}()
	}
	// Memory, sampled until the end.
	memDone := make(chan struct{})
	var rssPeak float64
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			rssPeak = max(rssPeak, float64(bench.ProcessRSS(s.pid))/(1<<20))
			select {
			case <-memDone:
				return
			case <-t.C:
			}
		}
	}()
	// 1 KiB requests every 250 ms, each on a new connection, while the
	// downloads run (and for 10 s at least).
	smallDone := make(chan struct{})
	var smallWG sync.WaitGroup
	var mu sync.Mutex
	smallWG.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		begun := time.Now()
		for i := 0; ; i++ {
			select {
			case <-smallDone:
				if time.Since(begun) >= 10*time.Second {
					return
				}
			default:
			}
			path := "/small.bin"
			if i%2 == 1 {
				path = "/proxy/small.bin"
			}
			smallWG.Go(func() {
				c := newHonest(s, tlsConf)
				rctx, cancel := context.WithTimeout(context.Background(), failedAfter)
				d, err := c.get(rctx, path, small)
				cancel()
				mu.Lock()
				if err != nil {
					r.small = append(r.small, failedAfter)
					r.smallFailed++
					if len(r.smallErrs) < 3 {
						r.smallErrs = append(r.smallErrs, fmt.Sprintf("%s at %v: %v", path, time.Since(begun).Round(time.Millisecond), err))
					}
				} else {
					if d > time.Second && len(r.smallErrs) < 3 {
						r.smallErrs = append(r.smallErrs, fmt.Sprintf("%s at %v: took %v", path, time.Since(begun).Round(time.Millisecond), d))
					}
					r.small = append(r.small, d)
				}
				mu.Unlock()
			})
			<-t.C
		}
	})
	protos := []string{"h1", "h2"}
	if s.h3 {
		protos = append(protos, "h3")
	}
	for _, p := range protos {
		mibps, err := download(s, p, tlsConf, bigSum)
		r.mibps[p] = mibps
		if err != nil {
			r.dlErr[p] = err.Error()
		}
	}
	if a.wt {
		for range 5 {
			r.wtTried++
			if openWT(s) == nil {
				r.wtOK++
			}
		}
	}
	if dir := os.Getenv("FAIRSHARE_PPROF"); dir != "" && s.name == "engine" {
		// The engine's heap and its metrics at the end of the attack, for
		// a person looking into its memory.
		for _, f := range []struct{ path, name string }{{"/debug/pprof/heap", ".heap"}, {"/metrics", ".metrics"}} {
			if resp, err := http.Get(engineAdmin + f.path); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				os.WriteFile(filepath.Join(dir, strings.ReplaceAll(a.name, " ", "_")+f.name), b, 0o644)
			}
		}
	}
	close(smallDone)
	smallWG.Wait()
	close(memDone)
	r.cpu = (bench.ProcessCPU(s.pid) - cpu0).Seconds() / time.Since(t0).Seconds()
	r.rssPeak = rssPeak
	if child != nil {
		childIn.Close()
		child.Wait()
		fmt.Sscanf(childOut.String(), "opened %d ended %d", &r.opened, &r.ended)
	}
	// Let the server see every attacking connection go before the next
	// cell.
	time.Sleep(3 * time.Second)
	return r
}

// honestClient makes the honest client's requests from its address.
type honestClient struct {
	s   server
	hc  *http.Client
	url string
}

func newHonest(s server, conf *tls.Config) *honestClient {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: honest}, Timeout: failedAfter}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: conf, DisableKeepAlives: true, DisableCompression: true, ForceAttemptHTTP2: false}
	return &honestClient{s: s, hc: &http.Client{Transport: tr}, url: "https://" + s.addr}
}

// get fetches path and checks it is want; it returns how long that took.
func (c *honestClient) get(ctx context.Context, path string, want []byte) (time.Duration, error) {
	t0 := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url+path, nil)
	req.Host = "localhost" // the site's name; the connection goes to the address
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 || !slices.Equal(b, want) {
		return 0, fmt.Errorf("%s: %d, %d bytes", path, resp.StatusCode, len(b))
	}
	return time.Since(t0), nil
}

// download fetches the 100 MiB file over proto from the honest address,
// checks its SHA-256, and returns MiB/s.
func download(s server, proto string, conf *tls.Config, want string) (float64, error) {
	var rt http.RoundTripper
	switch proto {
	case "h1":
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: honest}, Timeout: failedAfter}
		rt = &http.Transport{DialContext: d.DialContext, TLSClientConfig: conf, DisableCompression: true}
	case "h2":
		c := conf.Clone()
		c.NextProtos = []string{"h2"}
		rt = &http2.Transport{TLSClientConfig: c, DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: honest}, Timeout: failedAfter}
			return (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, network, addr)
		}}
	case "h3":
		tr, err := quicFrom(honest)
		if err != nil {
			return 0, err
		}
		defer closeTransport(tr)
		c := conf.Clone()
		c.NextProtos = []string{"h3"}
		h3 := &http3.Transport{TLSClientConfig: c, Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			ua, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			return tr.DialEarly(ctx, ua, tc, qc)
		}}
		defer h3.Close()
		rt = h3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+s.addr+"/big.bin", nil)
	req.Host = "localhost"
	t0 := time.Now()
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	took := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != 200 || n != bigSize || hex.EncodeToString(h.Sum(nil)) != want {
		return 0, fmt.Errorf("status %d, %d bytes, digest mismatch or short", resp.StatusCode, n)
	}
	return float64(n) / (1 << 20) / took.Seconds(), nil
}

// openWT opens a WebTransport session from the honest address and
// closes it.
func openWT(s server) error {
	env := &attackEnv{target: s.addr, tls: &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"}}
	ctx, cancel := context.WithTimeout(context.Background(), failedAfter)
	defer cancel()
	c, done, err := dialQUIC(ctx, env, honest, true)
	if err != nil {
		return err
	}
	defer done()
	cc, err := wtClient(c)
	if err != nil {
		return err
	}
	return cc(ctx, "https://localhost:"+port(s.addr)+"/wt?mode=echo")
}

// results are the cells of every repeat.
type results map[[2]string][]cell

func (r results) add(server, attack string, c cell) {
	k := [2]string{server, attack}
	r[k] = append(r[k], c)
}

// attackChild runs the named attack against target until stdin closes,
// then says how many connections it made and saw end.
func attackChild(name, target string, addrs, perAddr int) {
	i := slices.IndexFunc(attacks, func(a attack) bool { return a.name == name })
	if i < 0 {
		log.Fatalf("no attack %q", name)
	}
	a := attacks[i]
	env := &attackEnv{target: target,
		tls: &tls.Config{InsecureSkipVerify: true, ServerName: "localhost", NextProtos: []string{"http/1.1"}},
		h2:  &tls.Config{InsecureSkipVerify: true, ServerName: "localhost", NextProtos: []string{"h2"}}}
	if a.addrs > 0 {
		addrs = a.addrs
	}
	if a.perAdr > 0 {
		perAddr = a.perAdr
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range addrs {
		src := net.IPv4(127, 2, byte(i/250), byte(i%250+1))
		for range perAddr {
			wg.Go(func() { a.run(ctx, env, src) })
		}
	}
	io.Copy(io.Discard, os.Stdin)
	cancel()
	wg.Wait()
	fmt.Printf("opened %d ended %d\n", env.opened.Load(), env.ended.Load())
}
