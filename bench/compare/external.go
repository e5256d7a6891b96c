package main

import (
	"context"
	"fmt"
	"log"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/mediaship/engine/integrity"
	"github.com/mediaship/engine/internal/stats"
)

// The external clients, as row.client names them; "" is engine bench,
// in this process.
const (
	clientCurl   = "curl"
	clientWrk    = "wrk"
	clientH2load = "h2load"
	clientSTime  = "openssl s_time"
)

// clientTool is the Debian tool each external client comes from.
func clientTool(client string) debTool {
	switch client {
	case clientCurl:
		return toolCurl
	case clientWrk:
		return toolWrk
	case clientH2load:
		return toolH2load
	}
	return toolOpenSSL
}

// externalMatrix is the table measured by programs other than this
// harness (curl, wrk, h2load, openssl s_time), so that no figure rests on
// our own client alone; the server's CPU is beside each figure.
func externalMatrix() []row {
	return []row{
		{id: "large-h1-tls", name: "large file, 1 connection, h1 TLS", unit: "MiB/s [server CPU s/GiB]", proto: "h1", tls: true, file: "large.bin", connections: 1, metric: "mibps", client: clientCurl},
		{id: "large-h2-tls", name: "large file, 1 connection, h2 TLS", unit: "MiB/s [server CPU s/GiB]", proto: "h2", tls: true, file: "large.bin", connections: 1, metric: "mibps", client: clientCurl},
		{id: "large-h1", name: "large file, 1 connection, h1 plain", unit: "MiB/s [server CPU s/GiB]", proto: "h1", file: "large.bin", connections: 1, metric: "mibps", client: clientCurl},
		{id: "large-h1-tls-16c", name: "large file, 16 connections, h1 TLS", unit: "MiB/s [server CPU s/GiB]", proto: "h1", tls: true, file: "large.bin", connections: 16, metric: "mibps", client: clientWrk},
		{id: "large-h2-tls-16c", name: "large file, 16 connections (1 stream each), h2 TLS", unit: "MiB/s [server CPU s/GiB]", proto: "h2", tls: true, file: "large.bin", connections: 16, streams: 1, metric: "mibps", client: clientH2load},
		{id: "1k-h1-tls-64c", name: "1 KiB, 64 keep-alive connections, h1 TLS", unit: "req/s (p99 ms) [server µs/req]", proto: "h1", tls: true, file: "1k.bin", connections: 64, metric: "rps", client: clientWrk},
		{id: "1k-h1-tls-new-resumed", name: "1 KiB, new TLS connection per request, resumed (16 at once)", unit: "req/s [server µs/req]", proto: "h1", tls: true, file: "1k.bin", connections: 16, newConns: true, resume: true, metric: "rps", client: clientSTime},
		{id: "1k-h1-tls-new-full", name: "1 KiB, new TLS connection per request, full handshake (16 at once)", unit: "req/s [server µs/req]", proto: "h1", tls: true, file: "1k.bin", connections: 16, newConns: true, metric: "rps", client: clientSTime},
	}
}

// externalScenario is --client external: each server as a file server,
// measured by the external clients, with its CPU in every cell.
type externalScenario struct{ standalone }

func (externalScenario) name() string { return "external" }

func (externalScenario) defaults(baseline bool) (servers, out string) {
	if baseline {
		return "engine,baseline,nginx,caddy", baselineOut
	}
	// Another client's figures are not the engine bench page.
	return "engine,nginx,caddy,gohttp,lighttpd", "docs/BENCHMARKS-external.md"
}

// rows: eight rows; --quick shortens them but keeps them all.
func (externalScenario) rows(bool) []row { return externalMatrix() }

func (externalScenario) server(id string, l *launcher) (func() (*server, error), error) {
	return fileServer(id, l)
}

// extEnv is what every external measurement shares. Immutable once the
// run has started.
type extEnv struct {
	work      string
	digests   map[string]integrity.Digest // by file name, from the fixtures' manifest
	sizes     map[string]int64
	samples   int
	sample    time.Duration // one sample's length
	warmup    time.Duration
	wrkScript string // the Lua file that makes wrk print its counters
	// sys counts the servers' syscalls; nil when it could not be opened.
	sys *syscallCounter
}

// extRun is one cell's measurement: a row, a server's URL for it, and
// what the file must be.
type extRun struct {
	env    *extEnv
	row    row
	url    *url.URL // the file on this server
	size   int64
	digest integrity.Digest
	// Set by prepare: the whole response to the client's request (head
	// and body) in bytes, for the clients that cannot hash; and, for
	// h2load, the requests per run.
	respLen  int64
	requests int
	// kx is the key exchange an s_client probe negotiated beside an
	// s_time row, or why it is not known.
	kx string
}

// extSample is one sample: a curl transfer, a wrk or h2load run, or a
// batch of s_time processes.
type extSample struct {
	reject   string  // why it does not count, "" when it does: a short reason the page sums
	detail   string  // more about a rejection, for the log
	value    float64 // MiB/s or req/s
	bytes    int64   // bytes received (bulk rows)
	requests int64   // responses, or connections on the new-connection rows
	p99      float64 // ms; wrk's latency row
	// s_time: the timed connections, and those it marked as resumed.
	conns, resumed int64
	// What the server's process tree did during the sample.
	use serverUse
}

func rejected(reason, format string, args ...any) extSample {
	return extSample{reject: reason, detail: fmt.Sprintf(format, args...)}
}

// measureExternal measures one cell with the row's client: a warmup,
// then the samples, each with the server's CPU, wake-ups and syscalls
// read around it.
func measureExternal(ctx context.Context, env *extEnv, r row, s *server, base string, repeat int) outcome {
	o := outcome{repeat: repeat, rejected: map[string]int{}}
	u, err := url.Parse(base + "/" + r.file)
	if err != nil {
		o.err = err.Error()
		return o
	}
	x := &extRun{env: env, row: r, url: u, size: env.sizes[r.file], digest: env.digests[r.file]}
	if err := x.prepare(ctx); err != nil {
		o.err = err.Error()
		return o
	}
	o.kxProbe = x.kx
	pid := s.pidFor(r)
	var sum struct{ bytes, requests int64 }
	var uses []serverUse // the accepted samples'
	var values, p99s []float64
	start := time.Now()
	for i := 0; ; i++ {
		// curl takes transfers for the whole sample time, at least
		// --samples of them; the others take --samples runs.
		more := i < env.samples
		if r.client == clientCurl && !more {
			more = time.Since(start) < time.Duration(env.samples)*env.sample && o.accepted > 0
		}
		if !more || ctx.Err() != nil {
			break
		}
		before := readServer(pid, env.sys)
		sm := x.run(ctx, false)
		sm.use = readServer(pid, env.sys).since(before)
		o.samples++
		if sm.reject != "" {
			o.rejected[sm.reject]++
			log.Printf("  %s on %s, sample %d rejected: %s: %s", r.client, s.name, i+1, sm.reject, sm.detail)
			continue
		}
		o.accepted++
		values = append(values, sm.value)
		if r.metric == "rps" && r.client == clientWrk {
			p99s = append(p99s, sm.p99)
		}
		uses = append(uses, sm.use)
		sum.bytes += sm.bytes
		sum.requests += sm.requests
		o.conns += sm.conns
		o.resumed += sm.resumed
	}
	if o.accepted == 0 {
		return o
	}
	o.value = stats.Median(values)
	if len(p99s) > 0 {
		o.p99, o.hasP99 = stats.Median(p99s), true
	}
	use := totalUse(uses)
	switch {
	case !use.cpuOK:
	case r.metric == "mibps" && sum.bytes > 0:
		o.cpu, o.hasCPU = use.cpu/(float64(sum.bytes)/(1<<30)), true
	case r.metric == "rps" && sum.requests > 0:
		o.cpu, o.hasCPU = 1e6*use.cpu/float64(sum.requests), true
	}
	o.setUse(r.metric, use, sum.bytes, sum.requests)
	return o
}

// prepare does what a cell needs before its samples: curl's hashed
// transfer, or a probe request for the clients that cannot check
// bodies, then the warmup (which for h2load also sizes its runs).
func (x *extRun) prepare(ctx context.Context) error {
	deadline := time.Now().Add(x.env.warmup)
	var err error
	switch x.row.client {
	case clientCurl:
		// The warmup's first transfer: every byte of it hashed. The
		// samples write to /dev/null and check only what curl reports.
		if sm := curlHashed(ctx, x.row, x.url.String(), x.size, x.digest); sm.reject != "" {
			return fmt.Errorf("hashed transfer: %s: %s", sm.reject, sm.detail)
		}
	case clientWrk:
		x.respLen, err = probeResponse(ctx, x.url, false, x.size, x.digest)
	case clientSTime:
		x.respLen, err = probeResponse(ctx, x.url, true, x.size, x.digest)
		if err == nil {
			kx, kerr := probeKeyExchange(ctx, x.url.Host)
			if kerr != nil {
				log.Printf("  key exchange probe: %v", kerr)
				kx = "unknown (probe failed)"
			}
			x.kx = kx
		}
	case clientH2load:
		x.requests = x.row.connections
	}
	if err != nil {
		return fmt.Errorf("probe request: %w", err)
	}
	for {
		sm := x.run(ctx, true)
		if sm.reject != "" {
			// The samples will say what is wrong, if it persists. A
			// warmup shorter than wrkBulkRun may end before any large
			// response is complete: that is no news.
			if sm.reject != "no response" {
				log.Printf("  %s: warmup rejected: %s: %s", x.row.client, sm.reject, sm.detail)
			}
			return nil
		}
		if x.row.client == clientH2load && sm.value > 0 {
			// Runs of about one sample's length: the warmup moved
			// connections × size bytes at sm.value MiB/s.
			took := float64(x.row.connections) * float64(x.size) / (sm.value * (1 << 20))
			x.requests = x.row.connections * max(1, int(x.env.sample.Seconds()/took+0.5))
		}
		if x.row.client != clientCurl || !time.Now().Before(deadline) || ctx.Err() != nil {
			return nil
		}
	}
}

// run takes one sample (or, with warmup, one warmup run) with the row's
// client.
func (x *extRun) run(ctx context.Context, warmup bool) extSample {
	switch x.row.client {
	case clientCurl:
		return x.curl(ctx)
	case clientWrk:
		if warmup {
			return x.wrk(ctx, x.env.warmup)
		}
		return x.wrk(ctx, wrkSampleLength(x.row, x.env.sample))
	case clientH2load:
		return x.h2load(ctx)
	case clientSTime:
		if warmup {
			return x.sTime(ctx, 1, time.Second)
		}
		return x.sTime(ctx, x.row.connections, x.env.sample)
	}
	return rejected("no client", "row %s names no client", x.row.id)
}

// clientThreads is the threads wrk and h2load run: one per CPU, at most
// one per connection.
func clientThreads(conns int) int {
	return max(1, min(conns, runtime.NumCPU()))
}

// wholeSeconds rounds a duration to whole seconds, at least one: wrk's
// -d and s_time's -time take whole seconds.
func wholeSeconds(d time.Duration) int {
	return max(1, int(d.Seconds()+0.5))
}

// newExtEnv gathers what the external clients need: the fixtures'
// digests and sizes, and wrk's script, written into work.
func newExtEnv(work string, manifest []integrity.Entry, large int64, samples int, sample, warmup time.Duration) (*extEnv, error) {
	env := &extEnv{work: work, digests: map[string]integrity.Digest{}, samples: samples, sample: sample, warmup: warmup,
		sizes:     map[string]int64{"large.bin": large, "1m.bin": 1 << 20, "1k.bin": 1024},
		wrkScript: filepath.Join(work, "wrk-summary.lua")}
	for _, e := range manifest {
		env.digests[e.Path] = e.Digest
	}
	for name := range env.sizes {
		if _, ok := env.digests[name]; !ok {
			return nil, fmt.Errorf("the fixtures' manifest lacks %s", name)
		}
	}
	return env, os.WriteFile(env.wrkScript, []byte(wrkScript), 0o644)
}
