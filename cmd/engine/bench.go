package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/integrity"
)

const benchUsage = `Usage: engine bench URL... [flags]
       engine bench --self-check [--size BYTES] [--tls] [--connections N] [--duration D]

Loads URLs and reports throughput and latency. A body byte counts only
when its whole response was verified: the right status, the exact length
and the expected BLAKE3 digest (--manifest or --expect-digest; a range is
checked against the same bytes of the local file beside the manifest). A
sample is accepted only when every byte that arrived in it was verified
and no response overlapping it failed; other samples are rejected with
their reasons. Responses in flight at the end are waited for (each up to
--timeout) and judged; the report shows bytes verified against bytes
received. For h1 and h2 on Linux each sample also shows the client
sockets' TCP_INFO: RTT, retransmits, out-of-order packets.
Exit 0 only with --min-accepted accepted samples (default: all).
Ctrl-C reports what was measured; responses it cuts off count nowhere.
--self-check measures this client against an in-process source instead.
`

func benchCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.Config
	fs.StringVar(&c.Protocol, "protocol", "h1", "h1, h2 (TLS) or h3")
	fs.IntVar(&c.Connections, "connections", 1, "connections")
	fs.IntVar(&c.Streams, "streams", 1, "concurrent requests per connection (h2, h3)")
	fs.DurationVar(&c.Duration, "duration", 0, "measured time (default 10s)")
	fs.IntVar(&c.Requests, "requests", 0, "stop after this many responses instead")
	fs.IntVar(&c.Samples, "samples", 5, "samples the run is split into")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "time before measuring")
	fs.Float64Var(&c.Rate, "rate", 0, "open loop: requests per second on a fixed schedule")
	rng := fs.String("range", "", "request bytes A-B (checked against the local file beside --manifest)")
	manifest := fs.String("manifest", "", "B3SUMS with the expected digests (paths matched to URL paths)")
	expectDigest := fs.String("expect-digest", "", "BLAKE3 hex digest every response must have")
	fs.Int64Var(&c.ExpectSize, "expect-size", -1, "length every response must have")
	fs.BoolVar(&c.LengthOnly, "length-only", false, "without a manifest or digest, check status and length only (figures then count unverified bytes)")
	fs.BoolVar(&c.NewConnectionPerRequest, "new-connections", false, "a new connection (and TLS handshake) per request")
	fs.BoolVar(&c.Insecure, "k", false, "accept any TLS certificate")
	fs.IntVar(&c.ServerPID, "server-pid", 0, "measure this process's CPU and peak RSS (with its children)")
	fs.StringVar(&c.AdminURL, "admin", "", "an engine's admin listener (http://127.0.0.1:9100): report its socket errors, bytes by transport and handshakes over the samples")
	fs.DurationVar(&c.Timeout, "timeout", 60*time.Second, "per request, to the last body byte (also the longest wait for responses in flight at the end)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	svg := fs.String("svg", "", "write a chart of the samples to this SVG file")
	minAccepted := fs.Int("min-accepted", 0, "accepted samples required for exit 0 (default: all)")
	selfCheck := fs.Bool("self-check", false, "measure the client against an in-process source")
	size := fs.Int64("size", 100<<20, "self-check: response size")
	useTLS := fs.Bool("tls", false, "self-check: over TLS")
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage, "\nflags:\n"); fs.PrintDefaults() }
	urls, err := parseMixed(fs, args)
	if err != nil {
		return 2
	}
	c.URLs = urls
	c.RangeLast = -1
	if *rng != "" {
		a, b, ok := strings.Cut(*rng, "-")
		first, err1 := strconv.ParseInt(a, 10, 64)
		last, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || first < 0 || last < first {
			fmt.Fprintf(stderr, "engine bench: --range %q: expected A-B\n", *rng)
			return 2
		}
		c.RangeFirst, c.RangeLast = first, last
	}
	if *manifest != "" {
		f, err := os.Open(*manifest)
		if err != nil {
			fmt.Fprintf(stderr, "engine bench: %v\n", err)
			return 2
		}
		c.Manifest, err = integrity.ReadManifest(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "engine bench: %s: %v\n", *manifest, err)
			return 2
		}
		c.LocalRoot = filepath.Dir(*manifest)
	}
	if *expectDigest != "" {
		d, err := integrity.ParseHex(*expectDigest)
		if err != nil {
			fmt.Fprintf(stderr, "engine bench: --expect-digest: %v\n", err)
			return 2
		}
		c.ExpectDigest = &d
	}
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		c.Progress = func(p bench.ProgressInfo) {
			phase := ""
			if p.Warmup {
				phase = " (warmup)"
			}
			fmt.Fprintf(stderr, "\r%6.0fs%s  %s  %d responses  %d errors      ", p.Elapsed.Seconds(), phase, human(p.Bytes), p.Responses, p.Errors)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var r *bench.Report
	if *selfCheck {
		r, err = bench.SelfCheck(ctx, c, *size, *useTLS)
	} else {
		r, err = bench.Run(ctx, c)
	}
	if c.Progress != nil {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "engine bench: %v\n", err)
		return 2
	}
	if *asJSON {
		r.WriteJSON(stdout)
	} else {
		r.WriteText(stdout)
	}
	if *svg != "" {
		f, err := os.Create(*svg)
		if err == nil {
			err = r.WriteSVG(f)
			f.Close()
		}
		if err != nil {
			fmt.Fprintf(stderr, "engine bench: --svg: %v\n", err)
		}
	}
	need := *minAccepted
	if need <= 0 {
		need = len(r.Samples)
	}
	if r.Accepted < need || r.Interrupted {
		return 1
	}
	return 0
}
