package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/testtool"
)

// The testdata files are what the clients printed here (wrk 4.1.0,
// h2load 1.52.0, OpenSSL 3.0 s_time, curl 7.88.1 on Debian 12) against
// bench/compare/gohttp serving a 1,024-byte and a 99,943,778-byte file,
// run with the arguments the harness uses; s_client-*.txt, OpenSSL 3.0
// s_client probing a Go server offering its defaults and P-256 only.
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const largeTestSize = 99943778

func TestParseWrk(t *testing.T) {
	for _, tc := range []struct {
		file       string
		conns      int
		size       int64
		respLen    int64
		want       wrkSummary
		wantReason string
	}{
		{"wrk-1k-64c.txt", 64, 1024, 1210,
			wrkSummary{durationUS: 1029594, requests: 11446, bytes: 13849660, p99US: 77930}, ""},
		{"wrk-404.txt", 64, 1024, 1210,
			wrkSummary{durationUS: 1015388, requests: 22151, bytes: 3898576, status: 22151, p99US: 25737}, "status"},
		{"wrk-large-16c.txt", 16, largeTestSize, largeTestSize + 200,
			wrkSummary{durationUS: 3092217, requests: 16, bytes: 1779101152, p99US: 2837590}, ""},
	} {
		out := readTestdata(t, tc.file)
		got, err := parseWrk(out)
		if err != nil {
			t.Errorf("parseWrk(%s): %v", tc.file, err)
			continue
		}
		if got != tc.want {
			t.Errorf("parseWrk(%s) = %+v, want %+v", tc.file, got, tc.want)
		}
		// The same count in wrk's own words: "11446 requests in 1.03s".
		if !strings.Contains(out, strconv.FormatInt(got.requests, 10)+" requests in ") {
			t.Errorf("%s: parsed %d requests, which wrk's summary does not say", tc.file, got.requests)
		}
		if reason, detail := checkWrk(got, tc.conns, tc.size, tc.respLen); reason != tc.wantReason {
			t.Errorf("checkWrk(%s) = %q (%s), want %q", tc.file, reason, detail, tc.wantReason)
		}
	}
	if _, err := parseWrk("Running 1s test @ https://127.0.0.1:1/\nunable to connect to 127.0.0.1:1 Connection refused\n"); err == nil {
		t.Error("parseWrk of output without the script's line: no error")
	}
	if _, err := parseWrk("compare-wrk: duration_us=1 requests=2\n"); err == nil {
		t.Error("parseWrk of a line lacking counters: no error")
	}
}

func TestCheckWrk(t *testing.T) {
	ok := wrkSummary{durationUS: 1e6, requests: 100, bytes: 100 * 1210}
	for _, tc := range []struct {
		name string
		edit func(*wrkSummary)
		want string
	}{
		{"clean", func(*wrkSummary) {}, ""},
		{"in flight at the end", func(w *wrkSummary) { w.bytes += 64 * 1210 }, ""},
		{"socket error", func(w *wrkSummary) { w.readErr = 1 }, "socket errors"},
		{"timeout", func(w *wrkSummary) { w.tout = 2 }, "timeouts"},
		{"status", func(w *wrkSummary) { w.status = 1 }, "status"},
		{"no response", func(w *wrkSummary) { w.requests, w.bytes = 0, 5000 }, "no response"},
		// A redirect or an error page with a 2xx/3xx status: too few bytes.
		{"short bodies", func(w *wrkSummary) { w.bytes = 100 * 300 }, "length"},
		{"too many bytes", func(w *wrkSummary) { w.bytes = (100 + 64 + 1) * 1210 }, "length"},
	} {
		w := ok
		tc.edit(&w)
		if got, detail := checkWrk(w, 64, 1024, 1210); got != tc.want {
			t.Errorf("%s: checkWrk = %q (%s), want %q", tc.name, got, detail, tc.want)
		}
	}
}

func TestParseH2load(t *testing.T) {
	for _, tc := range []struct {
		file       string
		n          int
		size       int64
		want       h2loadResult
		wantReason string
	}{
		{"h2load-large-16c.txt", 32, largeTestSize, h2loadResult{tlsProtocol: "TLSv1.3", appProtocol: "h2", seconds: 8.53,
			total: 32, started: 32, done: 32, succeeded: 32, status2xx: 32, dataBytes: 32 * largeTestSize}, ""},
		{"h2load-404.txt", 32, 1024, h2loadResult{tlsProtocol: "TLSv1.3", appProtocol: "h2", seconds: 0.03083,
			total: 32, started: 32, done: 32, failed: 32, status4xx: 32, dataBytes: 608}, "failed requests"},
		{"h2load-plain-h1.txt", 8, 1024, h2loadResult{appProtocol: "h2c", seconds: 0.00107,
			total: 8, started: 4, failed: 8, errored: 8}, "protocol"},
	} {
		got, err := parseH2load(readTestdata(t, tc.file))
		if err != nil {
			t.Errorf("parseH2load(%s): %v", tc.file, err)
			continue
		}
		// "finished in" has two decimals of its unit.
		if d := got.seconds - tc.want.seconds; d > 0.0006 || d < -0.0006 {
			t.Errorf("parseH2load(%s): %v s, want %v s", tc.file, got.seconds, tc.want.seconds)
		}
		got.seconds = tc.want.seconds
		if got != tc.want {
			t.Errorf("parseH2load(%s) = %+v, want %+v", tc.file, got, tc.want)
		}
		if reason, detail := checkH2load(got, tc.n, tc.size); reason != tc.wantReason {
			t.Errorf("checkH2load(%s) = %q (%s), want %q", tc.file, reason, detail, tc.wantReason)
		}
	}
	good, err := parseH2load(readTestdata(t, "h2load-large-16c.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		n    int
		size int64
		want string
	}{
		{"more requests asked than done", 48, largeTestSize, "failed requests"},
		{"DATA bytes off by one", 32, largeTestSize + 1, "length"},
	} {
		if got, detail := checkH2load(good, tc.n, tc.size); got != tc.want {
			t.Errorf("%s: checkH2load = %q (%s), want %q", tc.name, got, detail, tc.want)
		}
	}
	if _, err := parseH2load("starting benchmark...\nfinished in 1.00s, 1 req/s, 1B/s\n"); err == nil {
		t.Error("parseH2load of a summary without its requests line: no error")
	}
}

func TestParseSTime(t *testing.T) {
	reuse, err := parseSTime(readTestdata(t, "s_time-reuse.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (sTimeResult{conns: 1458, bytesRead: 1764180, marks: 1458, resumed: 1458}); reuse != want {
		t.Errorf("parseSTime(s_time-reuse.txt) = %+v, want %+v", reuse, want)
	}
	full, err := parseSTime(readTestdata(t, "s_time-new.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (sTimeResult{conns: 874, bytesRead: 1057540, marks: 874}); full != want {
		t.Errorf("parseSTime(s_time-new.txt) = %+v, want %+v", full, want)
	}
	if _, err := parseSTime(readTestdata(t, "s_time-refused.txt")); err == nil {
		t.Error("parseSTime of a refused connection: no error")
	}

	const respLen = 1210 // s_time's "bytes read per connection" here
	for _, tc := range []struct {
		name    string
		results []sTimeResult
		resume  bool
		respLen int64
		want    string
	}{
		{"resumed", []sTimeResult{reuse, reuse}, true, respLen, ""},
		{"full", []sTimeResult{full}, false, respLen, ""},
		{"full handshakes where resumption was wanted", []sTimeResult{reuse, full}, true, respLen, "not resumed"},
		{"resumed where none should be", []sTimeResult{reuse}, false, respLen, "resumed"},
		{"some other response", []sTimeResult{reuse}, true, respLen + 1, "length"},
		{"a mark missing", []sTimeResult{{conns: 3, bytesRead: 3 * respLen, marks: 2, resumed: 2}}, true, respLen, "resumption unknown"},
		{"nothing done", []sTimeResult{reuse, {}}, true, respLen, "no connection"},
	} {
		if got, detail := checkSTime(tc.results, tc.respLen, tc.resume); got != tc.want {
			t.Errorf("%s: checkSTime = %q (%s), want %q", tc.name, got, detail, tc.want)
		}
	}
}

func TestCheckCurl(t *testing.T) {
	rep, err := parseCurlReport(readTestdata(t, "curl-h2.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (curlReport{code: "200", version: "2", length: "99943778", size: largeTestSize, pretransfer: 0.003223, total: 0.187010}); rep != want {
		t.Errorf("parseCurlReport(curl-h2.txt) = %+v, want %+v", rep, want)
	}
	refused, err := parseCurlReport(readTestdata(t, "curl-refused.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseCurlReport("curl: (7) Failed to connect\n"); err == nil {
		t.Error("parseCurlReport without a -w line: no error")
	}

	h2 := row{proto: "h2", tls: true}
	fewer := rep
	fewer.size--
	otherLength := rep
	otherLength.length = "99943777"
	for _, tc := range []struct {
		name string
		r    row
		rep  curlReport
		want string
	}{
		{"good", h2, rep, ""},
		{"curl counted a byte less", h2, fewer, "length"},
		{"another Content-Length", h2, otherLength, "length"},
		{"HTTP/1.1 where h2 was asked", row{proto: "h1", tls: true}, rep, "protocol"},
		{"refused", h2, refused, "status 000"},
	} {
		if got, detail := checkCurl(tc.r, tc.rep, largeTestSize); got != tc.want {
			t.Errorf("%s: checkCurl = %q (%s), want %q", tc.name, got, detail, tc.want)
		}
	}

	want := integrity.Digest{1, 2, 3}
	for _, tc := range []struct {
		name string
		body curlBody
		want string
	}{
		{"good", curlBody{n: largeTestSize, digest: want}, ""},
		{"one byte differs", curlBody{n: largeTestSize, digest: integrity.Digest{1, 2, 4}}, "digest"},
		{"fewer bytes through the pipe", curlBody{n: largeTestSize - 1, digest: want}, "length"},
	} {
		if got, detail := checkCurlBody(tc.body, largeTestSize, want); got != tc.want {
			t.Errorf("%s: checkCurlBody = %q (%s), want %q", tc.name, got, detail, tc.want)
		}
	}
}

// curlFixtures serves a random body at /good.bin, the same with one byte
// changed at /flipped.bin, one byte short of its Content-Length at
// /short.bin and one byte shorter, with a Content-Length to match, at
// /shorter.bin, over TLS with HTTP/2; it returns the server's URL, the
// body and its digest.
func curlFixtures(t *testing.T) (string, []byte, integrity.Digest) {
	t.Helper()
	good := make([]byte, 3<<20+17)
	rand.Read(good)
	want, _, err := integrity.Sum(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := good
		switch r.URL.Path {
		case "/flipped.bin":
			body = flipped
		case "/shorter.bin":
			body = good[:len(good)-1]
		case "/short.bin":
			// The promised length, then one byte less: curl must notice.
			w.Header().Set("Content-Length", strconv.Itoa(len(good)))
			w.Write(good[:len(good)-1])
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, good, want
}

// TestCurlTransfers runs curl against a local server that serves the
// fixture, the fixture with one byte changed, one byte short of its
// Content-Length and one byte shorter: the hashed transfer accepts only
// the fixture; a sample (to /dev/null) accepts the changed byte too,
// which is why a cell's first transfer is the hashed one, and rejects
// the lengths.
func TestCurlTransfers(t *testing.T) {
	testtool.Require(t, "curl")
	base, good, want := curlFixtures(t)
	size := int64(len(good))
	ctx := context.Background()
	for _, tc := range []struct {
		path          string
		proto         string
		hashed, timed string // the rejections
	}{
		{"/good.bin", "h1", "", ""},
		{"/good.bin", "h2", "", ""},
		{"/flipped.bin", "h1", "digest", ""},
		{"/flipped.bin", "h2", "digest", ""},
		{"/short.bin", "h1", "curl failed", "curl failed"},
		{"/shorter.bin", "h2", "length", "length"},
	} {
		r := row{proto: tc.proto, tls: true, file: tc.path[1:]}
		for _, x := range []struct {
			how  string
			s    extSample
			want string
		}{
			{"hashed", curlHashed(ctx, r, base+tc.path, size, want), tc.hashed},
			{"to /dev/null", curlTimed(ctx, r, base+tc.path, size), tc.timed},
		} {
			if x.s.reject != x.want {
				t.Errorf("curl %s over %s, %s: reject %q (%s), want %q", tc.path, tc.proto, x.how, x.s.reject, x.s.detail, x.want)
			}
			if x.want == "" && (x.s.bytes != size || x.s.value <= 0) {
				t.Errorf("curl %s over %s, %s: accepted with %d bytes at %v MiB/s", tc.path, tc.proto, x.how, x.s.bytes, x.s.value)
			}
		}
	}
}

// TestCurlCellHashesFirst: a curl cell whose server changes a byte fails
// before its samples, with the hashed transfer's reason; one that serves
// the fixture starts them.
func TestCurlCellHashesFirst(t *testing.T) {
	testtool.Require(t, "curl")
	base, good, want := curlFixtures(t)
	for _, tc := range []struct {
		path string
		want string // in prepare's error; "" for none
	}{
		{"/good.bin", ""},
		{"/flipped.bin", "hashed transfer: digest: BLAKE3 "},
	} {
		u, err := url.Parse(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		x := &extRun{env: &extEnv{warmup: 0}, row: row{proto: "h1", tls: true, client: clientCurl}, url: u, size: int64(len(good)), digest: want}
		err = x.prepare(context.Background())
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("prepare %s = %v, want an error with %q", tc.path, err, tc.want)
		}
	}
}

func TestReadProbe(t *testing.T) {
	body := []byte(strings.Repeat("0123456789abcdef", 64))
	want, _, err := integrity.Sum(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	head := "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1024\r\n\r\n"
	for _, tc := range []struct {
		name    string
		resp    string
		toClose bool
		want    int64 // 0: an error
	}{
		{"keep-alive", head + string(body), false, int64(len(head)) + 1024},
		{"HTTP/1.0, closed after the body", strings.Replace(head, "1.1", "1.0", 1) + string(body), true, int64(len(head)) + 1024},
		{"bytes after the body before the close", head + string(body) + "x", true, 0},
		{"a byte changed", head + "1" + string(body[1:]), false, 0},
		{"404", strings.Replace(head, "200 OK", "404 Not Found", 1) + string(body), false, 0},
		{"no Content-Length", "HTTP/1.1 200 OK\r\n\r\n" + string(body), false, 0},
		{"short", head + string(body[:1000]), false, 0},
	} {
		got, err := readProbe(bufio.NewReader(strings.NewReader(tc.resp)), tc.toClose, 1024, want)
		if got != tc.want || (tc.want == 0) != (err != nil) {
			t.Errorf("%s: readProbe = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

// TestLighttpdTemplate: the lighttpd template fills with every
// placeholder the harness knows, and lighttpd accepts the result
// (lighttpd -tt loads the modules and checks the configuration without
// serving; .ci/run installs lighttpd and its TLS module).
func TestLighttpdTemplate(t *testing.T) {
	peers, err := fs.Sub(embeddedPeers, "peers")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf, err := peerTemplates{fs: peers, name: "peers"}.fill("lighttpd.conf.tmpl", "__DIR__", dir, "__PLAIN_PORT__", "18080", "__TLS_PORT__", "18443")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`server.document-root = "` + dir + `/www"`,
		"server.port = 18080",
		`$SERVER["socket"] == "127.0.0.1:18443"`,
		`ssl.pemfile = "` + dir + `/cert.pem"`,
		`"server.h2proto" => "enable"`,
		`"Ciphersuites" => "TLS_AES_128_GCM_SHA256"`,
		"server.max-keep-alive-requests = 1000000",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("filled lighttpd.conf lacks %q:\n%s", want, conf)
		}
	}
	for _, line := range strings.Split(conf, "\n") {
		if strings.Contains(line, "mod_accesslog") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			t.Errorf("lighttpd.conf loads mod_accesslog (%s): the peers run without an access log", line)
		}
	}
	t.Run("lighttpd -tt", func(t *testing.T) {
		lighttpd := testtool.Require(t, toolLighttpd.bin)
		for _, f := range toolLighttpd.files {
			testtool.RequireFile(t, f, "lighttpd's TLS module", "apt-get install "+strings.Join(toolLighttpd.pkgs, " "))
		}
		if err := writeCert(dir); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, "www"), 0o755)
		os.MkdirAll(filepath.Join(dir, "logs"), 0o755)
		path := filepath.Join(dir, "lighttpd.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(lighttpd, "-tt", "-f", path).CombinedOutput(); err != nil {
			t.Errorf("lighttpd -tt -f lighttpd.conf: %v\n%s", err, out)
		}
	})
}

func TestExternalCellText(t *testing.T) {
	bulk := row{metric: "mibps", client: clientCurl}
	rps := row{metric: "rps", client: clientWrk}
	withCPU := func(repeat int, v, cpu float64) outcome {
		o := clean(repeat, v)
		o.cpu, o.hasCPU = cpu, true
		return o
	}
	latency := withCPU(1, 52345.4, 12.34)
	latency.p99, latency.hasP99 = 3.104, true
	for _, tc := range []struct {
		name string
		r    row
		c    cell
		want string
	}{
		{"bulk", bulk, cell{repeats: []outcome{withCPU(1, 726.1, 0.8213)}}, "726.1 [0.821]"},
		{"bulk, median of repeats", bulk, cell{repeats: []outcome{withCPU(1, 700, 0.8), withCPU(2, 800, 1.0), withCPU(3, 750, 0.9)}}, "750.0 [0.900]"},
		{"1 KiB with p99", rps, cell{repeats: []outcome{latency}}, "52345 (p99 3.10 ms) [12.3]"},
		{"CPU not read", bulk, cell{repeats: []outcome{clean(1, 5)}}, "5.0 [CPU unknown]"},
		{"a repeat without figure", bulk, cell{repeats: []outcome{withCPU(1, 600, 0.5), {repeat: 2, samples: 2, rejected: map[string]int{"digest": 2}}}}, "600.0 [0.500] (1 of 2 repeats)"},
		{"cannot", bulk, cell{cannot: "no HTTP/2"}, "no HTTP/2"},
	} {
		if got := tc.c.extText(tc.r); got != tc.want {
			t.Errorf("%s: extText = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRenderExternal: an external page says which client measured each
// row and what it checked, and which rows were checked for status and
// length only.
func TestRenderExternal(t *testing.T) {
	rows := externalMatrix()
	servers := []*server{{name: "engine", about: "engine dev"}, {id: "lighttpd", name: "lighttpd", about: "lighttpd/1.4.69"}}
	cells := make([]map[string]*cell, len(rows))
	for i, r := range rows {
		o := clean(1, 100)
		o.cpu, o.hasCPU = 0.5, true
		if r.client == clientSTime {
			o.conns = 1000
			if r.resume {
				o.resumed = 1000
			}
		}
		cells[i] = map[string]*cell{"engine": {repeats: []outcome{o}}, "lighttpd": {repeats: []outcome{o}}}
	}
	doc := render(page{command: "go run ./bench/compare --client external", when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), cpus: 2,
		repeats: 1, samples: 2, sample: time.Second, servers: servers, rows: rows, cells: cells, client: "external",
		installed:      []string{"`apt-get install -y lighttpd lighttpd-mod-openssl`"},
		leftOut:        []string{"caddy: did not start: test"},
		clientVersions: map[string]string{clientCurl: "curl 7.88.1"}})
	for _, want := range []string{
		"Client: external programs",
		"| large file, 1 connection, h1 TLS | MiB/s [server CPU s/GiB] | 100.0 [0.500] | 100.0 [0.500] | 1.00 |",
		"## How each row was measured",
		"- curl: curl 7.88.1",
		"- wrk: version unknown",
		"**large file, 1 connection, h1 TLS** (MiB/s [server CPU s/GiB]). Client: curl, run as `curl -sS",
		"**large file, 16 connections, h1 TLS** (MiB/s [server CPU s/GiB]). Client: wrk, run as `wrk -t ",
		"-d 5s",
		"Checked: Status and length, not content (wrk",
		"Checked: Status and length, not content (h2load",
		"BLAKE3-hashes all of it",
		"runs that command, which writes the body to /dev/null",
		"run as `curl -sS --max-time 300 -o /dev/null -w '%{stderr}…' --http1.1 -k --tlsv1.3",
		"16 processes at once",
		"| lighttpd | 1,000 of 1,000 resumed | 0 of 1,000 resumed |",
		"Installed by this run (as root, from Debian): `apt-get install -y lighttpd lighttpd-mod-openssl`.",
		"- caddy: did not start: test",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("external page lacks %q:\n%s", want, doc)
		}
	}
	for _, bad := range []string{"## The client's ceiling", "Server CPU seconds per GiB served (median)"} {
		if strings.Contains(doc, bad) {
			t.Errorf("external page has %q, which is engine bench's", bad)
		}
	}
}

// TestCeilingMark: a figure within 10% of its cell's client ceiling
// (engine bench's CPUs over its cost) is marked as client-bound; one
// further below is not, nor is a cell without client figures, a
// fixed-rate row or an external client's.
func TestCeilingMark(t *testing.T) {
	rows := []row{
		{name: "large file, 1 connection, h1 plain", unit: "MiB/s", metric: "mibps"},
		{name: "1 KiB, 64 keep-alive connections, h1 plain", unit: "req/s", metric: "rps"},
		{name: "large file, 1 connection, h2 TLS", unit: "MiB/s", metric: "mibps"},
		{name: "1 KiB at a fixed 5,000 req/s, h1 plain: p99 latency", unit: "ms p99", metric: "p99"},
		{name: "large file, 16 connections, h1 TLS", unit: "MiB/s", metric: "mibps", client: clientWrk},
	}
	// A repeat whose client used cpu seconds over 2 s on 2 CPUs while
	// verifying 2 s of the figure's traffic.
	bulk := func(repeat int, v, cpu float64) outcome {
		o := clean(repeat, v)
		o.clientFrom(&bench.ClientStats{CPUSeconds: cpu, Seconds: 2, Parallelism: 2, Bytes: int64(2 * v * (1 << 20))}, "mibps", v)
		return o
	}
	small := func(repeat int, v, cpu float64) outcome {
		o := clean(repeat, v)
		o.clientFrom(&bench.ClientStats{CPUSeconds: cpu, Seconds: 2, Parallelism: 2, Responses: int64(2 * v)}, "rps", v)
		return o
	}
	rate := clean(1, 4.2)
	rate.clientFrom(&bench.ClientStats{CPUSeconds: 3.9, Seconds: 2, Parallelism: 2, Responses: 10000}, "p99", 4.2)
	servers := []*server{{name: "engine"}, {name: "nginx"}}
	cells := []map[string]*cell{
		// 3.7 of 4 CPU-seconds: 92.5% busy, marked; 3.5: 87.5%, not.
		{"engine": {repeats: []outcome{bulk(1, 950, 3.7)}}, "nginx": {repeats: []outcome{bulk(1, 899, 3.5)}}},
		{"engine": {repeats: []outcome{small(1, 50000, 1.0)}}, "nginx": {repeats: []outcome{small(1, 91000, 3.64), small(2, 93000, 3.8), small(3, 90000, 3.0)}}},
		{"engine": {repeats: []outcome{clean(1, 5000)}}, "nginx": {repeats: []outcome{clean(1, 5000)}}},
		{"engine": {repeats: []outcome{rate}}, "nginx": {repeats: []outcome{rate}}},
		{"engine": {repeats: []outcome{bulk(1, 950, 3.9)}}, "nginx": {cannot: "no HTTP/2"}},
	}
	doc := render(page{when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), cpus: 2, repeats: 1, samples: 3, sample: time.Second,
		servers: servers, rows: rows, cells: cells})
	for _, want := range []string{
		"| large file, 1 connection, h1 plain | MiB/s | 950.0 ‡ | 899.0 |",
		"| 1 KiB, 64 keep-alive connections, h1 plain | req/s | 50000.0 | 91000.0 ‡ |",
		"| large file, 1 connection, h2 TLS | MiB/s | 5000.0 | 5000.0 |",
		"| 1 KiB at a fixed 5,000 req/s, h1 plain: p99 latency | ms p99 | 4.2 | 4.2 |",
		"‡: within 10% of the client's ceiling for that cell",
		"## The client's ceiling",
		"| large file, 1 connection, h1 plain | MiB/s | 1027.0 (1.994 s/GiB, 92% busy) | 1027.4 (1.993 s/GiB, 88% busy) |",
		"| 1 KiB, 64 keep-alive connections, h1 plain | req/s | 200000 (10.0 µs/req, 25% busy) | 100000 (20.0 µs/req, 91% busy) |",
		"| large file, 1 connection, h2 TLS | MiB/s | - | - |",
		"| 1 KiB at a fixed 5,000 req/s, h1 plain: p99 latency | ms p99 | 98% busy | 98% busy |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "| large file, 16 connections, h1 TLS | MiB/s | 950.0 ‡") || strings.Contains(doc, "| large file, 16 connections, h1 TLS | MiB/s | 1") {
		t.Errorf("an external client's row is marked or has a client ceiling:\n%s", doc)
	}
}

func TestParseSClientGroup(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{readTestdata(t, "s_client-x25519.txt"), "X25519"},
		{readTestdata(t, "s_client-p256.txt"), "P-256"},
		{"Peer Temp Key: X25519, 253 bits\nNegotiated TLS1.3 group: X25519MLKEM768\n", "X25519MLKEM768"},
		{"Server Temp Key: ECDH, secp384r1, 384 bits\n", "P-384"},
		{"Peer Temp Key: X448, 448 bits\n", "X448"},
		{readTestdata(t, "s_time-refused.txt"), ""},
	} {
		if got := parseSClientGroup(tc.in); got != tc.want {
			t.Errorf("parseSClientGroup(%.60q...) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestProbeKeyExchange: the probe beside an s_time row names what a
// server negotiated with s_time's OpenSSL: X25519 from a Go server at its
// defaults (OpenSSL 3.0 has no X25519MLKEM768), P-256 from one that
// allows only P-256.
func TestProbeKeyExchange(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed (apt-get install openssl)")
	}
	for _, tc := range []struct {
		groups []tls.CurveID
		want   string
	}{{nil, "X25519"}, {[]tls.CurveID{tls.CurveP256}, "P-256"}} {
		s := httptest.NewUnstartedServer(http.NotFoundHandler())
		s.TLS = &tls.Config{CurvePreferences: tc.groups}
		s.StartTLS()
		got, err := probeKeyExchange(context.Background(), s.Listener.Addr().String())
		s.Close()
		if err != nil || got != tc.want {
			t.Errorf("server offering %v: probe = %q, %v; want %q", tc.groups, got, err, tc.want)
		}
	}
}

// TestKeyExchangeSection: on the rows of new connections the page names
// what each server negotiated, from engine bench's counts or the s_client
// probe, and says where servers differ.
func TestKeyExchangeSection(t *testing.T) {
	rows := []row{
		{name: "1 KiB, new TLS connection per request (16 at once)", unit: "req/s", metric: "rps", tls: true, newConns: true},
		{name: "1 KiB, new TLS connection per request, full handshake (16 at once)", unit: "req/s", metric: "rps", tls: true, newConns: true, client: clientSTime},
		{name: "large file, 1 connection, h1 TLS", unit: "MiB/s", metric: "mibps", tls: true},
	}
	withKX := func(kx map[string]int64, probe string) outcome {
		o := clean(1, 1000)
		o.kx, o.kxProbe = kx, probe
		return o
	}
	servers := []*server{{name: "engine"}, {name: "nginx"}, {name: "caddy"}}
	cells := []map[string]*cell{
		{"engine": {repeats: []outcome{withKX(map[string]int64{"X25519MLKEM768": 12345}, "")}},
			"nginx": {repeats: []outcome{withKX(map[string]int64{"X25519": 9000}, "")}},
			"caddy": {repeats: []outcome{withKX(map[string]int64{"X25519MLKEM768": 10, "X25519": 2}, "")}}},
		{"engine": {repeats: []outcome{withKX(nil, "X25519"), withKX(nil, "X25519")}},
			"nginx": {repeats: []outcome{withKX(nil, "X25519")}},
			"caddy": {cannot: "not installed"}},
		{"engine": {repeats: []outcome{clean(1, 1)}}, "nginx": {repeats: []outcome{clean(1, 1)}}, "caddy": {repeats: []outcome{clean(1, 1)}}},
	}
	p := page{when: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), cpus: 2, repeats: 1, samples: 3, sample: time.Second,
		servers: servers, rows: rows, cells: cells}
	doc := render(p)
	for _, want := range []string{
		"Key exchanges: every side at its default (no `--key-exchange`)",
		"## Key exchange on the rows of new connections",
		"| 1 KiB, new TLS connection per request (16 at once) | X25519MLKEM768 (all 12,345 responses) | X25519 (all 9,000 responses) | X25519MLKEM768 ×10, X25519 ×2 |",
		"| 1 KiB, new TLS connection per request, full handshake (16 at once) | X25519 (s_client probe) | X25519 (s_client probe) | not installed |",
		"Not like with like: on 1 row the servers negotiated different key exchanges",
		"1 KiB, new TLS connection per request (16 at once): X25519 (nginx); X25519MLKEM768 (engine)",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "| large file, 1 connection, h1 TLS | X25519") {
		t.Errorf("a row of kept connections is in the key exchange table:\n%s", doc)
	}
	cells[0]["nginx"].repeats[0].kx = map[string]int64{"X25519MLKEM768": 9000}
	cells[0]["caddy"].repeats[0].kx = map[string]int64{"X25519MLKEM768": 9}
	p.keyExchange = keyExchangeChoice{name: "X25519", id: tls.X25519}
	doc = render(p)
	for _, want := range []string{
		"Key exchanges: `--key-exchange X25519`: `engine bench` offered only X25519, and the engine's configuration accepted only it (`key_exchanges = [\"X25519\"]`)",
		"On each of these rows every server negotiated the same key exchange.",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("page lacks %q:\n%s", want, doc)
		}
	}
}

// FuzzClientOutput: the parsers of client output never panic, and what
// they accept is self-consistent.
func FuzzClientOutput(f *testing.F) {
	for _, name := range []string{"wrk-1k-64c.txt", "wrk-404.txt", "h2load-large-16c.txt", "h2load-404.txt", "s_time-reuse.txt", "s_time-new.txt", "curl-h2.txt", "s_client-x25519.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, out string) {
		parseWrk(out)
		parseH2load(out)
		parseCurlReport(out)
		parseSClientGroup(out)
		if s, err := parseSTime(out); err == nil && s.resumed > s.marks {
			t.Errorf("parseSTime: %d resumed of %d marks", s.resumed, s.marks)
		}
	})
}

// TestNewOutcomeClient: a repeat's client ceiling is its figure over how
// busy the client was, so a figure is never above it while the client
// was at most fully busy, even when the samples were uneven (the median
// sample above the run's mean); a repeat without accepted samples keeps
// how busy the client was and has no ceiling.
func TestNewOutcomeClient(t *testing.T) {
	samples := []bench.Sample{{Accepted: true}, {Accepted: true}, {Accepted: true}}
	// Samples of 1000, 1000 and 400 MiB/s: median 1000, mean 800.
	rep := &bench.Report{Samples: samples, Accepted: 3, MiBps: bench.Summary{Median: 1000}, Bytes: 2 * 800 << 20,
		Client: &bench.ClientStats{CPUSeconds: 1.9, Seconds: 2, Parallelism: 1, Bytes: 2 * 800 << 20}}
	o := newOutcome(1, rep, nil, "mibps")
	if !o.hasClient || o.clientBusy != 0.95 || o.clientCeiling < o.value || math.Abs(o.clientCeiling-1000/0.95) > 1e-9 {
		t.Errorf("outcome: busy %v, ceiling %v, figure %v; want busy 0.95, ceiling 1052.6", o.clientBusy, o.clientCeiling, o.value)
	}
	c := cell{repeats: []outcome{o}}
	if !c.clientBound(row{metric: "mibps"}) {
		t.Error("a figure for which the client was 95% busy is not marked")
	}
	rep.Accepted, rep.MiBps = 0, bench.Summary{}
	o = newOutcome(1, rep, nil, "mibps")
	if !o.hasClient || o.clientCeiling != 0 {
		t.Errorf("no accepted sample: hasClient %v, ceiling %v", o.hasClient, o.clientCeiling)
	}
}
