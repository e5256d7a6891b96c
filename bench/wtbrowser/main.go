// Command wtbrowser measures WebTransport from a browser: headless
// Chromium runs the engine's diagnostics page (engine/wtpage) against
// the engine's endpoint, and engine bench --protocol webtransport runs
// the same sessions, in turns, against the same engine. It writes
// docs/BENCHMARKS-browser.md.
//
//	go run ./bench/wtbrowser [--repeats 5] [--out docs/BENCHMARKS-browser.md]
//
// Both clients check every byte they count: the page against the
// endpoint's pattern (in JavaScript), engine bench with its integrity
// gate. Datagram loss is counted, never hidden. Chromium comes from
// Debian (apt-get install chromium).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/bench/peer"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/internal/stats"
)

// row is one configuration measured: by the page (query) or by engine
// bench (target).
type row struct {
	name   string
	client string // "Chromium page" or "engine bench"
	query  string // the page's query (the page runs only what it names)
	target string // engine bench's path and query
	rate   int    // datagrams per second; 0 for streams
}

const (
	sourceBytes = 256 << 20
	dgRate      = 20_000
	endpoint    = "/.well-known/engine/diagnostics"
)

func main() {
	repeats := flag.Int("repeats", 5, "turns of every configuration")
	out := flag.String("out", "docs/BENCHMARKS-browser.md", "page to write")
	flag.Parse()
	log.SetFlags(0)
	pinned := bench.PinSelf()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		log.Fatal("chromium not installed (apt-get install chromium)")
	}
	version, _ := exec.Command(chromium, "--version").Output()

	off := "echo_streams=0&echo_datagrams=0&source_bytes=0&datagram_count=0&"
	rows := []row{
		{name: fmt.Sprintf("stream, generated, %d MiB (mode=source)", sourceBytes>>20), client: "Chromium page",
			query: strings.Replace(off, "source_bytes=0", fmt.Sprintf("source_bytes=%d", sourceBytes), 1)},
		{name: fmt.Sprintf("stream, generated, %d MiB (mode=source)", sourceBytes>>20), client: "engine bench",
			target: fmt.Sprintf("%s?mode=source&bytes=%d", endpoint, sourceBytes)},
		{name: "echo, 4 streams × 16 MiB (mode=echo)", client: "Chromium page",
			query: strings.Replace(off, "echo_streams=0", "echo_streams=4&echo_bytes=16777216", 1)},
		{name: fmt.Sprintf("datagrams, %d/s × 1200 B for 1 s (mode=datagrams)", dgRate), client: "Chromium page", rate: dgRate,
			query: strings.Replace(off, "datagram_count=0", fmt.Sprintf("datagram_rate=%d&datagram_count=%d", dgRate, dgRate), 1)},
		{name: fmt.Sprintf("datagrams, %d/s × 1200 B for 1 s (mode=datagrams)", dgRate), client: "engine bench", rate: dgRate,
			target: fmt.Sprintf("%s?mode=datagrams&rate=%d&count=%d", endpoint, dgRate, dgRate)},
	}

	h, err := bench.NewHarness("bench-wtbrowser-")
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	e, spki := startEngine(h.Engine, h.Work)
	defer e.Cmd.Process.Kill()
	base := "https://" + e.Addr + endpoint

	// Chromium on CPU 0 with this harness; the engine has CPU 1.
	wrapper := filepath.Join(h.Work, "chromium")
	os.WriteFile(wrapper, []byte("#!/bin/sh\nexec taskset -c 0 "+chromium+" \"$@\"\n"), 0o755)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(wrapper), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(filepath.Join(h.Work, "profile")),
		chromedp.Flag("ignore-certificate-errors-spki-list", spki))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		log.Fatalf("start chromium: %v", err)
	}

	// The page's byte check alone, in memory: what it costs the page.
	var checkMiBs []float64
	for r := 0; r < *repeats; r++ {
		checkMiBs = append(checkMiBs, checkSpeed(ctx, base))
	}

	mibs := make([][]float64, len(rows))
	loss := make([][]float64, len(rows))
	lost, expected := make([]int64, len(rows)), make([]int64, len(rows))
	for r := 0; r < *repeats; r++ {
		for k := range rows {
			i := (k + r) % len(rows)
			v := rows[i]
			var m, l float64
			var nLost, nExp int64
			if v.query != "" {
				m, l, nLost, nExp = runPage(ctx, base, v.query)
			} else {
				m, l, nLost, nExp = runBench(e, v.target)
			}
			mibs[i] = append(mibs[i], m)
			line := fmt.Sprintf("%-14s %-52s %8.1f MiB/s", v.client, v.name, m)
			if v.rate > 0 {
				loss[i] = append(loss[i], l)
				lost[i] += nLost
				expected[i] += nExp
				line += fmt.Sprintf("  lost %d of %d (%.2f%%)", nLost, nExp, l)
			}
			log.Print(line)
		}
	}

	var b strings.Builder
	bench.WriteHead(&b, "WebTransport from a browser: the diagnostics page in Chromium beside engine bench",
		strings.Join(append([]string{"go run ./bench/wtbrowser"}, os.Args[1:]...), " "), time.Now().UTC(), h.Preamble(), h.TreeNote())
	fmt.Fprintf(&b, "%s\n\n", pinned)
	fmt.Fprintf(&b, "Browser: %s, headless, on CPU 0 (`taskset -c 0`), with `--ignore-certificate-errors-spki-list` for the engine's self-signed certificate (the page's own sessions also pass it as `serverCertificateHashes`: ECDSA P-256, valid 10 days). It loads the engine's diagnostics page from `https://localhost:PORT%s`, which runs only what its query names, checks every byte in JavaScript, and reports when done; the figures are the page's own. The other client is `engine bench --protocol webtransport` in this harness's process (5 samples of 5 s after a 1 s warm-up, sessions back to back; its datagram loss is over the sessions its report counts).\n\n", strings.TrimSpace(string(version)), endpoint)
	fmt.Fprintf(&b, "The engine: `listen = \"localhost:0\"`, `workers = 1`, `[kernel] ktls = \"auto\"`, one TLS site, `[webtransport] enabled = true`, `max_bytes_per_session = \"1TiB\"`, `idle_timeout = \"10s\"`; started as `taskset -c 1 engine serve -c FILE`. The configurations take turns, %d rounds, the order rotating so each takes every place; figures are medians over the rounds with the range.\n\n", *repeats)
	fmt.Fprintf(&b, "| configuration | client | MiB/s (median) | range | datagram loss |\n|---|---|---:|---:|---:|\n")
	for i, v := range rows {
		l := "–"
		if v.rate > 0 {
			l = fmt.Sprintf("%.2f%% median (%d of %d over the rounds)", stats.Median(loss[i]), lost[i], expected[i])
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f–%.1f | %s |\n", v.name, v.client, stats.Median(mibs[i]), stats.Min(mibs[i]), stats.Max(mibs[i]), l)
	}
	fmt.Fprintf(&b, "\nThe page's byte check alone, run in the page over 64 MiB in memory (no network): %.0f MiB/s median (%.0f–%.0f).\n", stats.Median(checkMiBs), stats.Min(checkMiBs), stats.Max(checkMiBs))
	fmt.Fprintf(&b, "\nThe page's stream figure runs from the session being ready to the stream's last byte, checked; engine bench's from the CONNECT to the stream's last byte, checked, its median sample. The echo row counts the bytes that came back (the same number went out) over the time from the first stream's opening to the last one's end; engine bench has no echo mode to compare with. A datagram row's MiB/s is what arrived intact, at most the offered 22.9 MiB/s; loss is datagrams the server sent and the client did not receive.\n\n")
	fmt.Fprintf(&b, "Not measured: the browser's CPU, more than one session at once, a real network, the page's figures in other browsers (Firefox has WebTransport too; it is not installed here).\n")
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(b.String())
}

// diag is what the page reports (window.engineDiagnostics).
type diag struct {
	State   string
	Errors  []string
	Results map[string]struct {
		Bytes    int64
		Verified bool
		MiBPerS  float64 `json:"mib_per_s"`
		Sent     int64
		Received int64
		Lost     int64
		Corrupt  int64
		Seconds  float64
	}
}

// runPage runs the page with query and returns what it measured.
func runPage(ctx context.Context, base, query string) (mibs, lossPct float64, lost, expected int64) {
	tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"?run=1&"+query)); err != nil {
		log.Fatalf("open the page: %v", err)
	}
	s, err := chromedp.Run(tctx, chromedp.Evaluate[string](`new Promise((ok) => {
  const f = () => window.engineDiagnostics && window.engineDiagnostics.state === "done" ?
    ok(JSON.stringify(window.engineDiagnostics)) : setTimeout(f, 100);
  f();
})`, chromedp.EvalAwaitPromise))
	if err != nil {
		log.Fatalf("wait for the page: %v", err)
	}
	var d diag
	if err := json.Unmarshal([]byte(s), &d); err != nil || len(d.Errors) > 0 {
		log.Fatalf("the page reports %q (%v)", d.Errors, err)
	}
	switch {
	case d.Results["source"].Bytes > 0:
		r := d.Results["source"]
		if !r.Verified || r.Bytes != sourceBytes {
			log.Fatalf("page source: %+v", r)
		}
		return r.MiBPerS, 0, 0, 0
	case d.Results["echo"].Bytes > 0:
		return d.Results["echo"].MiBPerS, 0, 0, 0
	default:
		r, ok := d.Results["datagrams"]
		if !ok || r.Corrupt > 0 || r.Sent == 0 {
			log.Fatalf("page datagrams: %+v", d.Results)
		}
		// Intact datagrams over the second they were offered in.
		return float64(r.Received*1200) / (1 << 20), 100 * float64(r.Lost) / float64(r.Sent), r.Lost, r.Sent
	}
}

// runBench runs engine bench on target against e.
func runBench(e *peer.Engine, target string) (mibs, lossPct float64, lost, expected int64) {
	c := bench.Config{URLs: []string{"https://" + e.Addr + target}, Protocol: "webtransport", Connections: 1, Streams: 1,
		Duration: 5 * time.Second, Samples: 5, Warmup: time.Second, Insecure: true, ExpectSize: -1, RangeLast: -1, Timeout: time.Minute}
	rep, err := bench.Run(context.Background(), c)
	if err != nil {
		log.Fatalf("engine bench %s: %v", target, err)
	}
	if rep.Accepted != len(rep.Samples) || rep.Bytes == 0 {
		log.Fatalf("engine bench %s: %d of %d samples accepted (%v)", target, rep.Accepted, len(rep.Samples), rep.Errors)
	}
	if d := rep.Datagrams; d != nil {
		return rep.MiBps.Median, d.LossPercent, d.Lost, d.Expected
	}
	return rep.MiBps.Median, 0, 0, 0
}

// startEngine starts the engine on localhost with a 10-day ECDSA
// certificate and returns it with the certificate's SPKI hash, for
// Chromium's switch.
func startEngine(bin, work string) (*peer.Engine, string) {
	cert, err := selfsigned.New("localhost", 10*24*time.Hour, "localhost")
	if err != nil {
		log.Fatal(err)
	}
	cp, kp, err := selfsigned.PEM(cert)
	if err != nil {
		log.Fatal(err)
	}
	os.WriteFile(filepath.Join(work, "cert.pem"), cp, 0o644)
	os.WriteFile(filepath.Join(work, "key.pem"), kp, 0o600)
	root := filepath.Join(work, "root")
	os.MkdirAll(root, 0o755)
	cfg := fmt.Sprintf(`listen = "localhost:0"
workers = 1
[kernel]
ktls = "auto"
[[sites]]
domain = "localhost"
default = true
root = %q
[sites.tls]
cert = %q
key = %q
[webtransport]
enabled = true
max_bytes_per_session = "1TiB"
idle_timeout = "10s"
`, root, filepath.Join(work, "cert.pem"), filepath.Join(work, "key.pem"))
	path := filepath.Join(work, "engine.toml")
	os.WriteFile(path, []byte(cfg), 0o644)
	e, err := peer.StartEngine(bin, path, 1, false)
	if err != nil {
		log.Fatal(err)
	}
	sum := sha256.Sum256(cert.Leaf.RawSubjectPublicKeyInfo)
	return e, base64.StdEncoding.EncodeToString(sum[:])
}

// checkSpeed times the page's pattern check over 64 MiB in memory.
func checkSpeed(ctx context.Context, base string) float64 {
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(base)); err != nil {
		log.Fatalf("open the page: %v", err)
	}
	v, err := chromedp.Run(tctx, chromedp.Evaluate[float64](`(() => {
  const P = window.engineDiagnostics.Pattern, b = new Uint8Array(64 << 20);
  new P(0).run(b, true);
  const t0 = performance.now();
  if (new P(0).run(b, false) !== -1) throw new Error("the check refused its own pattern");
  return 64 / ((performance.now() - t0) / 1000);
})()`))
	if err != nil {
		log.Fatalf("time the check: %v", err)
	}
	return v
}
