package engine

import (
	"encoding/json"
	"net/netip"
	"regexp"
	"strings"
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
		var r reqRecord
		r.begin(time.Now(), protoH1, netip.MustParseAddr("2001:db8::1"), 0, 0, true, method, target)
		r.headers(referer, true, agent, len(agent) > 0)
		r.setSite(0, "media.example.com")
		r.respond(200, true)
		var clk logClock
		clk.set(r.at)
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
