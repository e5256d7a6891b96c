package engine

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mediaship/engine/engine/config"
)

func TestParseWTQuery(t *testing.T) {
	const maxBytes, dgram = 10 << 20, 1000
	for _, tc := range []struct {
		q    string
		want wtOp
		err  string
	}{
		{"mode=echo", wtOp{mode: "echo"}, ""},
		{"mode=sink", wtOp{mode: "sink"}, ""},
		{"mode=source&bytes=5", wtOp{mode: "source", bytes: 5}, ""},
		{"mode=source&bytes=10485760", wtOp{mode: "source", bytes: 10 << 20}, ""},
		{"mode=source&file=a/b.bin", wtOp{mode: "source", file: "/a/b.bin"}, ""},
		{"mode=source&file=%2Fx%20y", wtOp{mode: "source", file: "/x y"}, ""},
		{"mode=datagrams&rate=1&count=10485", wtOp{mode: "datagrams", rate: 1, count: 10485}, ""},
		{"", wtOp{}, `mode ""`},
		{"mode=ECHO", wtOp{}, `mode "ECHO"`},
		{"mode=echo&bytes=1", wtOp{}, `takes no "bytes"`},
		{"mode=echo&mode=sink", wtOp{}, "given 2 times"},
		{"mode=source", wtOp{}, "bytes=N or file=PATH"},
		{"mode=source&bytes=1&file=/a", wtOp{}, "one of them"},
		{"mode=source&bytes=0", wtOp{}, "expected 1 to"},
		{"mode=source&bytes=10485761", wtOp{}, "expected 1 to"},
		{"mode=source&bytes=-1", wtOp{}, "expected 1 to"},
		{"mode=source&bytes=1e3", wtOp{}, "expected 1 to"},
		{"mode=source&file=", wtOp{}, "file= is empty"},
		{"mode=datagrams&rate=10", wtOp{}, "needs count"},
		{"mode=datagrams&count=10", wtOp{}, "needs rate"},
		{"mode=datagrams&rate=1000001&count=1", wtOp{}, "rate="},
		{"mode=datagrams&rate=1&count=10486", wtOp{}, "count="},
		{"mode=%zz", wtOp{}, "invalid URL escape"},
	} {
		got, err := parseWTQuery(tc.q, maxBytes, dgram)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseWTQuery(%q) = %+v, %v; want error with %q", tc.q, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseWTQuery(%q) = %+v, %v; want %+v", tc.q, got, err, tc.want)
		}
	}
}

// FuzzWTQuery: any query gives an operation within the limits or an
// error, never a panic.
func FuzzWTQuery(f *testing.F) {
	for _, s := range []string{"mode=echo", "mode=source&bytes=100", "mode=source&file=/a", "mode=datagrams&rate=5&count=7", "mode=%zz&x", ";;&&=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		op, err := parseWTQuery(q, 1<<20, 100)
		if err != nil {
			return
		}
		if _, ok := wtModes[op.mode]; !ok {
			t.Fatalf("%q: mode %q", q, op.mode)
		}
		switch op.mode {
		case "source":
			if (op.file == "") == (op.bytes == 0) || op.bytes < 0 || op.bytes > 1<<20 || op.file != "" && op.file[0] != '/' {
				t.Fatalf("%q: %+v", q, op)
			}
		case "datagrams":
			if op.rate < 1 || op.rate > 1_000_000 || op.count < 1 || op.count*100 > 1<<20 {
				t.Fatalf("%q: %+v", q, op)
			}
		}
	})
}

func TestOriginAllowed(t *testing.T) {
	cfg := &config.WebTransport{AllowedOrigins: []string{"https://media.example.com", "http://localhost:8080/"}}
	for _, tc := range []struct {
		origin []string
		want   bool
	}{
		{nil, true}, // not a browser
		{[]string{"https://media.example.com"}, true},
		{[]string{"HTTPS://MEDIA.EXAMPLE.COM"}, true},
		{[]string{"http://localhost:8080"}, true},
		{[]string{"https://media.example.com:443"}, false},
		{[]string{"https://evil.example"}, false},
		{[]string{"null"}, false},
		{[]string{""}, false},
		{[]string{"https://media.example.com", "https://media.example.com"}, false},
		// The request's own origin (the diagnostics page's).
		{[]string{"https://own.test:8443"}, true},
		{[]string{"HTTPS://OWN.TEST:8443"}, true},
		{[]string{"http://own.test:8443"}, false},
		{[]string{"https://own.test"}, false},
		{[]string{"https://own.test:8443", "https://own.test:8443"}, false},
	} {
		h := http.Header{}
		if tc.origin != nil {
			h["Origin"] = tc.origin
		}
		if got := originAllowed(cfg, h, "https://own.test:8443"); got != tc.want {
			t.Errorf("originAllowed(%q) = %v, want %v", tc.origin, got, tc.want)
		}
	}
	for _, tc := range []struct{ origin, own string }{
		{"https://own.test", "https://own.test"},
		{"https://own.test:443", "https://own.test"}, // a client that names the default port
		{"https://[::1]:8443", "https://[::1]:8443"},
	} {
		if !originAllowed(&config.WebTransport{}, http.Header{"Origin": {tc.origin}}, tc.own) {
			t.Errorf("originAllowed(%q) with own origin %q = false, want true", tc.origin, tc.own)
		}
	}
	if originAllowed(&config.WebTransport{}, http.Header{"Origin": {"https://"}}, "") {
		t.Error(`no own origin let Origin "https://" in`)
	}
	if !originAllowed(&config.WebTransport{AllowedOrigins: []string{"*"}}, http.Header{"Origin": {"null"}}, "") {
		t.Error(`"*" refused Origin null`)
	}
}
