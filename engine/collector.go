package engine

import (
	"math"
	"strconv"

	"github.com/mediaship/engine/engine/policy"
	"github.com/mediaship/engine/internal/buildinfo"
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
	wtCloses, build, refusals                                       *prometheus.Desc
	connRefused, connClosedForRoom                                  *prometheus.Desc
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
	t       tlsTotals
	h3Bytes int64
}

func newCollector(s *Server) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("engine_"+name, help, labels, nil)
	}
	c := &collector{s: s,
		requests:          d("requests_total", "Responses sent, by protocol (h1, h2, h3), status class and site (the configured domain; \"-\" for none, such as malformed requests and redirects; \"proxy\" for the reverse proxy).", "protocol", "status", "site"),
		ttfb:              d("ttfb_seconds", "Time from a request's head parsed to its response head queued on the socket.", "protocol"),
		duration:          d("response_duration_seconds", "Time from a request's head parsed to the last byte of its response handed to the kernel (or the response cut short).", "protocol"),
		bytes:             d("response_bytes_total", "Response bytes (heads and bodies, before encryption) by the path that carried them: plain_sendfile (plain TCP: sendfile and writes), userspace_tls (sealed by the engine's record layer), kernel_tls_sendfile (sealed by kernel TLS), quic (HTTP/3 bodies).", "transport"),
		handshakes:        d("tls_handshakes_total", "TLS handshakes over TCP: full, resumed, failed (including connections that were not TLS at all).", "result"),
		open:              d("open_connections", "TCP connections open now, per reactor loop.", "listener", "reactor"),
		socketErrors:      d("socket_errors_total", "TCP connections ended by an error: timeout (a deadline), aborted (reset by the engine: a file shrank, a proxied exchange failed), write_error (the peer went away), accept_error (accept failed, out of descriptors), rejected (over max_connections).", "kind"),
		integrity:         d("integrity_mismatches_total", "Files whose bytes contradicted what the engine knew of them: manifest (a B3SUMS manifest), short_body (a file shrank while an HTTP/2 response was sending it).", "kind"),
		h2Events:          d("h2_events_total", "HTTP/2 limits hit and protocol errors, by kind.", "event"),
		h3ConnErrors:      d("h3_connection_errors_total", "HTTP/3 connections closed with an error, by side and code.", "side_code"),
		passFailures:      d("passthrough_failures_total", "Connections TLS passthrough did not relay, by protocol (tcp, quic) and reason.", "protocol", "reason"),
		build:             d("build_info", "The build that serves: always 1, its labels the version, the VCS revision and working tree (\"\" when the build recorded none) and the Go version.", "version", "revision", "tree", "goversion"),
		refusals:          d("policy_refusals_total", "Requests a path's or route's policy refused, by site (as in requests_total) and reason: address (allow/deny), preflight (a CORS preflight not allowed), unsigned, signature (a bad, malformed or out-of-scope signature, or one for another address), expired, token (bearer), password (basic), forward (the auth endpoint said no or did not answer), secrets (none to check against), throttled (too many password checks waiting for the client), ambiguous (two Authorization fields).", "site", "reason"),
		connRefused:       d("connections_refused_total", "New client connections refused, by transport (tcp, quic) and reason: max_connections (every slot held, none idle or slow) or per_address (the client's address held max_connections_per_address).", "transport", "reason"),
		connClosedForRoom: d("connections_closed_for_room_total", "Connections closed to admit new ones at max_connections, by transport (tcp, quic) and reason: waiting (for its client: silent, a head under way, keep-alive), idle (a relay or an HTTP/3 connection with no request in progress), slow (a response in flight below min_send_rate), share (a response in flight of an address holding more connections than the newcomer's).", "transport", "reason"),
		wtCloses:          d("webtransport_session_ends_total", "WebTransport sessions ended: by the client (its capsule or FIN), gone (CONNECT stream reset, connection closed), or by the server with its close code (docs/WEBTRANSPORT.md).", "by", "code"),
	}
	c.simple = append(c.simple,
		simpleMetric{prometheus.NewDesc("process_cpu_seconds_total", "User and system CPU time spent, in seconds.", nil, nil), prometheus.CounterValue,
			func(*snapshot) float64 { return processCPU() }},
		simpleMetric{prometheus.NewDesc("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.", nil, nil), prometheus.GaugeValue,
			func(*snapshot) float64 { return float64(processStart.UnixNano()) / 1e9 }})
	// Every counter and gauge Stats declares (its metric tag).
	c.simple = append(c.simple, statMetrics(s.proxy != nil, s.pass != nil, s.sites.edge != nil)...)
	if w := s.wt; w != nil {
		c.simple = append(c.simple, atomicMetrics(w.Stats())...)
		c.simple = append(c.simple, simpleMetric{d("webtransport_sessions_open", "WebTransport sessions open now."), prometheus.GaugeValue,
			func(*snapshot) float64 { return float64(w.Open()) }})
	}
	return c
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connRefused, c.connClosedForRoom, c.requests, c.ttfb, c.duration, c.bytes, c.handshakes, c.open, c.socketErrors,
		c.integrity, c.h2Events, c.h3ConnErrors, c.passFailures, c.wtCloses, c.build, c.refusals} {
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
	for _, m := range c.simple {
		if v := m.value(snap); !math.IsNaN(v) {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, v)
		}
	}

	bi := buildinfo.Get()
	ch <- prometheus.MustNewConstMetric(c.build, prometheus.GaugeValue, 1, bi.Version, bi.Commit, bi.Tree, bi.GoVersion)

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
		socket.RefusedAddress += r.RefusedAddress
		socket.ReclaimedWaiting += r.ReclaimedWaiting
		socket.ReclaimedIdle += r.ReclaimedIdle
		socket.ReclaimedSlow += r.ReclaimedSlow
		socket.ReclaimedShare += r.ReclaimedShare
	}
	counter(c.socketErrors, socket.Timeouts, "timeout")
	counter(c.socketErrors, socket.Aborted, "aborted")
	counter(c.socketErrors, socket.WriteError, "write_error")
	counter(c.socketErrors, socket.AcceptErr, "accept_error")
	counter(c.socketErrors, socket.Rejected, "rejected")
	counter(c.connRefused, socket.Rejected, "tcp", "max_connections")
	counter(c.connRefused, socket.RefusedAddress, "tcp", "per_address")
	counter(c.connRefused, snap.H3Refused, "quic", "max_connections")
	counter(c.connRefused, snap.H3RefusedAddress, "quic", "per_address")
	counter(c.connClosedForRoom, socket.ReclaimedWaiting, "tcp", "waiting")
	counter(c.connClosedForRoom, socket.ReclaimedIdle, "tcp", "idle")
	counter(c.connClosedForRoom, socket.ReclaimedSlow, "tcp", "slow")
	counter(c.connClosedForRoom, socket.ReclaimedShare, "tcp", "share")
	counter(c.connClosedForRoom, snap.H3ReclaimedShare, "quic", "share")
	counter(c.connClosedForRoom, snap.H3ReclaimedIdle, "quic", "idle")
	counter(c.connClosedForRoom, snap.H3ReclaimedSlow, "quic", "slow")
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
	for i := range s.refusals {
		if n := s.refusals[i].Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(c.refusals, prometheus.CounterValue, float64(n),
				names[i/len(policy.Reasons)], policy.Reasons[i%len(policy.Reasons)])
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
