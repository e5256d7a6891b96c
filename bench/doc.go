// Package bench is an integrity-gated HTTP load generator: every response
// body is counted and hashed as it streams, and a byte counts toward a
// sample only when the response it belongs to was verified in full (the
// right status, the exact length and the expected BLAKE3 digest). A sample
// is accepted only when every byte that arrived in it was verified and no
// response overlapping it failed (client, protocol or transport error
// included). Rejected samples are reported with their reasons and never
// enter a median.
//
// It speaks HTTP/1.1 (plain and TLS), HTTP/2 (TLS) and HTTP/3 and keeps
// its connections; over WebTransport a request is a session on the
// engine's diagnostics endpoint (webtransport.go), whose datagrams may be
// lost: loss is reported, a wrong datagram rejects. Each worker (a connection, or a stream of one) reads
// bodies into 256 KiB buffers and hands those of a long body to a hasher
// goroutine of its own, so that reading (and TLS decryption) and BLAKE3
// run on different cores and the server, not the client, is what is
// measured. The report says how busy the client was (ClientStats: this
// process's CPU over the samples, against the CPUs its goroutines could
// use): a figure the client was fully busy for is the client's, not the
// server's. SelfCheck runs the client against an in-process source, a
// reference rather than a ceiling: the source shares the process and,
// over TLS, its encryption competes with the client for the CPUs.
//
// For h1 and h2 on Linux it also reads TCP_INFO on its own sockets once
// per sample (tcpinfo.go): RTT, retransmits and out-of-order packets
// beside each sample's throughput. It does not read the server's.
//
// Invariant: a figure in a Report comes only from accepted samples, and an
// accepted sample holds only verified bytes.
package bench
