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
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/bench/peer"
	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/selfsigned"
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

	page := render(results{
		command: strings.Join(append([]string{"go run ./bench/wtcap"}, os.Args[1:]...), " "), when: time.Now().UTC(),
		preamble: h.Preamble(), treeNote: h.TreeNote(), pinned: pinned, quicGo: quicGoVersion(),
		repeats: *repeats, duration: *duration, variants: variants,
		mibs: mibs, cpu: cpu, loss: loss, lost: lost, expected: expected, sent: sent, rcvbuf: rcvbuf,
	})
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(page)
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
	e, err := peer.StartEngine(bin, path, 1, false) // the harness keeps CPU 0
	if err != nil {
		log.Fatal(err)
	}
	p := &proc{Cmd: e.Cmd, addr: e.Addr}
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
