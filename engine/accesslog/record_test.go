package accesslog

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var combinedRE = regexp.MustCompile(`^\S+ - - \[[^\]]+\] "(?:[^"\\]|\\x[0-9a-f]{2})*" \d+ \d+ "(?:[^"\\]|\\x[0-9a-f]{2})*" "(?:[^"\\]|\\x[0-9a-f]{2})*"\n$`)

// FuzzAccessLogLine: whatever bytes a client puts in its method, target,
// Referer and User-Agent, a JSON line is one valid JSON object that gives
// them back (as UTF-8, U+FFFD for what is not) and a combined line is one
// line nginx's parsers read, with nothing unescaped.
func FuzzAccessLogLine(f *testing.F) {
	f.Add([]byte("GET"), []byte("/a?b=c"), []byte("http://r/"), []byte("curl/8"))
	f.Add([]byte("GET"), []byte("/\"\\\n\x00\x7f\xff"), []byte("é\xe9"), []byte("\u2028"))
	f.Fuzz(func(t *testing.T, method, target, referer, agent []byte) {
		var r Record
		r.Begin(time.Now(), H1, netip.MustParseAddr("2001:db8::1"), 0, 0, true, method, target)
		r.Headers(referer, true, agent, len(agent) > 0)
		r.SetSite(0, "media.example.com")
		r.Respond(200, true)
		var clk Clock
		clk.Set(r.at)
		line := r.appendJSON(nil, &clk, 12, time.Millisecond, false)
		var e map[string]any
		if err := json.Unmarshal(line, &e); err != nil || strings.Count(string(line), "\n") != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("JSON line %q: %v", line, err)
		}
		if e["method"] != asJSON(method) || e["path"] != asJSON(target) {
			t.Fatalf("JSON line %q does not give back method %q and path %q", line, method, target)
		}
		if len(agent) == 0 && e["user_agent"] != nil {
			t.Fatalf("absent User-Agent logged as %v", e["user_agent"])
		}
		line = r.appendCombined(nil, &clk, 12)
		if !combinedRE.Match(line) {
			t.Fatalf("combined line %q", line)
		}
	})
}

// asJSON is s as encoding/json gives it back: each byte that is not UTF-8
// becomes U+FFFD.
func asJSON(s []byte) string {
	b, _ := json.Marshal(string(s))
	var out string
	json.Unmarshal(b, &out)
	return out
}

// fullDisk takes room bytes, then fails like a full disk (ENOSPC after a
// short write), until given more room.
type fullDisk struct {
	bytes.Buffer
	room int
}

func (d *fullDisk) Write(p []byte) (int, error) {
	n := min(len(p), d.room)
	d.Buffer.Write(p[:n])
	d.room -= n
	if n < len(p) {
		return n, syscall.ENOSPC
	}
	return n, nil
}

// TestAccessLogFullDisk: a write cut short by a full disk counts the
// whole lines that made it as written and the rest as dropped; the line
// it cut is ended before the next lines, which parse.
func TestAccessLogFullDisk(t *testing.T) {
	a := &Log{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	line := func(i int) string { return `{"n":` + strconv.Itoa(i) + "}\n" }
	var batch string
	for i := range 10 {
		batch += line(i)
	}
	d := &fullDisk{room: len(line(0))*3 + 4} // three lines and part of a fourth
	a.writeLines(d, []byte(batch), 10)
	if a.Written.Load() != 3 || a.Dropped.Load() != 7 || !a.partial {
		t.Fatalf("written %d dropped %d partial %v", a.Written.Load(), a.Dropped.Load(), a.partial)
	}
	a.writeLines(d, []byte(line(10)), 1) // still full: dropped
	d.room = 1 << 20
	a.writeLines(d, []byte(line(11)+line(12)), 2)
	if a.Written.Load() != 5 || a.Dropped.Load() != 8 {
		t.Fatalf("written %d dropped %d", a.Written.Load(), a.Dropped.Load())
	}
	var parsed int
	for _, l := range strings.Split(strings.TrimSuffix(d.String(), "\n"), "\n") {
		if json.Valid([]byte(l)) {
			parsed++
		} else if l != `{"n"` {
			t.Errorf("line %q is neither whole nor the cut one", l)
		}
	}
	if parsed != 5 {
		t.Errorf("%d lines parse, want 5 (the written count):\n%s", parsed, d.String())
	}
}
