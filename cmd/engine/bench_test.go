package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/bench"
)

// TestBenchTCPInfo: engine bench against the engine reads TCP_INFO on its
// h1 and h2 sockets and reports it beside each sample's throughput and in
// the summary, in text and in JSON (next to the fields that were there
// before); over h3, or where TCP_INFO cannot be read, it says "not
// measured" instead of printing zeros. Values are only checked to be
// plausible on loopback: RTT above zero, bytes received, no negative
// count.
func TestBenchTCPInfo(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f.bin"), bytes.Repeat([]byte("tcp health "), 100000), 0o644)
	mf := filepath.Join(root, "B3SUMS")
	if code, _, errs := run2("digest", "--root", root, "-o", mf); code != 0 {
		t.Fatal(errs)
	}
	plain := startServer(t, root, "")
	tls := startServer(t, root, "[kernel]\nktls = \"auto\"\n", "self-signed", "true")
	for _, tt := range []struct{ proto, url string }{
		{"h1", "http://" + plain.Addr() + "/f.bin"},
		{"h2", "https://" + tls.Addr() + "/f.bin"},
		{"h3", "https://" + tls.Addr() + "/f.bin"},
	} {
		t.Run(tt.proto, func(t *testing.T) {
			measured := tt.proto != "h3" && runtime.GOOS == "linux"
			args := []string{"bench", tt.url, "--protocol", tt.proto, "-k", "--manifest", mf, "--connections", "2",
				"--duration", "800ms", "--samples", "2", "--warmup", "200ms"}
			code, out, errs := run2(args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			checkTCPText(t, out, measured)
			code, out, errs = run2(append(args, "--json")...)
			if code != 0 {
				t.Fatalf("--json: exit %d\n%s%s", code, out, errs)
			}
			checkTCPJSON(t, out, measured)
		})
	}
}

var (
	sampleTCP  = regexp.MustCompile(`(?m)^ +\d+ .* MiB/s .* req/s  rtt +(\S+) max +(\S+)  retr +(\d+)  ooo +(\d+)  .* verified of `)
	summaryTCP = regexp.MustCompile(`(?m)^tcp: +rtt (\S+) median \[.*\], max (\S+), rttvar (\S+); per sample (\d+) retransmits, (\d+) out-of-order packets \(medians\); ([\d.]+) MiB/s received per socket \(median\)$`)
)

func checkTCPText(t *testing.T, out string, measured bool) {
	t.Helper()
	if !measured {
		if !strings.Contains(out, "\ntcp:        not measured (") || sampleTCP.MatchString(out) {
			t.Errorf("text: want \"not measured\" and no TCP columns:\n%s", out)
		}
		return
	}
	if got := len(sampleTCP.FindAllString(out, -1)); got != 2 {
		t.Errorf("text: %d sample lines with TCP columns, want 2:\n%s", got, out)
	}
	for _, m := range sampleTCP.FindAllStringSubmatch(out, -1) {
		if rtt, err := time.ParseDuration(m[1]); err != nil || rtt <= 0 {
			t.Errorf("text: sample rtt %q, want > 0", m[1])
		}
	}
	m := summaryTCP.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("text: no tcp summary line:\n%s", out)
	}
	rtt, err1 := time.ParseDuration(m[1])
	rttMax, err2 := time.ParseDuration(m[2])
	rate, err3 := strconv.ParseFloat(m[6], 64)
	if err1 != nil || err2 != nil || err3 != nil || rtt <= 0 || rttMax < rtt || rate <= 0 {
		t.Errorf("text: tcp summary %q: want rtt > 0, max >= median, rate > 0", m[0])
	}
}

func checkTCPJSON(t *testing.T, out string, measured bool) {
	t.Helper()
	// The report still parses as before, for bench/compare and the like.
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Accepted != 2 || rep.MiBps.Median <= 0 {
		t.Fatalf("json: %v, accepted %d, %.1f MiB/s:\n%s", err, rep.Accepted, rep.MiBps.Median, out)
	}
	var raw struct {
		Samples []struct {
			TCP map[string]float64 `json:"tcp"`
		} `json:"samples"`
		TCP            map[string]any `json:"tcp"`
		TCPNotMeasured string         `json:"tcp_not_measured"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if !measured {
		if raw.TCPNotMeasured == "" || raw.TCP != nil || raw.Samples[0].TCP != nil {
			t.Errorf("json: tcp_not_measured %q, tcp %v, sample tcp %v: want a reason and no figures", raw.TCPNotMeasured, raw.TCP, raw.Samples[0].TCP)
		}
		return
	}
	if raw.TCPNotMeasured != "" || raw.TCP == nil {
		t.Fatalf("json: tcp_not_measured %q, tcp %v", raw.TCPNotMeasured, raw.TCP)
	}
	for i, s := range raw.Samples {
		for _, k := range []string{"sockets", "retransmits", "out_of_order_packets", "rtt_median_us", "rtt_max_us", "rttvar_median_us", "rttvar_max_us", "receive_bytes_per_s_median"} {
			if _, ok := s.TCP[k]; !ok {
				t.Errorf("json: sample %d: tcp lacks %q: %v", i+1, k, s.TCP)
			}
		}
		if s.TCP["sockets"] < 1 || s.TCP["rtt_median_us"] <= 0 || s.TCP["rtt_max_us"] < s.TCP["rtt_median_us"] ||
			s.TCP["receive_bytes_per_s_median"] <= 0 || s.TCP["retransmits"] < 0 || s.TCP["out_of_order_packets"] < 0 {
			t.Errorf("json: sample %d: implausible tcp %v", i+1, s.TCP)
		}
	}
	if s := rep.TCP; s == nil || s.Samples != 2 || s.RTT.Median <= 0 || s.RTTMax < s.RTT.Median || s.ReceiveRate.Median <= 0 || s.Retransmits.Min < 0 {
		t.Errorf("json: implausible tcp summary %+v", s)
	}
}

// TestBenchAdminMetrics: with --admin, engine bench reads the engine's
// /metrics before and after the samples and reports the differences: the
// body bytes it downloaded over userspace TLS (this kernel has no kernel
// TLS) and the handshakes of its connections, and no socket errors on a
// clean run; in text and JSON. A wrong URL is reported, not fatal.
func TestBenchAdminMetrics(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "f.bin"), bytes.Repeat([]byte("admin "), 200000), 0o644)
	mf := filepath.Join(root, "B3SUMS")
	if code, _, errs := run2("digest", "--root", root, "-o", mf); code != 0 {
		t.Fatal(errs)
	}
	srv := startServer(t, root, "[kernel]\nktls = \"auto\"\n[admin]\nlisten = \"127.0.0.1:0\"\n", "self-signed", "true")
	args := []string{"bench", "https://" + srv.Addr() + "/f.bin", "--protocol", "h1", "-k", "--manifest", mf,
		"--connections", "2", "--duration", "600ms", "--samples", "2", "--warmup", "200ms",
		"--admin", "http://" + srv.AdminAddr(), "--json"}
	code, out, errs := run2(args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	var r bench.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	m := r.Server.Metrics
	if r.Server == nil || m == nil || m.Error != "" {
		t.Fatalf("no server metrics in the report: %+v", r.Server)
	}
	// The server counts bytes as the kernel takes them, the client as
	// they arrive: socket buffers (megabytes on loopback) sit between the
	// two windows. About the same, then.
	tlsBytes := m.BytesByTransport["userspace_tls"] + m.BytesByTransport["kernel_tls_sendfile"]
	if tlsBytes < r.Bytes*3/4 || tlsBytes > r.Bytes*5/4 || m.BytesByTransport["plain_sendfile"] != 0 {
		t.Errorf("bytes by transport %v, the client verified %d", m.BytesByTransport, r.Bytes)
	}
	for kind, n := range m.SocketErrors {
		if n != 0 {
			t.Errorf("socket errors %s = %d on a clean run", kind, n)
		}
	}
	if _, ok := m.SocketErrors["timeout"]; !ok {
		t.Errorf("socket errors has no kinds: %v", m.SocketErrors)
	}
	code, out, errs = run2(args[:len(args)-1]...)
	if code != 0 || !regexp.MustCompile(`server metrics \(http://\S+, over the samples\):\n  socket errors: aborted 0, accept_error 0, rejected 0, timeout 0, write_error 0\n  bytes: .*userspace_tls [\d.]+ MiB`).MatchString(out) {
		t.Errorf("text: exit %d\n%s%s", code, out, errs)
	}
	// Not an admin listener: said, and the run still counts.
	bad := append(args[:len(args)-3:len(args)-3], "--admin", "http://"+srv.Addr())
	code, out, errs = run2(bad...)
	if code != 0 || !strings.Contains(out, "server metrics: not read (") {
		t.Errorf("wrong --admin: exit %d\n%s%s", code, out, errs)
	}
}
