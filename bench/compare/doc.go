// Command compare runs the same integrity-gated benchmark matrix against
// this engine, nginx and Caddy on loopback, interleaved and repeated, and
// writes docs/BENCHMARKS.md with the table and the ratios.
//
//	go run ./bench/compare [--quick] [--repeats 3] [--servers engine,nginx,caddy] [--rows REGEXP] [--caddy PATH] [--out FILE]
//
// It needs nothing outside the checkout but nginx: it generates the
// fixtures (a 99,943,778-byte file, 1 MiB, 1 KiB and their B3SUMS), one
// self-signed certificate, and configurations for the peers from the
// templates in peers/ (embedded in the binary), on ports free at the
// time. nginx comes from Debian (apt-get install nginx); Caddy v2.11.9 is
// built once from the Go module proxy into the user's cache directory
// unless --caddy or $CADDY names a binary. A server that is missing is
// left out of the table, and a cell a server cannot do (a protocol it
// does not speak) says so. The page records, for every cell, how many
// repeats had accepted samples and why the others had none; the kernel,
// whether kernel TLS was active, and the commit measured.
//
// Invariant: every server is measured by the same bench client, with the
// same fixtures, in the same run, servers taking turns within each row
// and each repeat; so a ratio compares like with like, and a figure is
// one bench accepted (verified bytes only), never a guess for a cell
// that failed.
package main
