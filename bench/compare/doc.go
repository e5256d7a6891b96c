// Command compare runs the same integrity-gated benchmark matrix against
// this engine, nginx and Caddy (and, on request, Go net/http and
// lighttpd) on loopback, interleaved and repeated, and writes
// docs/BENCHMARKS.md with the table and the ratios.
//
//	go run ./bench/compare [--quick] [--repeats 3] [--servers engine,nginx,caddy] [--rows REGEXP] [--workloads IDS] [--caddy PATH] [--key-exchange X25519] [--out FILE]
//
// Two clients can measure. --client bench (the default) is engine bench,
// in this process, over the full matrix. Its own CPU time over each cell's
// samples (getrusage of this process) gives the client's cost per GiB or
// per request, and its ceiling for that cell: the CPUs its goroutines
// could use over that cost; a figure within 10% of its ceiling (the client
// at least 90% busy) is marked as possibly client-bound, and the page has
// the client's table beside the servers'. --client external runs eight
// rows with programs from Debian instead (each figure measured by a
// program other than this harness), and puts the
// server's CPU in every cell ("726.1 [0.821]": seconds per GiB on the
// large-file rows, microseconds per request on the 1 KiB rows), and
// after the main table its syscalls (counted by an eBPF program on the
// sys_enter raw tracepoint, when this runs as root) and wake-ups (its
// threads' voluntary context switches) per MiB or per request, over
// its whole process tree (serveruse.go); the proxy and passthrough pages
// have both too. It writes docs/BENCHMARKS-external.md and compares
// engine, nginx, caddy, gohttp and lighttpd unless told otherwise:
//
//	go run ./bench/compare --client external --repeats 5 --max-others 0.05
//
// Its clients, and what each can check:
//
//   - curl (one connection, h1 TLS, h2 TLS, h1 plain): a cell's first
//     transfer is piped into this harness and every byte BLAKE3-hashed
//     against the fixture (a failure fails the cell); the samples after
//     it write to /dev/null, so that the client is curl alone, and are
//     checked for status, HTTP version, Content-Length and byte count;
//   - wrk (16 connections h1 TLS; 1 KiB on 64 keep-alive connections,
//     with p99) and h2load (16 clients, one h2 stream each, -n exact):
//     status and length only, which the page says;
//   - openssl s_time (a new TLS connection per request, 16 processes):
//     -reuse, where every connection must be marked resumed, and -new,
//     where none may be; status and length from a probe request.
//
// What each row's client checked is written under the table. A client
// or lighttpd that is missing is installed with apt-get when this runs
// as root (the page says so), and otherwise left out with the command
// that would install it. gohttp is bench/compare/gohttp, built by the
// harness: http.FileServer with net/http's defaults.
//
// --client proxy measures each server as a TLS-terminating reverse proxy
// in front of one nginx file server (peers/nginx-backend.conf.tmpl):
// the engine with a `[reverse_proxy]` route, nginx (`upstream` with
// `keepalive 64`), Caddy (`reverse_proxy`) and HAProxy (Debian's, `mode
// http`, `http-reuse always`; installed with apt-get as above). Its rows:
// a large file over one h1 TLS connection (curl, its first transfer
// hashed), 1 KiB on 64 keep-alive connections (wrk), and 1 KiB at a
// fixed 5,000 req/s
// (engine bench, open loop: p50, p99 and failed responses); the CPU in
// brackets is the proxy's, and a table counts the connections each proxy
// opened to the backend (nginx's stub_status, read around every run). It
// writes docs/BENCHMARKS-proxy.md:
//
//	go run ./bench/compare --client proxy --repeats 3
//
// To show that a change to the engine kept its speed, --baseline PATH runs
// an older engine binary beside it as "engine (baseline)", with the same
// configuration, files and process attributes, taking turns with it in
// every repeat; --engine PATH measures a given binary instead of building
// the working tree. The page then has a section with, per workload, both
// medians, the ratio engine/baseline and the repeats each stands on; a
// ratio below --min-ratio (0.97) is marked and makes the run exit 1:
//
//	go run ./bench/compare --baseline OLD --engine NEW --servers engine,baseline \
//	    --workloads large-h1-tls,large-h2-tls,large-h1,1k-h1-64c --large-size 100MB --repeats 5
//
// Without --out, such a run writes docs/BENCHMARKS-baseline.md, not the
// comparison with the peers. --max-others keeps runs on a shared machine
// from being measured while other processes use the CPU. -h lists the
// workloads' ids.
//
// The engine is built from the working tree by bench.BuildEngine, which
// reads HEAD and the uncommitted changes (tracked and untracked files,
// not ignored ones) at the moment of the build and stamps them into the
// binary (engine version prints them); the page names them, says when the
// tree changed before the run ended, and for an --engine or --baseline
// binary names the commit its stamp gives, or says it is unknown.
// --build PATH only builds such a stamped binary, for --engine and
// --baseline:
//
//	go run ./bench/compare --build /tmp/engine-new
//
// Rows of new TLS connections name the key exchange each server
// negotiated: engine bench counts its responses by
// tls.ConnectionState.CurveID, and beside openssl s_time one openssl
// s_client with s_time's settings is read. Go servers choose
// X25519MLKEM768 with Go's client, OpenSSL 3.0 servers X25519:
// --key-exchange X25519 makes engine bench offer, and the engine accept
// (key_exchanges), only that one, so the handshakes compare like with
// like.
//
// It needs nothing outside the checkout but nginx: it generates the
// fixtures (a 99,943,778-byte file by default, --large-size; 1 MiB, 1 KiB
// and their B3SUMS), one
// self-signed certificate, and configurations for the peers from the
// templates in peers/ (embedded in the binary), on ports free at the
// time. nginx comes from Debian (apt-get install nginx); Caddy v2.11.9 is
// built once from the Go module proxy into the user's cache directory
// unless --caddy or $CADDY names a binary. A server that is missing is
// left out of the table, and a cell a server cannot do (a protocol it
// does not speak) says so; one that exits during the run is reported with
// the end of its log. The page records, for every cell, how many
// repeats had accepted samples and why the others had none; the CPU model
// and count, the kernel, the Go version, whether kernel TLS was active,
// each peer's version and configuration, and the commit measured.
//
// Each --client value is a scenario (scenario.go): its rows, the
// configuration each server runs in and what the servers stand in front
// of, one per file (bench.go, external.go, proxy.go, passthrough.go).
// run.go measures every scenario the same way, and the page says what
// was measured by the scenario's name.
//
// Invariant: on each row every server is measured by the same client,
// with the same fixtures, in the same run, servers taking turns within
// each row and each repeat; so a ratio compares like with like, and a
// figure is one that client's checks accepted, never a guess for a cell
// that failed.
package main
