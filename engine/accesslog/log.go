package accesslog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// Log is the shared destination of access log lines. Loops buffer
// whole lines and hand them over in batches; one goroutine writes them.
// A reactor never waits for the disk: past limit bytes waiting, lines
// are dropped and counted (engine_access_log_dropped_lines_total).
type Log struct {
	// Immutable after construction.
	path  string // empty for stdout and stderr
	json  bool   // access_log_format = "json"
	limit int    // bytes that may wait for the writer
	Batch int    // a loop hands its lines over at this size (or at its tick)
	log   *slog.Logger
	wake  chan struct{} // cap 1: lines are waiting
	quit  chan struct{} // closed by close: write what waits, then stop
	done  chan struct{} // closed when the writer has stopped

	mu      sync.Mutex // guards pending, lines and closed
	pending []byte     // guarded by mu: whole lines for the writer
	lines   int64      // guarded by mu: the lines in pending
	closed  bool       // guarded by mu

	fileMu  sync.Mutex // held by the writer while it writes, and by reopen
	f       *os.File   // guarded by fileMu; nil while a named pipe has no reader
	partial bool       // guarded by fileMu: a failed write left a line cut off in f

	Written, Dropped atomic.Int64 // lines
	failing          atomic.Bool  // the last write failed (logged once)
}

// openLog opens an access log file for appending. A named pipe is opened
// without waiting for a reader: nil, and no error, while it has none.
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if errors.Is(err, syscall.ENXIO) {
		return nil, nil // a FIFO with no reader yet: the writer tries again
	}
	// O_NONBLOCK means nothing to a regular file; a pipe's writes that
	// find it full park the writer goroutine on Go's poller (never a
	// reactor) until the reader takes more.
	return f, err
}

func Open(dest, format string, limit int, log *slog.Logger) (*Log, error) {
	// Few, large handovers: each wakes the writer goroutine, which takes
	// its turn on a CPU a reactor holds; a quarter of the limit, so a
	// loop's batch fits beside others', at most 256 KiB.
	a := &Log{json: format == "json", limit: limit, Batch: min(256<<10, max(limit/4, 1<<10)), log: log,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	switch dest {
	case "", "off":
		return nil, nil
	case "stdout":
		a.f = os.Stdout
	case "stderr":
		a.f = os.Stderr
	default:
		f, err := openLog(dest)
		if err != nil {
			return nil, fmt.Errorf("engine: open access log: %w", err)
		}
		if f == nil {
			log.Warn("access log is a named pipe with no reader yet; lines wait (up to access_log_buffer, then are dropped and counted) until one opens it", "path", dest)
		}
		a.path, a.f = dest, f
	}
	go a.run()
	return a, nil
}

// Reopen opens the log file again, for log rotation: the old file was
// renamed, and lines go to a new file by the configured name. Lines
// waiting go to the new file; none is lost.
func (a *Log) Reopen() error {
	if a == nil || a.path == "" {
		return nil
	}
	f, err := openLog(a.path)
	if err != nil {
		return fmt.Errorf("engine: reopen access log: %w", err)
	}
	a.fileMu.Lock()
	old := a.f
	a.f, a.partial = f, false
	a.fileMu.Unlock()
	if old == nil {
		return nil
	}
	return old.Close()
}

// Write hands whole lines to the writer: those that fit in limit bytes
// waiting; the rest are dropped and counted. It never blocks on the disk.
func (a *Log) Write(b []byte) {
	if a == nil || len(b) == 0 {
		return
	}
	a.mu.Lock()
	take := b
	if room := a.limit - len(a.pending); a.closed || room <= 0 {
		take = nil
	} else if len(take) > room {
		take = take[:bytes.LastIndexByte(take[:room], '\n')+1]
	}
	n := int64(bytes.Count(take, []byte{'\n'}))
	a.pending = append(a.pending, take...)
	a.lines += n
	a.mu.Unlock()
	if len(take) < len(b) {
		a.Dropped.Add(int64(bytes.Count(b[len(take):], []byte{'\n'})))
	}
	if len(take) == 0 {
		return
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run writes what waits, until close.
func (a *Log) run() {
	defer close(a.done)
	var buf []byte
	retry := time.NewTicker(time.Second) // a named pipe without a reader
	defer retry.Stop()
	for {
		stop := false
		select {
		case <-a.wake:
		case <-retry.C:
		case <-a.quit:
			stop = true
		}
		a.fileMu.Lock()
		if a.f == nil && a.path != "" {
			a.f, _ = openLog(a.path)
		}
		open := a.f != nil
		a.fileMu.Unlock()
		if !open {
			if stop {
				a.mu.Lock()
				a.Dropped.Add(a.lines) // never read: counted
				a.mu.Unlock()
				return
			}
			continue // lines wait in pending, up to the limit
		}
		a.mu.Lock()
		buf, a.pending = a.pending, buf[:0]
		lines := a.lines
		a.lines = 0
		a.mu.Unlock()
		if len(buf) > 0 {
			a.fileMu.Lock()
			a.writeLines(a.f, buf, lines)
			a.fileMu.Unlock()
		}
		if stop {
			return
		}
	}
}

// writeLines writes buf, whole lines. When a write fails part way, the
// whole lines that made it count as written and the rest as dropped; a
// line cut off in the file is ended before the next write, so the lines
// after it parse (the cut one is among the dropped). The caller holds
// fileMu; w is a.f.
func (a *Log) writeLines(w io.Writer, buf []byte, lines int64) {
	if a.partial {
		if _, err := w.Write([]byte{'\n'}); err == nil {
			a.partial = false
		}
	}
	var n int
	var err error
	if !a.partial {
		n, err = w.Write(buf)
	} else {
		err = errors.New("a line cut off by an earlier failed write could not be ended")
	}
	if err != nil && n > 0 && buf[n-1] != '\n' {
		a.partial = true
	}
	if err == nil {
		a.Written.Add(lines)
		if a.failing.Swap(false) {
			a.log.Info("access log writes succeed again", "path", a.path, "dropped_total", a.Dropped.Load())
		}
		return
	}
	whole := int64(bytes.Count(buf[:n], []byte{'\n'}))
	a.Written.Add(whole)
	a.Dropped.Add(lines - whole)
	if !a.failing.Swap(true) {
		a.log.Error("access log write failed; lines are dropped and counted until a write succeeds", "path", a.path, "err", err)
	}
}

// Close writes the lines waiting and closes the file.
func (a *Log) Close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	a.mu.Unlock()
	close(a.quit)
	select {
	case <-a.done:
	case <-time.After(closeWait):
		// A pipe nobody reads, a disk that hangs: the lines still
		// waiting are lost with the process, and said so.
		a.log.Warn("access log writer still blocked at shutdown; lines not yet written are lost", "path", a.path, "waited", closeWait)
		return
	}
	if a.path != "" {
		a.fileMu.Lock()
		if a.f != nil {
			a.f.Close()
		}
		a.fileMu.Unlock()
	}
}

// appendLogTime formats t as nginx's $time_local: 30/Nov/2026:05:33:27 +0000.
func appendLogTime(b []byte, t time.Time) []byte {
	return t.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
}

// appendHeaderField appends a request header's value for the log: quoted,
// or "-" when the request had none (nginx's combined format).
func appendHeaderField(b []byte, v []byte, ok bool) []byte {
	if !ok {
		return append(b, `"-"`...)
	}
	return appendQuoted(b, v)
}

// appendQuoted appends s in double quotes with quotes, backslashes and
// control bytes escaped as \xHH, so a client cannot forge log lines.
func appendQuoted(b []byte, s ...[]byte) []byte {
	b = append(b, '"')
	for _, p := range s {
		for _, c := range p {
			if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
				b = append(b, '\\', 'x')
				b = strconv.AppendUint(b, uint64(c)>>4, 16)
				b = strconv.AppendUint(b, uint64(c)&15, 16)
				continue
			}
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// closeWait bounds how long close waits for the writer at shutdown.
const closeWait = 5 * time.Second

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control bytes escaped, bytes that are not UTF-8 replaced by U+FFFD, and
// the line breaks some readers split lines at (U+0085, U+2028, U+2029)
// escaped, so every line parses as one object on one line.
func appendJSONString(b []byte, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for len(s) > 0 {
		c := s[0]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				b = append(b, c)
			}
			s = s[1:]
			continue
		}
		r, size := utf8.DecodeRune(s)
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == 0x85 || r == 0x2028 || r == 0x2029:
			b = append(b, '\\', 'u', hex[r>>12], hex[r>>8&15], hex[r>>4&15], hex[r&15])
		default:
			b = append(b, s[:size]...)
		}
		s = s[size:]
	}
	return append(b, '"')
}
