package engine

import (
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mediaship/engine/engine/passthrough"
	"github.com/mediaship/engine/h2"
	"github.com/prometheus/client_golang/prometheus"
)

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := s.counters()
	st.DigestsKnown, st.CacheEntries = s.digests.Cache().Len(), s.cache.Len()
	return st
}

// counters is Stats without the two cache sizes, which are read under
// the caches' locks (a reactor takes the digest cache's when it asks for
// a digest): what /metrics reads at every scrape, atomics only.
func (s *Server) counters() Stats {
	t := s.tlsTotals()
	st := Stats{
		Stats:              s.group.Stats(),
		TLSHandshakes:      t.Handshakes,
		TLSHandshakeErrors: t.HandshakeErrors,
		TLSRecordErrors:    t.RecordErrors,
		TLSAlertsReceived:  t.AlertsReceived,
		TLSKeyUpdates:      t.KeyUpdates,
		TLSUserBytes:       t.UserBytes,
		TLSUserBatches:     t.UserBatches,
		TLSKernelBytes:     t.KernelBytes,
		Promotions:         t.Promotions,
		PromoteFailures:    t.PromoteFailures,
		H2Events:           s.h2Events(),

		FilesHashed:        s.digests.Files.Load(),
		HashesJoined:       s.digests.Joined.Load(),
		BytesHashed:        s.digests.Bytes.Load(),
		HashTime:           time.Duration(s.digests.Nanos.Load()),
		ManifestMismatches: s.digests.Mismatches.Load(),
		DigestCacheHits:    s.digests.Cache().Hits.Load(),
		DigestCacheMisses:  s.digests.Cache().Misses.Load(),
		DigestBacklog:      int64(s.digests.Backlog()),
		CacheHits:          s.cache.Hits.Load(),
		CacheMisses:        s.cache.Misses.Load(),
	}
	loadCounters(&st, &s.stats)
	if e := s.sites.edge; e != nil {
		st.EdgeObjects, st.EdgeBytes, st.EdgeEvictions = int64(e.Len()), e.Size(), e.Evictions.Load()
	}
	if p := s.proxy; p != nil {
		loadCounters(&st, &p.Stats)
		st.ProxyH2Buffered = p.H2Buffered.Load()
	}
	if s.alog != nil {
		st.AccessLogLines, st.AccessLogDropped = s.alog.Written.Load(), s.alog.Dropped.Load()
	}
	if p := s.pass; p != nil {
		loadCounters(&st, &p.Stats)
		st.PassFailures, st.QUICPassFailures = map[string]int64{}, map[string]int64{}
		for i := range p.Stats.Failures {
			if n := p.Stats.Failures[i].Load(); n > 0 {
				st.PassFailures[passthrough.ReasonNames[i]] = n
			}
			if n := p.Stats.QUICFailures[i].Load(); n > 0 {
				st.QUICPassFailures[passthrough.ReasonNames[i]] = n
			}
		}
	}
	s.h3Stats(&st)
	return st
}

func (s *Server) h3Stats(st *Stats) {
	if s.h3 == nil {
		return
	}
	h := s.h3.Stats()
	st.H3Connections, st.H3Active, st.H3Refused, st.H3ConnErrors = h.Connections, h.Active, h.Refused, h.ConnErrors
	st.H3RefusedAddress, st.H3ReclaimedIdle, st.H3ReclaimedSlow, st.H3Retries = h.RefusedAddress, h.ReclaimedIdle, h.ReclaimedSlow, h.Retries
	st.H3ReclaimedShare = h.ReclaimedShare
}

func (s *Server) h2Events() map[string]int64 {
	m := map[string]int64{}
	for i := range s.stats.h2Events {
		if n := s.stats.h2Events[i].Load(); n > 0 {
			m[h2.Event(i).String()] = n
		}
	}
	return m
}

// loadCounters copies each atomic.Int64 field of the struct src points to
// into the int64 field of st with the same name: the data path's atomics
// are named as the Stats fields they fill, so a counter is declared once
// in each (its atomic, its Stats field) and copied by neither hand nor
// list. A field of src without a twin in Stats is left (a labelled
// family's parts).
func loadCounters(st *Stats, src any) {
	dst := reflect.ValueOf(st).Elem()
	v := reflect.ValueOf(src).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() || f.Type != reflect.TypeFor[atomic.Int64]() {
			continue
		}
		if d := dst.FieldByName(f.Name); d.IsValid() && d.Kind() == reflect.Int64 {
			d.SetInt(v.Field(i).Addr().Interface().(*atomic.Int64).Load())
		}
	}
}

// statMetrics are the metrics declared by Stats' tags (see Stats), for a
// server with proxy routes (proxy), passthrough routes (pass) and cached
// routes (cache) or not.
func statMetrics(proxy, pass, cache bool) []simpleMetric {
	var out []simpleMetric
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			idx := append(index[:len(index):len(index)], i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type, idx)
				continue
			}
			tag, ok := f.Tag.Lookup("metric")
			if !ok {
				continue
			}
			switch f.Tag.Get("when") {
			case "proxy":
				if !proxy {
					continue
				}
			case "pass":
				if !pass {
					continue
				}
			case "cache":
				if !cache {
					continue
				}
			}
			name, kind := tag, prometheus.CounterValue
			if n, ok := strings.CutSuffix(tag, ",gauge"); ok {
				name, kind = n, prometheus.GaugeValue
			}
			value := func(s *snapshot) float64 {
				v := reflect.ValueOf(&s.Stats).Elem().FieldByIndex(idx)
				if d, ok := v.Interface().(time.Duration); ok {
					return d.Seconds()
				}
				return float64(v.Int())
			}
			out = append(out, simpleMetric{prometheus.NewDesc("engine_"+name, f.Tag.Get("help"), nil, nil), kind, value})
		}
	}
	walk(reflect.TypeFor[Stats](), nil)
	return out
}

// atomicMetrics are the counters a struct of atomics declares by its
// fields' metric and help tags (as Stats does), read live at each scrape.
func atomicMetrics(src any) []simpleMetric {
	var out []simpleMetric
	v := reflect.ValueOf(src).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, ok := f.Tag.Lookup("metric")
		if !ok || f.Type != reflect.TypeFor[atomic.Int64]() {
			continue
		}
		a := v.Field(i).Addr().Interface().(*atomic.Int64)
		out = append(out, simpleMetric{prometheus.NewDesc("engine_"+name, f.Tag.Get("help"), nil, nil), prometheus.CounterValue,
			func(*snapshot) float64 { return float64(a.Load()) }})
	}
	return out
}
