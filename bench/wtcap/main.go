// Command wtcap measures what the engine's WebTransport diagnostics
// endpoint carries on this machine, beside an HTTP/3 file download from
// the same server in the same run: reliable streams (mode=source, bytes
// generated and from a file) and datagrams (mode=datagrams at fixed
// rates). It writes docs/BENCHMARKS-webtransport.md.
//
//	go run ./bench/wtcap [--repeats 5] [--duration 5s] [--out docs/BENCHMARKS-webtransport.md]
//
// The client is engine bench in this process, with its integrity gate: a
// stream's every byte is checked against the pattern or the file's
// BLAKE3, a datagram's sequence number and bytes; loss is counted, never
// hidden. One engine serves every configuration; they take turns, the
// order rotating each round.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/internal/stats"
)

// variant is one configuration measured.
type variant struct {
	name     string
	protocol string // h3 or webtransport
	target   string // path and query
	rate     int    // datagrams per second; 0 for streams
}

const fileSize = 256 << 20

func main() {
	repeats := flag.Int("repeats", 5, "turns of every configuration")
	duration := flag.Duration("duration", 5*time.Second, "measured time of one run")
	out := flag.String("out", "docs/BENCHMARKS-webtransport.md", "page to write")
	flag.Parse()
	log.SetFlags(0)
	pinned := bench.PinSelf()

	variants := []variant{
		{"HTTP/3 file download (GET, 256 MiB)", "h3", "/big.bin", 0},
		{"WebTransport stream, generated (mode=source&bytes=256MiB)", "webtransport", fmt.Sprintf("/.well-known/engine/diagnostics?mode=source&bytes=%d", fileSize), 0},
		{"WebTransport stream, the file (mode=source&file=/big.bin)", "webtransport", "/.well-known/engine/diagnostics?mode=source&file=/big.bin", 0},
	}
	for _, r := range []int{20_000, 100_000, 300_000} {
		variants = append(variants, variant{fmt.Sprintf("WebTransport datagrams, %d/s × 1200 B", r), "webtransport",
			fmt.Sprintf("/.well-known/engine/diagnostics?mode=datagrams&rate=%d&count=%d", r, r), r})
	}

	h, err := bench.NewHarness("bench-wtcap-")
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	work, bin := h.Work, h.Engine

	root := filepath.Join(work, "root")
	os.MkdirAll(root, 0o755)
	big := make([]byte, fileSize)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(root, "big.bin"), big, 0o644); err != nil {
		log.Fatal(err)
	}
	digest, _, err := integrity.Sum(strings.NewReader(string(big)))
	if err != nil {
		log.Fatal(err)
	}
	big = nil

	p := startEngine(bin, work, root)
	defer p.Process.Kill()
	addr := p.addr
	// The file's digest is computed on first use; sessions with file=
	// are refused with 503 until it is known.
	warm := bench.Config{URLs: []string{"https://" + addr + variants[2].target}, Protocol: "webtransport", Connections: 1, Requests: 1,
		Samples: 1, Insecure: true, ExpectDigest: &digest, ExpectSize: -1, RangeLast: -1, Timeout: time.Minute}
	for i := 0; ; i++ {
		rep, err := bench.Run(context.Background(), warm)
		if err == nil && rep.Accepted == 1 {
			break
		}
		if i == 60 {
			log.Fatalf("the file's digest never became known: %v %+v", err, rep)
		}
		time.Sleep(time.Second)
	}

	mibs := make([][]float64, len(variants))
	cpu := make([][]float64, len(variants)) // server CPU s/GiB
	loss := make([][]float64, len(variants))
	var lost, expected, sent = make([]int64, len(variants)), make([]int64, len(variants)), make([]int64, len(variants))
	rcvbuf := make([]int64, len(variants)) // the kernel's UDP receive-buffer drops during the runs
	for r := 0; r < *repeats; r++ {
		for k := range variants {
			i := (k + r) % len(variants)
			v := variants[i]
			c := bench.Config{URLs: []string{"https://" + addr + v.target}, Protocol: v.protocol, Connections: 1, Streams: 1,
				Duration: *duration, Samples: 5, Warmup: time.Second, Insecure: true, ExpectSize: -1, RangeLast: -1,
				ServerPID: p.Process.Pid, Timeout: time.Minute}
			if v.protocol == "h3" || strings.Contains(v.target, "file=") {
				c.ExpectDigest = &digest
			}
			before := udpRcvbufErrors()
			rep, err := bench.Run(context.Background(), c)
			if err != nil {
				log.Fatalf("%s: %v", v.name, err)
			}
			rcvbuf[i] += udpRcvbufErrors() - before
			if rep.Accepted != len(rep.Samples) || rep.Server == nil || rep.Bytes == 0 {
				log.Fatalf("%s: %d of %d samples accepted (errors %v)", v.name, rep.Accepted, len(rep.Samples), rep.Errors)
			}
			mibs[i] = append(mibs[i], rep.MiBps.Median)
			cpu[i] = append(cpu[i], rep.Server.CPUSeconds/(float64(rep.Bytes)/(1<<30)))
			line := fmt.Sprintf("%-60s %8.1f MiB/s  %.3f s/GiB", v.name, rep.MiBps.Median, cpu[i][len(cpu[i])-1])
			if d := rep.Datagrams; d != nil {
				loss[i] = append(loss[i], d.LossPercent)
				lost[i] += d.Lost
				expected[i] += d.Expected
				sent[i] += d.Sent
				line += fmt.Sprintf("  lost %d of %d (%.2f%%), server sent %d", d.Lost, d.Expected, d.LossPercent, d.Sent)
			}
			log.Print(line)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# WebTransport diagnostics: streams and datagrams beside an HTTP/3 download\n\n")
	fmt.Fprintf(&b, "`go run ./bench/wtcap --repeats %d --duration %v`, %s, commit %s, %d CPUs, kernel %s, Go %s.\n\n",
		*repeats, *duration, time.Now().UTC().Format("2006-01-02 15:04 UTC"), h.Build.Tree.String(), runtime.NumCPU(), bench.KernelRelease(), runtime.Version())
	fmt.Fprintf(&b, "%s\n\n", pinned)
	fmt.Fprintf(&b, "One engine (`[webtransport] enabled = true`, `max_datagram_bytes = 1200`, a self-signed certificate, loopback) serves every configuration; the client is `engine bench` in the harness's process, one QUIC connection, one session or request at a time, %v measured after a 1 s warm-up, in 5 samples. The configurations take turns, %d rounds, the order rotating so each takes every place. Figures are medians over the rounds of each run's median sample, with the range.\n\n", *duration, *repeats)
	fmt.Fprintf(&b, "Integrity: every byte counted was checked. The HTTP/3 download and `file=` sessions against the file's BLAKE3 (the session's `Repr-Digest`), generated streams against the pattern byte by byte, datagrams by sequence number and every byte; a sample with one wrong byte, a duplicate or a corrupt datagram would have stopped the harness. Lost datagrams do not reject a sample: they are counted below.\n\n")
	fmt.Fprintf(&b, "| configuration | MiB/s (median) | range | vs HTTP/3 download | server CPU s/GiB (median) | range | datagram loss |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for i, v := range variants {
		l := "–"
		if v.rate > 0 {
			l = fmt.Sprintf("%.2f%% median (%d of %d; server sent %d; kernel UDP receive-buffer drops %d)", stats.Median(loss[i]), lost[i], expected[i], sent[i], rcvbuf[i])
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f–%.1f | %.2f | %.3f | %.3f–%.3f | %s |\n", v.name, stats.Median(mibs[i]), stats.Min(mibs[i]), stats.Max(mibs[i]),
			stats.Median(mibs[i])/stats.Median(mibs[0]), stats.Median(cpu[i]), stats.Min(cpu[i]), stats.Max(cpu[i]), l)
	}
	fmt.Fprintf(&b, "\nServer CPU is utime+stime of the engine process over the samples, per GiB verified. The datagram rows are offered loads: a session asks for one second's worth (`count` = `rate`) of 1200-byte datagrams; the server sends them on that schedule, or as fast as quic-go's send queue takes them when it cannot keep up (then the session lasts longer than a second), then its count line, and the next session starts. Their MiB/s is what arrived intact, at most the offered rate (1200 × rate / 2^20: 22.9, 114.4, 343.3 MiB/s). Loss is datagrams asked for and not received. The server's line says how many it handed to quic-go (whose send queue blocks when full rather than drop); the kernel's UDP `RcvbufErrors` (/proc/net/snmp, the whole machine, over the runs) says how many the receiving socket's buffer dropped. Datagrams lost with neither were dropped in the receiving process: quic-go keeps 128 received datagrams per connection and HTTP/3 32 per session, and drops what arrives while they are full, so a client that falls behind the offered rate on its one CPU loses the rest, as a UDP application would.\n\n")
	fmt.Fprintf(&b, "Not measured: more than one connection or session at once, a real network (loss, delay, MTU below loopback's), browsers' WebTransport clients, the echo and sink modes (the first sends back what it gets, the second hashes it: their figures would be the client's), and datagrams larger than 1200 bytes (the endpoint's ceiling).\n")
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(b.String())
}

type proc struct {
	*exec.Cmd
	addr string
}

func startEngine(bin, work, root string) *proc {
	cert, err := selfsigned.New("localhost", 24*time.Hour, "localhost")
	if err != nil {
		log.Fatal(err)
	}
	cp, kp, err := selfsigned.PEM(cert)
	if err != nil {
		log.Fatal(err)
	}
	os.WriteFile(filepath.Join(work, "cert.pem"), cp, 0o644)
	os.WriteFile(filepath.Join(work, "key.pem"), kp, 0o600)
	cfg := fmt.Sprintf(`listen = "127.0.0.1:0"
workers = 1
root = %q
[kernel]
ktls = "auto"
[[sites]]
domain = "*"
root = %q
[sites.tls]
cert = %q
key = %q
[webtransport]
enabled = true
max_bytes_per_session = "1TiB"
idle_timeout = "10s"
`, root, root, filepath.Join(work, "cert.pem"), filepath.Join(work, "key.pem"))
	path := filepath.Join(work, "engine.toml")
	os.WriteFile(path, []byte(cfg), 0o644)
	p := &proc{Cmd: exec.Command(bin, "serve", "-c", path)}
	if taskset, err := exec.LookPath("taskset"); err == nil && runtime.NumCPU() >= 2 {
		p.Cmd = exec.Command(taskset, "-c", "1", bin, "serve", "-c", path)
	}
	stderr, _ := p.StderrPipe()
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	var seen strings.Builder
	for p.addr == "" && sc.Scan() {
		l := sc.Text()
		seen.WriteString(l + "\n")
		if j := strings.Index(l, "msg=serving addr="); j >= 0 {
			p.addr = strings.Fields(l[j+len("msg=serving addr="):])[0]
		}
	}
	if p.addr == "" {
		log.Fatalf("engine did not start:\n%s", seen.String())
	}
	go io.Copy(io.Discard, stderr)
	return p
}

// udpRcvbufErrors reads the machine's UDP receive-buffer drop count.
func udpRcvbufErrors() int64 {
	b, _ := os.ReadFile("/proc/net/snmp")
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "RcvbufErrors" && i < len(f) {
				v, _ := strconv.ParseInt(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}
