package engine

import (
	"log/slog"
	"sync"
	"time"

	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/reactor"
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
	proxy   *proxyPool   // nil without reverse proxy routes

	limiter *logLimiter

	// Owned by the loop goroutine.
	hostBuf  []byte // the request's normalized host
	date     []byte
	dateSec  int64
	logBuf   []byte // access log lines not yet written
	logClock logClock
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
	lc.limiter = newLogLimiter(lc.log, clientLogsPerSecond)
	if redirect {
		return lc
	}
	if s.proxy != nil {
		lc.proxy = newProxyPool(lc)
		s.loops = append(s.loops, lc)
	}
	return lc
}

// note logs a line through the loop's rate limiter: for what clients can
// cause at will.
func (lc *loopCtx) note(msg string, args ...any) { lc.limiter.note(msg, args...) }

// clientLogsPerSecond bounds the lines a loop (or HTTP/3, or the QUIC
// router) logs a second about what clients did.
const clientLogsPerSecond = 20

// tick runs once a second or so: buffered log lines go out, and proxy
// requests waiting too long for a connection are answered. more reports
// whether ticks are still needed while the loop is idle.
func (lc *loopCtx) tick() (more bool) {
	lc.flushLog()
	held := lc.limiter.flush()
	waiting := lc.proxy != nil && lc.proxy.expire(lc.loop.Now().UnixNano())
	return held || waiting
}

// flushLog writes the buffered access log lines.
func (lc *loopCtx) flushLog() {
	if len(lc.logBuf) > 0 {
		lc.srv.alog.write(lc.logBuf)
		lc.logBuf = lc.logBuf[:0]
	}
}

// logResponse counts a finished response's record (sent body bytes; ktls:
// it left by kernel TLS) and buffers its access log line.
func (lc *loopCtx) logResponse(rec *reqRecord, sent int64, ktls bool) {
	lc.logBuf = rec.finish(lc.metrics, lc.srv.alog, &lc.logClock, lc.logBuf, sent, ktls)
	if a := lc.srv.alog; a != nil && len(lc.logBuf) >= a.batch {
		lc.flushLog()
	}
}

// bulkPolicy switches a socket carrying a large body to the bulk
// congestion control, and applies the site's pacing rate.
func (lc *loopCtx) bulkPolicy(c *reactor.Conn, resp *files.Response, s *site) {
	k := &lc.srv.cfg.Kernel
	if resp.Bulk >= int64(k.BulkThreshold) && k.BulkCongestion != "off" {
		lc.srv.stats.bulk.Add(1)
		if err := c.SetCongestion(k.BulkCongestion); err != nil {
			lc.srv.stats.congestionErrors.Add(1)
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

// logLimiter keeps what clients can cause at will from flooding the
// log: past perSecond lines in a second, lines are counted, and their
// number is said once the second is over. Safe for concurrent use (HTTP/3
// handlers, the QUIC router, the admin listener); a loop's is used by its
// goroutine alone, so its lock is never contended.
type logLimiter struct {
	// Immutable after construction.
	log       *slog.Logger
	perSecond int

	mu         sync.Mutex // guards the rest
	sec        int64
	n          int
	suppressed int
}

func newLogLimiter(log *slog.Logger, perSecond int) *logLimiter {
	return &logLimiter{log: log, perSecond: perSecond}
}

// note logs a line unless perSecond were logged this second.
func (l *logLimiter) note(msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sec := time.Now().Unix()
	if sec != l.sec {
		// Lines held back in an earlier second are said before the
		// next one, for limiters nobody flushes.
		l.sayHeld()
		l.sec, l.n = sec, 0
	}
	if l.n++; l.n > l.perSecond {
		l.suppressed++
		return
	}
	l.log.Info(msg, args...)
}

// flush says how many lines were held back, once their second is over;
// held reports whether some still wait to be said.
func (l *logLimiter) flush() (held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Unix() != l.sec {
		l.sayHeld()
	}
	return l.suppressed > 0
}

func (l *logLimiter) sayHeld() {
	if l.suppressed > 0 {
		l.log.Info("log lines suppressed (rate limit)", "count", l.suppressed)
		l.suppressed = 0
	}
}
