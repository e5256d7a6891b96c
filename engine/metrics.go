package engine

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/transport"
)

// The protocols responses are counted by (the metrics' protocol label).
const (
	protoH1 = iota
	protoH2
	protoH3
	nProtos
)

var protoNames = [nProtos]string{"h1", "h2", "h3"}

// statusClasses are the status label's values: 1xx to 5xx.
var statusClasses = [5]string{"1xx", "2xx", "3xx", "4xx", "5xx"}

func statusClass(status int) int { return min(max(status/100, 1), 5) - 1 }

// latencyBounds are the upper bounds, in seconds, of the time to first
// byte and response duration histograms' buckets: from half a
// millisecond (a cached file on loopback) to five minutes (a large file
// over a slow path); longer ones count in +Inf only.
var latencyBounds = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

var latencyBoundsNs = func() (ns [len(latencyBounds)]int64) {
	for i, b := range latencyBounds {
		ns[i] = int64(math.Round(b * 1e9))
	}
	return ns
}()

// histogram is a Prometheus histogram kept in atomics: observed by one
// writer (mostly), read by the scraper without a lock.
type histogram struct {
	counts [len(latencyBoundsNs) + 1]atomic.Int64 // per bucket, not cumulative; the last is +Inf
	sumNs  atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	ns := max(int64(d), 0)
	i := 0
	for i < len(latencyBoundsNs) && ns > latencyBoundsNs[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(ns)
}

// addTo adds h's buckets (cumulative, by upper bound) and sum to the
// totals of a scrape.
func (h *histogram) addTo(t *histTotal) {
	var cum uint64
	for i := range latencyBoundsNs {
		cum += uint64(h.counts[i].Load())
		t.buckets[i] += cum
	}
	cum += uint64(h.counts[len(latencyBoundsNs)].Load())
	t.count += cum
	t.sum += float64(h.sumNs.Load()) / 1e9
}

type histTotal struct {
	buckets [len(latencyBoundsNs)]uint64
	count   uint64
	sum     float64
}

// respMetrics is one writer's tally of responses: a reactor loop's (its
// HTTP/1.1 and HTTP/2 connections) or HTTP/3's. A loop's counters are
// written only by it, so they cost no contended cache line; the scraper
// sums them.
type respMetrics struct {
	// requests counts responses by [site][protocol][status class]; site
	// indexes are the siteTable's, then one for no site, then one for
	// the reverse proxy.
	requests  []atomic.Int64
	ttfb, dur [nProtos]histogram
	// tls is the loop's transport counters (TLS and bytes by transport).
	tls transport.Stats
}

func newRespMetrics(sites int) *respMetrics {
	return &respMetrics{requests: make([]atomic.Int64, (sites+2)*nProtos*5)}
}

// count records one response: site is the site's index (siteTable
// order), sites+0 for none, sites+1 for the reverse proxy.
func (m *respMetrics) Count(site, proto, status int, ttfb, dur time.Duration) {
	m.requests[(site*nProtos+proto)*5+statusClass(status)].Add(1)
	m.ttfb[proto].observe(ttfb)
	m.dur[proto].observe(dur)
}

// tlsTotals sums the loops' transport counters.
type tlsTotals struct {
	Handshakes, Resumed, HandshakeErrors, RecordErrors, AlertsReceived, KeyUpdates int64
	PlainBytes, UserBytes, UserBatches, KernelBytes, Promotions, PromoteFailures   int64
}

func (s *Server) tlsTotals() (t tlsTotals) {
	for _, m := range s.allLoopMetrics() {
		c := &m.tls
		t.Handshakes += c.Handshakes.Load()
		t.Resumed += c.Resumed.Load()
		t.HandshakeErrors += c.HandshakeErrors.Load()
		t.RecordErrors += c.RecordErrors.Load()
		t.AlertsReceived += c.AlertsReceived.Load()
		t.KeyUpdates += c.KeyUpdates.Load()
		t.PlainBytes += c.PlainBytes.Load()
		t.UserBytes += c.UserBytes.Load()
		t.UserBatches += c.UserBatches.Load()
		t.KernelBytes += c.KernelBytes.Load()
		t.Promotions += c.Promotions.Load()
		t.PromoteFailures += c.PromoteFailures.Load()
	}
	return t
}

// allLoopMetrics returns every loop's response metrics (complete once New
// has made the reactor groups).
func (s *Server) allLoopMetrics() []*respMetrics {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	return s.loopMetrics
}

// siteNone and siteProxy are the metrics' site indexes past the sites:
// responses no site made (malformed requests, redirects) and the reverse
// proxy's.
func (s *Server) siteNone() int  { return len(s.sites.all) }
func (s *Server) siteProxy() int { return len(s.sites.all) + 1 }

// processStart is when the process started (about: when this package was
// initialised).
var processStart = time.Now()
