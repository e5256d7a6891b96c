package engine_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads /metrics from an admin listener with Prometheus's own text
// parser.
func scrape(t testing.TB, adminAddr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %s\n%s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// metric returns the value of the series of family name whose labels
// include want ("k=v" pairs): a counter's or gauge's value, a histogram's
// sample count. It fails the test when no series matches.
func metric(t testing.TB, fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	v, ok := metricOK(fams, name, want...)
	if !ok {
		t.Fatalf("no series %s%v in /metrics", name, want)
	}
	return v
}

func metricOK(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	sum, found := 0.0, false
next:
	for _, m := range f.Metric {
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			ok := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					ok = true
				}
			}
			if !ok {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, found
}

// TestAdminMetrics: known traffic over HTTP/1.1 and HTTP/2 with TLS, then
// /metrics parsed by Prometheus's parser holds those counts: requests by
// protocol, status class and site, body bytes by transport (here userspace
// TLS: this kernel has no kernel TLS; the VM test checks the kernel's),
// handshakes full and resumed, histograms with one sample per response.
// The JSON access log holds one parseable line per response.
func TestAdminMetrics(t *testing.T) {
	root := siteRoot(t)
	big := make([]byte, 3<<20+777)
	rand.NewChaCha8([32]byte{9}).Read(big)
	writeFile(t, filepath.Join(root, "big.bin"), string(big))
	logPath := filepath.Join(t.TempDir(), "access.log")
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, fmt.Sprintf(`access_log = %q
access_log_format = "json"
[[sites]]
domain = "localhost"
default = true # answers the 127.0.0.1 the requests name
root = %q
[sites.tls]
cert = %q
key = %q
[admin]
listen = "127.0.0.1:0"
%s`, logPath, root, pki.certFile, pki.keyFile, ktlsAuto))
	admin := ts.AdminAddr()
	if admin == "" {
		t.Fatal("no admin listener")
	}

	// Nothing served yet: /healthz is ready, pprof is off.
	if resp, err := http.Get("http://" + admin + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	if resp, err := http.Get("http://" + admin + "/debug/pprof/"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("/debug/pprof/ without pprof = true: %v %v", resp, err)
	}
	before := scrape(t, admin)
	if v, _ := metricOK(before, "engine_requests_total"); v != 0 {
		t.Fatalf("requests before any: %v", v)
	}

	cache := tls.NewLRUClientSessionCache(8)
	base := "https://" + ts.addr
	get := func(c *http.Client, path string, wantStatus int, want []byte) {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != wantStatus || want != nil && !bytes.Equal(body, want) {
			t.Fatalf("%s: %d, %d bytes, %v", path, resp.StatusCode, len(body), err)
		}
	}
	c1 := pki.client(cache)
	get(c1, "/big.bin", 200, big)
	get(c1, "/alpha.txt", 200, []byte("abcdefghijklmnopqrstuvwxyz"))
	get(c1, "/nope", 404, nil)
	c1.CloseIdleConnections()
	c2 := pki.client(cache) // resumes c1's session
	get(c2, "/alpha.txt", 200, nil)
	c2.CloseIdleConnections()
	h2 := h2Client(pki)
	get(h2, "/alpha.txt", 200, nil)
	get(h2, "/nope", 404, nil)

	fams := scrape(t, admin)
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"engine_requests_total", []string{"protocol=h1", "status=2xx", "site=localhost"}, 3},
		{"engine_requests_total", []string{"protocol=h1", "status=4xx", "site=localhost"}, 1},
		{"engine_requests_total", []string{"protocol=h2", "status=2xx", "site=localhost"}, 1},
		{"engine_requests_total", []string{"protocol=h2", "status=4xx", "site=localhost"}, 1},
		{"engine_ttfb_seconds", []string{"protocol=h1"}, 4},
		{"engine_response_duration_seconds", []string{"protocol=h1"}, 4},
		{"engine_response_duration_seconds", []string{"protocol=h2"}, 2},
		{"engine_response_duration_seconds", []string{"protocol=h3"}, 0},
		{"engine_tls_handshakes_total", []string{"result=resumed"}, 1},
		{"engine_tls_handshakes_total", []string{"result=failed"}, 0},
		{"engine_h2_streams_total", nil, 2},
		{"engine_h2_connections_total", nil, 1},
		{"engine_access_log_dropped_lines_total", nil, 0},
	}
	for _, c := range checks {
		if got := metric(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if full := metric(t, fams, "engine_tls_handshakes_total", "result=full"); full < 2 {
		t.Errorf("full handshakes %v, want at least 2 (the first HTTP/1.1 and the HTTP/2 connection)", full)
	}
	user := metric(t, fams, "engine_response_bytes_total", "transport=userspace_tls")
	kernel := metric(t, fams, "engine_response_bytes_total", "transport=kernel_tls_sendfile")
	plain := metric(t, fams, "engine_response_bytes_total", "transport=plain_sendfile")
	bodies := float64(len(big) + 3*26)
	if user+kernel < bodies || plain != 0 {
		t.Errorf("bytes: userspace TLS %v + kernel TLS %v < bodies %v, or plain %v != 0", user, kernel, bodies, plain)
	}
	if metric(t, fams, "engine_ktls_promotions_total") == 0 && kernel != 0 {
		t.Errorf("kernel TLS bytes %v without a promotion", kernel)
	}
	// The histogram's buckets are cumulative and end at the count.
	for _, m := range fams["engine_response_duration_seconds"].Metric {
		h := m.Histogram
		prev := uint64(0)
		for _, b := range h.Bucket {
			if b.GetCumulativeCount() < prev {
				t.Errorf("buckets not cumulative: %v", h)
			}
			prev = b.GetCumulativeCount()
		}
		if prev > h.GetSampleCount() {
			t.Errorf("last bucket %d above count %d", prev, h.GetSampleCount())
		}
	}
	if v := metric(t, fams, "engine_open_connections", "listener=main"); v < 0 {
		t.Errorf("open connections %v", v)
	}
	// A scrape counts nothing of its own on the data path.
	again := scrape(t, admin)
	if a, b := metric(t, fams, "engine_requests_total"), metric(t, again, "engine_requests_total"); a != b {
		t.Errorf("requests %v then %v with no traffic between scrapes", a, b)
	}

	ts.stop()
	lines := readLines(t, logPath)
	if len(lines) != 6 {
		t.Fatalf("access log has %d lines, want 6:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	type entry struct {
		Time       time.Time `json:"time"`
		Client     string    `json:"client"`
		Site       string    `json:"site"`
		Method     string    `json:"method"`
		Path       string    `json:"path"`
		Protocol   string    `json:"protocol"`
		Status     int       `json:"status"`
		Bytes      int64     `json:"bytes"`
		Duration   float64   `json:"duration"`
		TTFB       float64   `json:"ttfb"`
		Upstream   *string   `json:"upstream"`
		UpStatus   *int      `json:"upstream_status"`
		UpTime     *float64  `json:"upstream_header_time"`
		TLS        *string   `json:"tls"`
		KTLS       bool      `json:"ktls"`
		ReprDigest bool      `json:"repr_digest"`
		Referer    *string   `json:"referer"`
		UserAgent  *string   `json:"user_agent"`
	}
	var es []entry
	for _, l := range lines {
		var e entry
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("line does not parse: %v\n%s", err, l)
		}
		if e.Client != "127.0.0.1" && e.Client != "::1" || e.Site != "localhost" || e.Method != "GET" || e.TLS == nil || *e.TLS != "1.3" ||
			e.UserAgent == nil || e.Referer != nil || e.Duration < e.TTFB || time.Since(e.Time) > time.Minute ||
			e.Upstream != nil || e.UpStatus != nil || e.UpTime != nil { // files, not proxied
			t.Errorf("line: %s", l)
		}
		es = append(es, e)
	}
	// Each loop writes its own lines in batches: across connections the
	// order in the file is not the order of the responses.
	seen := map[string]int{}
	for _, e := range es {
		seen[fmt.Sprintf("%s %s %d", e.Protocol, e.Path, e.Status)]++
		if e.Path == "/big.bin" && e.Bytes != int64(len(big)) {
			t.Errorf("big.bin logged with %d bytes, sent %d", e.Bytes, len(big))
		}
	}
	want := map[string]int{"HTTP/1.1 /big.bin 200": 1, "HTTP/1.1 /alpha.txt 200": 2, "HTTP/1.1 /nope 404": 1,
		"HTTP/2.0 /alpha.txt 200": 1, "HTTP/2.0 /nope 404": 1}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("logged %v, want %v", seen, want)
	}
}

// TestAdminListener: /healthz, /debug/pprof/ with pprof = true, methods
// other than GET refused, and the listener gone with the server.
func TestAdminListener(t *testing.T) {
	root := siteRoot(t)
	ts := start(t, fmt.Sprintf("root = %q\n[admin]\nlisten = \"127.0.0.1:0\"\npprof = true\n", root))
	admin := "http://" + ts.AdminAddr()
	for path, want := range map[string]int{"/healthz": 200, "/debug/pprof/": 200, "/debug/pprof/cmdline": 200, "/metrics": 200, "/nothing": 404} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post(admin+"/metrics", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
	}
	ts.stop()
	if _, err := http.Get(admin + "/healthz"); err == nil {
		t.Error("admin listener still answers after the server stopped")
	}
}

var combinedLine = regexp.MustCompile(`^(\S+) - - \[([^\]]+)\] "(\S+) (\S+) (HTTP/[0-9.]+)" (\d{3}) (\d+) "((?:[^"\\]|\\x[0-9a-f]{2})*)" "((?:[^"\\]|\\x[0-9a-f]{2})*)"$`)

// TestAccessLogCombined: nginx's combined format, parsed back field by
// field, with a client's quotes and control bytes escaped.
func TestAccessLogCombined(t *testing.T) {
	root := siteRoot(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	ts := start(t, fmt.Sprintf("root = %q\naccess_log = %q\naccess_log_format = \"combined\"\n", root, logPath))
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt", "User-Agent: a \"quoted\" agent\r\nReferer: http://r/\xe9\r\n"))
	c.response("GET")
	c.send("GET /space%20name.txt HTTP/1.0\r\n\r\n")
	c.response("GET")
	ts.stop()
	lines := readLines(t, logPath)
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	m := combinedLine.FindStringSubmatch(lines[0])
	if m == nil {
		t.Fatalf("not nginx's combined format: %s", lines[0])
	}
	if _, err := time.Parse("02/Jan/2006:15:04:05 -0700", m[2]); err != nil {
		t.Errorf("time %q: %v", m[2], err)
	}
	if m[1] != "127.0.0.1" || m[3] != "GET" || m[4] != "/alpha.txt" || m[5] != "HTTP/1.1" || m[6] != "200" || m[7] != "26" ||
		m[8] != `http://r/\xe9` || m[9] != `a \x22quoted\x22 agent` {
		t.Errorf("fields %q", m[1:])
	}
	m = combinedLine.FindStringSubmatch(lines[1])
	if m == nil || m[4] != "/space%20name.txt" || m[5] != "HTTP/1.0" || m[7] != "6" || m[8] != "-" && m[8] != "" {
		t.Errorf("line 2: %s (%q)", lines[1], m)
	}
}

// TestAccessLogSlowDisk: when the log's destination stops taking lines
// (a pipe nobody reads, standing for a stalled disk), requests go on at
// full speed and the lines that do not fit the buffer are dropped and
// counted; every line is either in the log or counted.
func TestAccessLogSlowDisk(t *testing.T) {
	root := siteRoot(t)
	fifo := filepath.Join(t.TempDir(), "access.pipe")
	if err := mkfifo(fifo); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	// The reader opens first (the engine's open for writing waits for
	// one) and reads nothing until the requests are done.
	rd := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_RDONLY, 0)
		if err != nil {
			t.Error(err)
		}
		rd <- f
	}()
	ts := start(t, fmt.Sprintf("root = %q\naccess_log = %q\naccess_log_buffer = \"4KiB\"\n[admin]\nlisten = \"127.0.0.1:0\"\n", root, fifo))
	pipe := <-rd
	defer pipe.Close()
	const n = 3000
	c := dial(t, ts.addr)
	deadline := time.Now().Add(scale(30 * time.Second))
	for i := range n {
		c.send(get("/alpha.txt?" + strconv.Itoa(i)))
		if resp, _ := c.response("GET"); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests took over 30 s: the log is holding the reactor up", i)
		}
	}
	// Lines reach the writer by the loop's next tick.
	var dropped float64
	waitFor(scale(5*time.Second), func() bool {
		dropped = metric(t, scrape(t, ts.AdminAddr()), "engine_access_log_dropped_lines_total")
		return dropped > 0
	})
	if dropped == 0 {
		t.Fatal("the pipe was never read and nothing was dropped")
	}
	got := make(chan int)
	go func() {
		lines := 0
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines++
		}
		got <- lines
	}()
	ts.stop() // writes what waits, closes the pipe
	lines := <-got
	fams := finalMetrics(t, ts)
	written := metric(t, fams, "engine_access_log_lines_total")
	dropped = metric(t, fams, "engine_access_log_dropped_lines_total")
	if float64(lines)+dropped != n || float64(lines) != written || lines == 0 {
		t.Errorf("%d lines read + %v dropped != %d requests (written counted %v)", lines, dropped, n, written)
	}
	t.Logf("%d lines written, %v dropped", lines, dropped)
}

// finalMetrics reads a stopped server's metrics (its admin listener is
// gone) from WriteMetrics, what /metrics serves.
func finalMetrics(t *testing.T, ts *testServer) map[string]*dto.MetricFamily {
	t.Helper()
	var b bytes.Buffer
	if err := ts.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&b)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// TestAccessLogReopenUnderLoad: the log is renamed and reopened (SIGUSR1
// in engine serve) again and again while clients keep requesting; the
// lines in all the files plus those counted as dropped are exactly the
// requests served.
func TestAccessLogReopenUnderLoad(t *testing.T) {
	root := siteRoot(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	ts := start(t, fmt.Sprintf("root = %q\naccess_log = %q\naccess_log_format = \"json\"\n", root, logPath))
	var served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, ts.addr)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.send(get("/alpha.txt"))
				if resp, _ := c.response("GET"); resp.StatusCode == 200 {
					served.Add(1)
				}
			}
		}()
	}
	rotations := 0
	for i := range 20 {
		time.Sleep(scale(25 * time.Millisecond))
		if err := os.Rename(logPath, logPath+"."+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if err := ts.ReopenLogs(); err != nil {
			t.Fatal(err)
		}
		rotations++
	}
	close(stop)
	wg.Wait()
	ts.stop()
	total := 0
	files, _ := filepath.Glob(logPath + "*")
	for _, f := range files {
		for _, l := range readLines(t, f) {
			if !json.Valid([]byte(l)) {
				t.Fatalf("%s: a line is not JSON (torn by a reopen?): %q", f, l)
			}
			total++
		}
	}
	d := metric(t, finalMetrics(t, ts), "engine_access_log_dropped_lines_total")
	if int64(total)+int64(d) != served.Load() {
		t.Errorf("%d lines in %d files + %v dropped != %d responses", total, len(files), d, served.Load())
	}
	if total == 0 || len(files) != rotations+1 {
		t.Errorf("%d lines in %d files after %d rotations", total, len(files), rotations)
	}
	t.Logf("%d responses, %d lines in %d files, %v dropped", served.Load(), total, len(files), d)
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestAccessLogPipeWithoutReader: an access log that is a named pipe
// nobody has opened yet does not keep the server from starting (opening
// it for writing would wait for a reader); lines wait in the buffer, and
// reach the pipe once a reader opens it.
func TestAccessLogPipeWithoutReader(t *testing.T) {
	root := siteRoot(t)
	fifo := filepath.Join(t.TempDir(), "access.pipe")
	if err := mkfifo(fifo); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	started := make(chan *testServer, 1)
	go func() { started <- start(t, fmt.Sprintf("root = %q\naccess_log = %q\n", root, fifo)) }()
	var ts *testServer
	select {
	case ts = <-started:
	case <-time.After(scale(10 * time.Second)):
		t.Fatal("the server did not start: waiting for a reader of its access log pipe")
	}
	c := dial(t, ts.addr)
	for i := range 50 {
		c.send(get("/alpha.txt?" + strconv.Itoa(i)))
		if resp, _ := c.response("GET"); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	pipe, err := os.OpenFile(fifo, os.O_RDONLY, 0) // the writer finds it within a second
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	got := make(chan int)
	go func() {
		lines := 0
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if lines++; lines == 50 {
				break
			}
		}
		got <- lines
	}()
	select {
	case n := <-got:
		if n != 50 {
			t.Errorf("%d lines through the pipe, want the 50 that waited", n)
		}
	case <-time.After(scale(10 * time.Second)):
		t.Fatal("the lines that waited never reached the pipe")
	}
}
