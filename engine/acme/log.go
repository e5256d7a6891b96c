package acme

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap/zapcore"
)

// zapToSlog is a zapcore.Core that writes certmagic's log (zap) to the
// engine's (slog): its debug and info lines (every step of an order) at
// debug, its warnings and errors at warn. The engine logs the outcomes
// itself, from certmagic's events, at info.
//
// A message logs at most once every 10 s (then a line with how many were
// suppressed): some lines come from what clients do, such as "tls-alpn
// challenge" for each handshake that offers acme-tls/1 with no
// validation under way, and a client must not be able to fill the disk.
type zapToSlog struct {
	log    *slog.Logger
	fields []zapcore.Field
	limit  *logGate
}

// logGate lets each message through once per interval.
type logGate struct {
	mu   sync.Mutex
	last map[string]time.Time // guarded by mu
	held map[string]int       // guarded by mu: suppressed since last
}

const zapLogEvery = 10 * time.Second

// pass reports whether msg may be logged now, and how many lines of it
// were suppressed before.
func (g *logGate) pass(msg string, now time.Time) (bool, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		g.last, g.held = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := g.last[msg]; ok && now.Sub(t) < zapLogEvery {
		g.held[msg]++
		return false, 0
	}
	if len(g.last) > 1024 { // messages are constants; bound it anyway
		clear(g.last)
	}
	g.last[msg] = now
	n := g.held[msg]
	delete(g.held, msg)
	return true, n
}

func (z *zapToSlog) Enabled(l zapcore.Level) bool {
	return z.log.Enabled(context.Background(), level(l))
}

func level(l zapcore.Level) slog.Level {
	if l >= zapcore.WarnLevel {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

func (z *zapToSlog) With(fields []zapcore.Field) zapcore.Core {
	return &zapToSlog{log: z.log, limit: z.limit, fields: append(z.fields[:len(z.fields):len(z.fields)], fields...)}
}

func (z *zapToSlog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if z.Enabled(e.Level) {
		return ce.AddCore(e, z)
	}
	return ce
}

func (z *zapToSlog) Write(e zapcore.Entry, fields []zapcore.Field) error {
	ok, held := z.limit.pass(e.Message, time.Now())
	if !ok {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range z.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	args := make([]any, 0, 2*len(enc.Fields)+2)
	if e.LoggerName != "" {
		args = append(args, "certmagic", e.LoggerName)
	}
	if held > 0 {
		args = append(args, "suppressed_before", held)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, k, enc.Fields[k])
	}
	z.log.Log(context.Background(), level(e.Level), e.Message, args...)
	return nil
}

func (z *zapToSlog) Sync() error { return nil }
