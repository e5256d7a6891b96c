package engine

import (
	"log/slog"

	"github.com/mediaship/engine/engine/proxy"

	"github.com/mediaship/engine/engine/accesslog"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reactor"
	"github.com/mediaship/engine/internal/loglimit"
)

// loopCtx is what one reactor loop's drivers (HTTP/1.1, HTTP/2), its
// proxy exchanges and its passthrough relays share: the loop, its log and
// log limiter, the clock and the Date header, scratch buffers, the access
// log buffer, the response metrics, and the upstream pool. Every driver
// holds it; no driver reaches through another.
//
// Invariant: one per loop (the [redirect_http] listener's loop has its
// own); the loop goroutine owns every mutable field, so none is locked.
type loopCtx struct {
	// Immutable after construction.
	srv     *Server
	loop    *reactor.Loop
	log     *slog.Logger
	metrics *respMetrics // the loop's responses, every protocol on it
	proxy   *proxy.Loop  // nil without reverse proxy routes

	limiter *loglimit.Limiter

	// Owned by the loop goroutine.
	hostBuf  []byte // the request's normalized host
	date     []byte
	dateSec  int64
	logBuf   []byte // access log lines not yet written
	logClock accesslog.Clock
	warnedCC bool // a congestion control or pacing failure was logged
}

// newLoopCtx makes loop l's context and registers it with s (its metrics;
// for HTTP/3 exchanges, its upstream pool). redirect: the [redirect_http]
// listener's loop.
func newLoopCtx(s *Server, l *reactor.Loop, redirect bool) *loopCtx {
	lc := &loopCtx{
		srv:     s,
		loop:    l,
		metrics: newRespMetrics(len(s.sites.all)),
	}
	lc.log = s.log.With("loop", l.ID())
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	s.loopMetrics = append(s.loopMetrics, lc.metrics)
	if redirect {
		lc.log = s.log.With("listener", "redirect_http")
	}
	lc.limiter = loglimit.New(lc.log, clientLogsPerSecond)
	if redirect {
		return lc
	}
	if s.proxy != nil {
		lc.proxy = proxy.NewLoop(s.proxy, l, lc.log, lc.limiter, &s.cfg.Limits, &s.stats.Requests)
		s.loops = append(s.loops, lc)
	}
	return lc
}

// note logs a line through the loop's rate limiter: for what clients can
// cause at will.
func (lc *loopCtx) note(msg string, args ...any) { lc.limiter.Note(msg, args...) }

// clientLogsPerSecond bounds the lines a loop (or HTTP/3, or the QUIC
// router) logs a second about what clients did.
const clientLogsPerSecond = 20

// tick runs once a second or so: buffered log lines go out, and proxy
// requests waiting too long for a connection are answered. more reports
// whether ticks are still needed while the loop is idle.
func (lc *loopCtx) tick() (more bool) {
	lc.flushLog()
	held := lc.limiter.Flush()
	waiting := lc.proxy != nil && lc.proxy.Expire(lc.loop.Now().UnixNano())
	return held || waiting
}

// flushLog writes the buffered access log lines.
func (lc *loopCtx) flushLog() {
	if len(lc.logBuf) > 0 {
		lc.srv.alog.Write(lc.logBuf)
		lc.logBuf = lc.logBuf[:0]
	}
}

// logResponse counts a finished response's record (sent body bytes; ktls:
// it left by kernel TLS) and buffers its access log line.
func (lc *loopCtx) logResponse(rec *accesslog.Record, sent int64, ktls bool) {
	lc.logBuf = rec.Finish(lc.metrics, lc.srv.alog, &lc.logClock, lc.logBuf, sent, ktls)
	lc.batchLog()
}

// batchLog hands the buffered lines over once they make a batch (the
// loop's tick hands over the rest).
func (lc *loopCtx) batchLog() {
	if a := lc.srv.alog; a != nil && len(lc.logBuf) >= a.Batch {
		lc.flushLog()
	}
}

// bulkPolicy switches a socket carrying a large body to the bulk
// congestion control, and applies the site's pacing rate.
func (lc *loopCtx) bulkPolicy(c *reactor.Conn, resp *files.Response, s *site) {
	k := &lc.srv.cfg.Kernel
	if resp.Bulk >= int64(k.BulkThreshold) && k.BulkCongestion != "off" {
		lc.srv.stats.Bulk.Add(1)
		if err := c.SetCongestion(k.BulkCongestion); err != nil {
			lc.srv.stats.CongestionErrors.Add(1)
			if !lc.warnedCC {
				lc.warnedCC = true
				lc.log.Warn("cannot set bulk congestion control; bulk responses use the system default",
					"congestion", k.BulkCongestion, "err", err)
			}
		}
	}
	if err := c.SetPacingRate(s.limitRate); err != nil && !lc.warnedCC {
		lc.warnedCC = true
		lc.log.Warn("cannot set pacing rate", "err", err)
	}
}

// httpDate returns the Date header value, formatted once a second.
func (lc *loopCtx) httpDate() []byte {
	now := lc.loop.Now()
	if sec := now.Unix(); sec != lc.dateSec || lc.date == nil {
		lc.dateSec = sec
		lc.date = now.UTC().AppendFormat(lc.date[:0], "Mon, 02 Jan 2006 15:04:05 GMT")
	}
	return lc.date
}
