package engine

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the server's counters to Prometheus at each scrape.
// The data path keeps its own atomics (most of them per loop) and never
// calls into the Prometheus library; a scrape reads them and builds
// constant metrics.
type collector struct {
	s *Server

	requests, ttfb, duration, bytes, handshakes, open, socketErrors *prometheus.Desc
	integrity, h2Events, h3ConnErrors, passFailures                 *prometheus.Desc
	wtCloses                                                        *prometheus.Desc
	simple                                                          []simpleMetric
}

// simpleMetric is one unlabelled counter or gauge read from a snapshot.
type simpleMetric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*snapshot) float64
}

// snapshot is what one scrape reads.
type snapshot struct {
	Stats
	t                                       tlsTotals
	h3Bytes                                 int64
	logWritten, logDrops                    int64
	digestHits, digestMisses, digestBacklog int64
	redirect                                *Stats // the [redirect_http] listener's reactor counters; nil without it
}

func newCollector(s *Server) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("engine_"+name, help, labels, nil)
	}
	c := &collector{s: s,
		requests:     d("requests_total", "Responses sent, by protocol (h1, h2, h3), status class and site (the configured domain; \"-\" for none, such as malformed requests and redirects; \"proxy\" for the reverse proxy).", "protocol", "status", "site"),
		ttfb:         d("ttfb_seconds", "Time from a request's head parsed to its response head queued on the socket.", "protocol"),
		duration:     d("response_duration_seconds", "Time from a request's head parsed to the last byte of its response handed to the kernel (or the response cut short).", "protocol"),
		bytes:        d("response_bytes_total", "Response bytes (heads and bodies, before encryption) by the path that carried them: plain_sendfile (plain TCP: sendfile and writes), userspace_tls (sealed by the engine's record layer), kernel_tls_sendfile (sealed by kernel TLS), quic (HTTP/3 bodies).", "transport"),
		handshakes:   d("tls_handshakes_total", "TLS handshakes over TCP: full, resumed, failed (including connections that were not TLS at all).", "result"),
		open:         d("open_connections", "TCP connections open now, per reactor loop.", "listener", "reactor"),
		socketErrors: d("socket_errors_total", "TCP connections ended by an error: timeout (a deadline), aborted (reset by the engine: a file shrank, a proxied exchange failed), write_error (the peer went away), accept_error (accept failed, out of descriptors), rejected (over max_connections).", "kind"),
		integrity:    d("integrity_mismatches_total", "Files whose bytes contradicted what the engine knew of them: manifest (a B3SUMS manifest), short_body (a file shrank while an HTTP/2 response was sending it).", "kind"),
		h2Events:     d("h2_events_total", "HTTP/2 limits hit and protocol errors, by kind.", "event"),
		h3ConnErrors: d("h3_connection_errors_total", "HTTP/3 connections closed with an error, by side and code.", "side_code"),
		passFailures: d("passthrough_failures_total", "Connections TLS passthrough did not relay, by protocol (tcp, quic) and reason.", "protocol", "reason"),
		wtCloses:     d("webtransport_session_ends_total", "WebTransport sessions ended: by the client (its capsule or FIN), gone (CONNECT stream reset, connection closed), or by the server with its close code (docs/WEBTRANSPORT.md).", "by", "code"),
	}
	counter := func(name, help string, f func(*snapshot) int64) {
		c.simple = append(c.simple, simpleMetric{d(name, help), prometheus.CounterValue, func(s *snapshot) float64 { return float64(f(s)) }})
	}
	gauge := func(name, help string, f func(*snapshot) int64) {
		c.simple = append(c.simple, simpleMetric{d(name, help), prometheus.GaugeValue, func(s *snapshot) float64 { return float64(f(s)) }})
	}
	c.simple = append(c.simple,
		simpleMetric{prometheus.NewDesc("process_cpu_seconds_total", "User and system CPU time spent, in seconds.", nil, nil), prometheus.CounterValue,
			func(*snapshot) float64 { return processCPU() }},
		simpleMetric{prometheus.NewDesc("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.", nil, nil), prometheus.GaugeValue,
			func(*snapshot) float64 { return float64(processStart.UnixNano()) / 1e9 }})
	counter("connections_accepted_total", "TCP connections accepted.", func(s *snapshot) int64 { return s.Accepted })
	counter("connections_reclaimed_total", "Idle connections closed to admit new ones at max_connections.", func(s *snapshot) int64 { return s.Reclaimed })
	counter("socket_full_total", "Times a socket refused more output (EAGAIN): the client or the path is slower than the disk.", func(s *snapshot) int64 { return s.SocketFull })
	counter("ktls_promotions_total", "Connections whose transmission moved to kernel TLS.", func(s *snapshot) int64 { return s.t.Promotions })
	counter("ktls_promotion_failures_total", "Promotions to kernel TLS that failed (the connection went on in userspace).", func(s *snapshot) int64 { return s.t.PromoteFailures })
	counter("tls_record_errors_total", "TLS connections closed for a bad record or an unexpected message.", func(s *snapshot) int64 { return s.t.RecordErrors })
	counter("tls_alerts_received_total", "Fatal TLS alerts received from clients.", func(s *snapshot) int64 { return s.t.AlertsReceived })
	counter("bulk_responses_total", "Responses that took the bulk path (congestion control switched to bulk_congestion).", func(s *snapshot) int64 { return s.Bulk })
	counter("bulk_congestion_errors_total", "Bulk responses whose congestion control could not be set.", func(s *snapshot) int64 { return s.CongestionErrors })
	counter("open_file_cache_hits_total", "Requests answered from the open-file cache.", func(s *snapshot) int64 { return s.CacheHits })
	counter("open_file_cache_misses_total", "Requests that opened a file on a worker.", func(s *snapshot) int64 { return s.CacheMisses })
	counter("digest_cache_hits_total", "BLAKE3 digests found in the digest cache when a file was opened.", func(s *snapshot) int64 { return s.digestHits })
	counter("digest_cache_misses_total", "Files opened whose digest the cache did not know.", func(s *snapshot) int64 { return s.digestMisses })
	gauge("digest_backlog", "Files waiting for a hashing worker.", func(s *snapshot) int64 { return s.digestBacklog })
	counter("digests_computed_total", "BLAKE3 digests computed.", func(s *snapshot) int64 { return s.FilesHashed })
	counter("digest_bytes_total", "Bytes hashed.", func(s *snapshot) int64 { return s.BytesHashed })
	c.simple = append(c.simple, simpleMetric{d("digest_seconds_total", "Time the hashing workers spent."), prometheus.CounterValue,
		func(s *snapshot) float64 { return s.HashTime.Seconds() }})
	counter("h2_connections_total", "HTTP/2 connections.", func(s *snapshot) int64 { return s.H2Connections })
	counter("h2_streams_total", "HTTP/2 responses.", func(s *snapshot) int64 { return s.H2Streams })
	counter("h2_resets_total", "HTTP/2 streams reset before their response was out.", func(s *snapshot) int64 { return s.H2Resets })
	counter("h3_connections_total", "HTTP/3 connections accepted.", func(s *snapshot) int64 { return s.H3Connections })
	gauge("h3_open_connections", "HTTP/3 connections open now.", func(s *snapshot) int64 { return s.H3Active })
	counter("h3_refused_total", "HTTP/3 connection attempts refused at max_connections.", func(s *snapshot) int64 { return s.H3Refused })
	counter("h3_streams_total", "HTTP/3 responses.", func(s *snapshot) int64 { return s.H3Streams })
	counter("h3_resets_total", "HTTP/3 responses the client reset or abandoned.", func(s *snapshot) int64 { return s.H3Resets })
	counter("h3_stalled_total", "HTTP/3 responses reset after send_timeout without progress.", func(s *snapshot) int64 { return s.H3Stalled })
	counter("redirects_total", "308s to https:// from [redirect_http].", func(s *snapshot) int64 { return s.Redirects })
	counter("acme_challenges_total", "ACME validations answered.", func(s *snapshot) int64 { return s.ACMEChallenges })
	counter("access_log_lines_total", "Access log lines written.", func(s *snapshot) int64 { return s.logWritten })
	counter("access_log_dropped_lines_total", "Access log lines dropped: the disk fell behind by access_log_buffer, or a write failed.", func(s *snapshot) int64 { return s.logDrops })
	if s.proxy != nil {
		counter("upstream_connections_opened_total", "Connections opened to upstreams.", func(s *snapshot) int64 { return s.ProxyOpened })
		counter("upstream_connections_reused_total", "Proxied requests sent on a pooled connection.", func(s *snapshot) int64 { return s.ProxyReused })
		counter("upstream_connect_failures_total", "Upstream connections that failed (refused, connect timeout).", func(s *snapshot) int64 { return s.ProxyFailed })
		counter("upstream_retries_total", "Idempotent requests sent again after a pooled connection closed under them.", func(s *snapshot) int64 { return s.ProxyRetried })
		counter("upstream_timeouts_total", "Upstream response or send timeouts (504).", func(s *snapshot) int64 { return s.ProxyTimeouts })
		counter("upstream_bad_responses_total", "Upstream responses that could not be relayed (502, or a reset mid-body).", func(s *snapshot) int64 { return s.ProxyBadResponses })
		counter("upstream_drained_total", "Upstream responses read and dropped after their client left, to keep the connection.", func(s *snapshot) int64 { return s.ProxyDrained })
		counter("upstream_unsolicited_total", "Upstream connections closed, not reused, for bytes no request asked for (an upstream answering twice).", func(s *snapshot) int64 { return s.ProxyUnsolicited })
		counter("upstream_queued_total", "Proxied requests that waited for a connection (max_conns).", func(s *snapshot) int64 { return s.ProxyQueued })
		gauge("upstream_h2_buffered_bytes", "Proxied response bytes HTTP/2 streams hold ahead of their clients.", func(s *snapshot) int64 { return s.ProxyH2Buffered })
	}
	if w := s.wt; w != nil {
		st := w.Stats()
		counter("webtransport_sessions_total", "WebTransport sessions opened.", func(*snapshot) int64 { return st.Sessions.Load() })
		counter("webtransport_sessions_refused_total", "WebTransport sessions refused at max_sessions or during a stop (503).", func(*snapshot) int64 { return st.Refused.Load() })
		gauge("webtransport_sessions_open", "WebTransport sessions open now.", func(*snapshot) int64 { return w.Open() })
		counter("webtransport_streams_total", "Client streams bound to a WebTransport session.", func(*snapshot) int64 { return st.Streams.Load() })
		counter("webtransport_streams_orphaned_total", "Client streams refused because their session was not found (WT_BUFFERED_STREAM_REJECTED).", func(*snapshot) int64 { return st.StreamsOrphan.Load() })
		counter("webtransport_datagrams_received_total", "WebTransport datagrams received.", func(*snapshot) int64 { return st.DatagramsIn.Load() })
		counter("webtransport_datagrams_sent_total", "WebTransport datagrams sent.", func(*snapshot) int64 { return st.DatagramsOut.Load() })
		counter("webtransport_bytes_received_total", "WebTransport payload bytes received (streams, datagrams, capsules).", func(*snapshot) int64 { return st.BytesIn.Load() })
		counter("webtransport_bytes_sent_total", "WebTransport payload bytes sent (streams, datagrams).", func(*snapshot) int64 { return st.BytesOut.Load() })
	}
	if s.pass != nil {
		counter("passthrough_relayed_total", "TCP connections relayed by TLS passthrough.", func(s *snapshot) int64 { return s.PassRelayed })
		gauge("passthrough_open", "TCP passthrough relays open now.", func(s *snapshot) int64 { return s.PassActive })
		counter("passthrough_bytes_up_total", "Bytes relayed from clients to upstreams (closed relays).", func(s *snapshot) int64 { return s.PassBytesUp })
		counter("passthrough_bytes_down_total", "Bytes relayed from upstreams to clients (closed relays).", func(s *snapshot) int64 { return s.PassBytesDown })
		counter("quic_passthrough_relayed_total", "QUIC flows relayed.", func(s *snapshot) int64 { return s.QUICPassRelayed })
		gauge("quic_passthrough_open", "QUIC flows relayed now.", func(s *snapshot) int64 { return s.QUICPassActive })
		counter("quic_passthrough_unconfirmed_total", "QUIC flows closed because their client never answered the upstream (header_timeout) or never finished its handshake (15 s), or for a new flow at max_connections.", func(s *snapshot) int64 { return s.QUICPassUnconfirmed })
		counter("quic_passthrough_one_sided_total", "QUIC flows closed because their upstream had said nothing for a while as their client kept sending.", func(s *snapshot) int64 { return s.QUICPassOneSided })
	}
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.ttfb, c.duration, c.bytes, c.handshakes, c.open, c.socketErrors,
		c.integrity, c.h2Events, c.h3ConnErrors, c.passFailures, c.wtCloses} {
		ch <- d
	}
	for _, m := range c.simple {
		ch <- m.desc
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	snap := &snapshot{Stats: s.counters(), h3Bytes: s.stats.h3Bytes.Load()}
	snap.t = s.tlsTotals()
	if s.alog != nil {
		snap.logWritten, snap.logDrops = s.alog.Written.Load(), s.alog.Dropped.Load()
	}
	snap.digestHits, snap.digestMisses = s.digests.Cache().Hits.Load(), s.digests.Cache().Misses.Load()
	snap.digestBacklog = int64(s.digests.Backlog())
	for _, m := range c.simple {
		if v := m.value(snap); !math.IsNaN(v) {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, v)
		}
	}

	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.bytes, snap.t.PlainBytes, "plain_sendfile")
	counter(c.bytes, snap.t.UserBytes, "userspace_tls")
	counter(c.bytes, snap.t.KernelBytes, "kernel_tls_sendfile")
	counter(c.bytes, snap.h3Bytes, "quic")
	counter(c.handshakes, snap.t.Handshakes-snap.t.Resumed, "full")
	counter(c.handshakes, snap.t.Resumed, "resumed")
	counter(c.handshakes, snap.t.HandshakeErrors, "failed")
	counter(c.integrity, snap.ManifestMismatches, "manifest")
	counter(c.integrity, snap.H2BodyFailures, "short_body")

	socket := snap.Stats.Stats
	open := func(listener string, st []int64) {
		for i, n := range st {
			ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(n), listener, strconv.Itoa(i))
		}
	}
	open("main", socket.PerLoopOpen)
	if s.redir != nil {
		r := s.redir.Stats()
		open("redirect_http", r.PerLoopOpen)
		socket.Timeouts += r.Timeouts
		socket.Aborted += r.Aborted
		socket.WriteError += r.WriteError
		socket.AcceptErr += r.AcceptErr
		socket.Rejected += r.Rejected
	}
	counter(c.socketErrors, socket.Timeouts, "timeout")
	counter(c.socketErrors, socket.Aborted, "aborted")
	counter(c.socketErrors, socket.WriteError, "write_error")
	counter(c.socketErrors, socket.AcceptErr, "accept_error")
	counter(c.socketErrors, socket.Rejected, "rejected")
	for k, v := range snap.H2Events {
		counter(c.h2Events, v, k)
	}
	for k, v := range snap.H3ConnErrors {
		counter(c.h3ConnErrors, v, k)
	}
	for k, v := range snap.PassFailures {
		counter(c.passFailures, v, "tcp", k)
	}
	for k, v := range snap.QUICPassFailures {
		counter(c.passFailures, v, "quic", k)
	}

	if w := s.wt; w != nil {
		st := w.Stats()
		counter(c.wtCloses, st.ClosedByClient.Load(), "client", "")
		counter(c.wtCloses, st.ClosedAbruptly.Load(), "gone", "")
		for i := range st.ClosedByCode {
			code := "0x0"
			if i > 0 {
				code = "0x" + strconv.FormatUint(uint64(0x100+i-1), 16)
			}
			counter(c.wtCloses, st.ClosedByCode[i].Load(), "server", code)
		}
	}
	c.collectResponses(ch)
}

// collectResponses sums the loops' and HTTP/3's response counters and
// histograms.
func (c *collector) collectResponses(ch chan<- prometheus.Metric) {
	s := c.s
	all := s.allLoopMetrics()
	if s.h3Metrics != nil {
		all = append(all[:len(all):len(all)], s.h3Metrics)
	}
	names := make([]string, 0, len(s.sites.all)+2)
	for _, st := range s.sites.all {
		names = append(names, st.label())
	}
	names = append(names, "-", "proxy")
	reqs := make([]int64, len(names)*nProtos*5)
	var ttfb, dur [nProtos]histTotal
	for _, m := range all {
		for i := range reqs {
			reqs[i] += m.requests[i].Load()
		}
		for p := range nProtos {
			m.ttfb[p].addTo(&ttfb[p])
			m.dur[p].addTo(&dur[p])
		}
	}
	for i, n := range reqs {
		if n == 0 {
			continue
		}
		site, rest := i/(nProtos*5), i%(nProtos*5)
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(n),
			protoNames[rest/5], statusClasses[rest%5], names[site])
	}
	hist := func(d *prometheus.Desc, t *histTotal, proto string) {
		buckets := make(map[float64]uint64, len(latencyBounds))
		for i, b := range latencyBounds {
			buckets[b] = t.buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(d, t.count, t.sum, buckets, proto)
	}
	for p := range nProtos {
		hist(c.ttfb, &ttfb[p], protoNames[p])
		hist(c.duration, &dur[p], protoNames[p])
	}
}
