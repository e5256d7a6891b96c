package engine

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// accessLog is the shared destination of access log lines. Loops buffer
// whole lines and write them in batches; a write of whole lines to a file
// opened with O_APPEND does not interleave with another loop's.
type accessLog struct {
	path string // empty for stdout and stderr

	mu sync.Mutex // guards f: loops write batches, reopen swaps the file
	f  *os.File   // guarded by mu
}

func openAccessLog(dest string) (*accessLog, error) {
	switch dest {
	case "", "off":
		return nil, nil
	case "stdout":
		return &accessLog{f: os.Stdout}, nil
	case "stderr":
		return &accessLog{f: os.Stderr}, nil
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("engine: open access log: %w", err)
	}
	return &accessLog{path: dest, f: f}, nil
}

// reopen opens the log file again, for log rotation: the old file was
// renamed, and lines go to a new file by the configured name.
func (a *accessLog) reopen() error {
	if a == nil || a.path == "" {
		return nil
	}
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("engine: reopen access log: %w", err)
	}
	a.mu.Lock()
	old := a.f
	a.f = f
	a.mu.Unlock()
	return old.Close()
}

func (a *accessLog) write(b []byte) {
	if a == nil || len(b) == 0 {
		return
	}
	a.mu.Lock()
	a.f.Write(b)
	a.mu.Unlock()
}

func (a *accessLog) close() {
	if a != nil && a.path != "" {
		a.mu.Lock()
		a.f.Close()
		a.mu.Unlock()
	}
}

// appendLogTime formats t as nginx's $time_local: 30/Nov/2026:05:33:27 +0000.
func appendLogTime(b []byte, t time.Time) []byte {
	return t.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
}

// appendHeaderField appends a request header's value for the log: quoted,
// or "-" when the request had none (nginx's combined format).
func appendHeaderField(b []byte, v []byte) []byte {
	if v == nil {
		return append(b, `"-"`...)
	}
	return appendQuoted(b, v)
}

// appendQuoted appends s in double quotes with quotes, backslashes and
// control bytes escaped as \xHH, so a client cannot forge log lines.
func appendQuoted(b []byte, s []byte) []byte {
	b = append(b, '"')
	for _, c := range s {
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			b = append(b, '\\', 'x')
			b = strconv.AppendUint(b, uint64(c)>>4, 16)
			b = strconv.AppendUint(b, uint64(c)&15, 16)
			continue
		}
		b = append(b, c)
	}
	return append(b, '"')
}
