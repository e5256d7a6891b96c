package main

import (
	"debug/buildinfo"
	"fmt"
	"strings"
	"time"

	"github.com/mediaship/engine/bench"
	"github.com/mediaship/engine/internal/stats"
)

// results is what a run measured and what the page says of the run.
type results struct {
	command  string
	when     time.Time
	preamble string // bench.Harness.Preamble: the engine, the machine
	treeNote string // bench.Harness.TreeNote
	pebble   string // Pebble's and challtestsrv's versions
	workers  int    // the engine's workers
	repeats  int
	duration time.Duration
	conns    int
	// startTimes: start to the first verified response, per repeat.
	startTimes []time.Duration
	// Per server of the handshake runs (names): handshakes per second and
	// server µs per handshake per run, and the key exchanges the
	// handshakes negotiated over all runs.
	names       []string
	rates, cpus [][]float64
	kx          []map[string]int64
}

// pebbleAbout is the versions of the CA's two programs, from their build
// information (the ones found on $PATH may not be pebbleVersion).
func pebbleAbout(c *ca) string {
	version := func(bin string) string {
		if bi, err := buildinfo.ReadFile(bin); err == nil && bi.Main.Version != "" {
			return bi.Main.Version + ", " + bi.GoVersion
		}
		return "version unknown"
	}
	return fmt.Sprintf("pebble %s; pebble-challtestsrv %s", version(c.pebbleBin), version(c.dnsBn))
}

// The configurations the page gives: every setting bench/acme writes
// (startCA, ca.engineConfig), the rest at each program's default.
const (
	pebbleConfig = "`keyAlgorithm = \"ecdsa\"`, `retryAfter` 1 s for authorizations and orders, one profile valid 90 days, External Account Binding off, `httpPort`/`tlsPort` where the engine answers challenges; environment `PEBBLE_VA_NOSLEEP=1` (validate at once), `PEBBLE_WFE_NONCEREJECT=0`, `PEBBLE_AUTHZREUSE=0`; pebble-challtestsrv as its DNS with `-defaultIPv4 127.0.0.1 -defaultIPv6 \"\"` and its own challenge servers off"
	engineConfig = "`listen = \"127.0.0.1:PORT\"`, `workers` = %d (the CPUs), `[kernel] ktls = \"auto\"`, one `[[sites]]` `a.example.com` with `[sites.tls] acme = true` (and `[acme]` `ca` = Pebble, `ca_root` = Pebble's root, `storage`, `challenges = [\"tls-alpn-01\"]`, `agree = true`) or with `cert` and `key`; every other key at its default, `key_exchanges` included"
)

// render writes the page.
func render(r results) string {
	var b strings.Builder
	bench.WriteHead(&b, "Automatic HTTPS: measured against Pebble", r.command, r.when, r.preamble, r.treeNote)
	fmt.Fprintf(&b, "Let's Encrypt's test CA and its DNS, all on loopback: %s. Configurations (every setting bench/acme writes; the rest at each program's default):\n\n", r.pebble)
	fmt.Fprintf(&b, "- **Pebble**: %s.\n", pebbleConfig)
	fmt.Fprintf(&b, "- **engine**: "+engineConfig+".\n", r.workers)
	b.WriteString("- **client**: Go's crypto/tls and net/http in the harness's process, at their defaults but for the roots (Pebble's only) and no session resumption.\n\n")
	fmt.Fprintf(&b, "## Start to the first verified HTTPS response\n\n")
	fmt.Fprintf(&b, "From starting `engine serve` with an empty `storage` (so: a new account, an order, a TLS-ALPN-01 validation by Pebble against the engine's own listener, issuance) to the first response over HTTPS whose certificate chains to Pebble's root (the client trusts nothing else) and whose 1 MiB body has the file's BLAKE3. The client retries every 5 ms; until the certificate is there the engine answers its handshakes with `unrecognized_name`.\n\n")
	fmt.Fprintf(&b, "| median | min | max | repeats |\n|---:|---:|---:|---:|\n| %v | %v | %v | %d |\n\n", time.Duration(stats.Median(durs(r.startTimes))).Round(time.Millisecond), minD(r.startTimes), maxD(r.startTimes), len(r.startTimes))
	fmt.Fprintf(&b, "Pebble validates at once here (`PEBBLE_VA_NOSLEEP=1`, no network) but is configured to answer `Retry-After: 1` while an authorization or order is pending, which certmagic honours when it polls: most runs are one such second plus the rest (account, order, validation, issuance, the first handshake); a run whose first poll found the validation done took 0.5 s. A public CA takes seconds more, which the engine spends serving its other names.\n\n")
	fmt.Fprintf(&b, "## Full TLS handshakes per second\n\n")
	fmt.Fprintf(&b, "Two engine processes, each 1 site, TLS 1.3, the same certificate chain (ECDSA P-256 leaf from Pebble and its intermediate) and key: one gets it from ACME (certmagic's cache, looked up at every handshake), the other from the files copied out of that storage. %d client goroutines in this process make full handshakes (no session resumption, the chain verified against Pebble's root) for %v per run; the two servers take turns, %d runs each. Server CPU is utime+stime of its process over the run, per handshake. The key exchange is what each handshake negotiated (`tls.ConnectionState.CurveID`), over all runs: Go's client offers X25519MLKEM768 first, and the engine at its default takes it.\n\n", r.conns, r.duration, r.repeats)
	fmt.Fprintf(&b, "| certificate | handshakes/s (median) | range | server CPU µs/handshake (median) | key exchange |\n|---|---:|---:|---:|---|\n")
	for i := range r.names {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f–%.0f | %.0f | %s |\n", r.names[i], stats.Median(r.rates[i]), stats.Min(r.rates[i]), stats.Max(r.rates[i]), stats.Median(r.cpus[i]), bench.KeyExchangeCounts(r.kx[i]))
	}
	fmt.Fprintf(&b, "\nRatio ACME/files: %.3f handshakes/s, %.3f CPU per handshake.\n\n", stats.Median(r.rates[0])/stats.Median(r.rates[1]), stats.Median(r.cpus[0])/stats.Median(r.cpus[1]))
	fmt.Fprintf(&b, "Not measured here: kernel TLS (this page's machine may lack it; the handshake is the same either way, promotion comes after it), a CA across a network, renewal under load (renewal swaps the certificate in the cache; `TestACMEHTTP01Renewal` checks that a connection made before it goes on), and HTTP/3 handshakes.\n")
	return b.String()
}
