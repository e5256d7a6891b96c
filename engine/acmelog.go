package engine

import (
	"context"
	"log/slog"
	"sort"

	"go.uber.org/zap/zapcore"
)

// zapToSlog is a zapcore.Core that writes certmagic's log (zap) to the
// engine's (slog): its debug and info lines (every step of an order) at
// debug, its warnings and errors at warn. The engine logs the outcomes
// itself, from certmagic's events, at info.
type zapToSlog struct {
	log    *slog.Logger
	fields []zapcore.Field
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
	return &zapToSlog{log: z.log, fields: append(z.fields[:len(z.fields):len(z.fields)], fields...)}
}

func (z *zapToSlog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if z.Enabled(e.Level) {
		return ce.AddCore(e, z)
	}
	return ce
}

func (z *zapToSlog) Write(e zapcore.Entry, fields []zapcore.Field) error {
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
