package engine

import (
	"testing"
	"time"

	"github.com/mediaship/engine/h1"
)

func TestEdgeFreshness(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	date := "Sat, 05 Dec 2026 11:00:00 GMT" // the origin's clock an hour behind
	for _, tc := range []struct {
		name   string
		status int
		fields []string
		def    time.Duration
		life   time.Duration
		ok     bool
	}{
		{"max-age", 200, []string{"Cache-Control", "public, max-age=60"}, 0, time.Minute, true},
		{"s-maxage wins", 200, []string{"Cache-Control", "max-age=60, s-maxage=600"}, 0, 10 * time.Minute, true},
		{"two lines", 200, []string{"Cache-Control", "max-age=60", "Cache-Control", "no-store"}, 0, 0, false},
		{"max-age=0", 200, []string{"Cache-Control", "max-age=0"}, time.Hour, 0, false},
		{"private", 200, []string{"Cache-Control", "private, max-age=60"}, 0, 0, false},
		{"no-cache", 200, []string{"Cache-Control", "no-cache"}, time.Hour, 0, false},
		{"Expires less Date", 200, []string{"Date", date, "Expires", "Sat, 05 Dec 2026 11:30:00 GMT"}, 0, 30 * time.Minute, true},
		{"Expires past", 200, []string{"Date", date, "Expires", "Sat, 05 Dec 2026 10:00:00 GMT"}, time.Hour, 0, false},
		{"Expires invalid", 200, []string{"Expires", "0"}, time.Hour, 0, false},
		{"default", 200, nil, time.Hour, time.Hour, true},
		{"no default", 200, nil, 0, 0, false},
		{"206", 206, []string{"Cache-Control", "max-age=60"}, 0, 0, false},
		{"Vary", 200, []string{"Cache-Control", "max-age=60", "Vary", "Accept-Encoding"}, 0, 0, false},
		{"Set-Cookie", 200, []string{"Cache-Control", "max-age=60", "Set-Cookie", "a=b"}, 0, 0, false},
		{"bad max-age", 200, []string{"Cache-Control", "max-age=x"}, 0, 0, false},
	} {
		r := &h1.Response{Status: tc.status}
		for i := 0; i+1 < len(tc.fields); i += 2 {
			r.Headers = append(r.Headers, h1.Header{Name: []byte(tc.fields[i]), Value: []byte(tc.fields[i+1])})
		}
		until, ok := edgeFreshness(r, now, tc.def)
		if ok != tc.ok || ok && until.Sub(now) != tc.life {
			t.Errorf("%s: fresh for %v (stored %v), want %v (%v)", tc.name, until.Sub(now), ok, tc.life, tc.ok)
		}
	}
}
