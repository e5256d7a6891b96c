// Package loglimit keeps lines that clients can cause at will from
// flooding a log.
package loglimit

import (
	"log/slog"
	"sync"
	"time"
)

// Limiter keeps what clients can cause at will from flooding the
// log: past perSecond lines in a second, lines are counted, and their
// number is said once the second is over. Safe for concurrent use (HTTP/3
// handlers, the QUIC router, the admin listener); a loop's is used by its
// goroutine alone, so its lock is never contended.
type Limiter struct {
	// Immutable after construction.
	log       *slog.Logger
	perSecond int

	mu         sync.Mutex // guards the rest
	sec        int64
	n          int
	suppressed int
}

// New is a limiter of log to perSecond lines a second.
func New(log *slog.Logger, perSecond int) *Limiter {
	return &Limiter{log: log, perSecond: perSecond}
}

// Note logs a line unless perSecond were logged this second.
func (l *Limiter) Note(msg string, args ...any) {
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

// Flush says how many lines were held back, once their second is over;
// held reports whether some still wait to be said.
func (l *Limiter) Flush() (held bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Unix() != l.sec {
		l.sayHeld()
	}
	return l.suppressed > 0
}

func (l *Limiter) sayHeld() {
	if l.suppressed > 0 {
		l.log.Info("log lines suppressed (rate limit)", "count", l.suppressed)
		l.suppressed = 0
	}
}
