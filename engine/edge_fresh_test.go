package engine

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestEdgeFreshness(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	date := "Sat, 05 Dec 2026 11:00:00 GMT" // the origin's clock an hour behind
	etag := []string{"ETag", `"v1"`}
	for _, tc := range []struct {
		name     string
		status   int
		fields   []string
		def      time.Duration
		life     time.Duration
		store    bool
		private  bool
		swr, sie time.Duration
	}{
		{name: "max-age", status: 200, fields: []string{"Cache-Control", "public, max-age=60"}, life: time.Minute, store: true},
		{name: "s-maxage wins", status: 200, fields: []string{"Cache-Control", "max-age=60, s-maxage=600"}, life: 10 * time.Minute, store: true},
		{name: "two lines", status: 200, fields: []string{"Cache-Control", "max-age=60", "Cache-Control", "no-store"}, private: true},
		{name: "max-age=0", status: 200, fields: []string{"Cache-Control", "max-age=0"}, def: time.Hour},
		{name: "max-age=0 with a validator", status: 200, fields: append([]string{"Cache-Control", "max-age=0"}, etag...), def: time.Hour, store: true},
		{name: "private", status: 200, fields: []string{"Cache-Control", "private, max-age=60"}, private: true},
		{name: "no-cache", status: 200, fields: []string{"Cache-Control", "no-cache"}, def: time.Hour},
		{name: "no-cache with a validator", status: 200, fields: append([]string{"Cache-Control", "no-cache, max-age=60"}, etag...), store: true},
		{name: "Expires less Date", status: 200, fields: []string{"Date", date, "Expires", "Sat, 05 Dec 2026 11:30:00 GMT"}, life: 30 * time.Minute, store: true},
		{name: "Expires past", status: 200, fields: []string{"Date", date, "Expires", "Sat, 05 Dec 2026 10:00:00 GMT"}, def: time.Hour},
		{name: "Expires invalid", status: 200, fields: []string{"Expires", "0"}, def: time.Hour},
		{name: "default", status: 200, def: time.Hour, life: time.Hour, store: true},
		{name: "no default", status: 200},
		{name: "206", status: 206, fields: []string{"Cache-Control", "max-age=60"}},
		{name: "Vary Accept-Encoding", status: 200, fields: []string{"Cache-Control", "max-age=60", "Vary", "Accept-Encoding"}, life: time.Minute, store: true},
		{name: "Vary Origin", status: 200, fields: []string{"Cache-Control", "max-age=60", "Vary", "Origin, Accept-Encoding"}, life: time.Minute, store: true},
		{name: "Vary Cookie", status: 200, fields: []string{"Cache-Control", "max-age=60", "Vary", "accept-encoding, Cookie"}, private: true},
		{name: "Content-Encoding", status: 200, fields: []string{"Cache-Control", "max-age=60", "Content-Encoding", "gzip"}},
		{name: "Set-Cookie", status: 200, fields: []string{"Cache-Control", "max-age=60", "Set-Cookie", "a=b"}, private: true},
		{name: "bad max-age", status: 200, fields: []string{"Cache-Control", "max-age=x"}},
		{name: "stale-while-revalidate", status: 200, fields: []string{"Cache-Control", "max-age=60, stale-while-revalidate=30, stale-if-error=600"}, life: time.Minute, store: true, swr: 30 * time.Second, sie: 10 * time.Minute},
		{name: "max-age past 2^31", status: 200, fields: []string{"Cache-Control", "max-age=99999999999999999999"}, life: 1 << 31 * time.Second, store: true},
		{name: "max-age=2^40", status: 200, fields: []string{"Cache-Control", "max-age=1099511627776"}, life: 1 << 31 * time.Second, store: true},
		{name: "must-revalidate", status: 200, fields: []string{"Cache-Control", "max-age=60, stale-if-error=600, must-revalidate"}, life: time.Minute, store: true},
	} {
		h := http.Header{}
		for i := 0; i+1 < len(tc.fields); i += 2 {
			h.Add(tc.fields[i], tc.fields[i+1])
		}
		fr := edgeFreshness(tc.status, h, now, tc.def)
		if fr.store != tc.store || fr.private != tc.private || fr.store && fr.until.Sub(now) != tc.life || fr.store && (fr.swr != tc.swr || fr.sie != tc.sie) {
			t.Errorf("%s: stored %v for %v (private %v, swr %v, sie %v), want %v for %v (%v, %v, %v)", tc.name,
				fr.store, fr.until.Sub(now), fr.private, fr.swr, fr.sie, tc.store, tc.life, tc.private, tc.swr, tc.sie)
		}
	}
}

// FuzzEdgeFields: whatever an origin's Cache-Control, Expires, Vary and
// Repr-Digest say, the judgement holds together: nothing private is
// stored, a stored response is fresh from now on or stored stale with
// a validator, stale periods are never negative, and a stated digest
// is 32 bytes of a known algorithm.
func FuzzEdgeFields(f *testing.F) {
	f.Add("max-age=60, stale-while-revalidate=30", "", "Accept-Encoding", "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:", `"v1"`)
	f.Add("no-cache", "Sat, 05 Dec 2026 11:30:00 GMT", "*", "blake3=:AAAA:", "")
	f.Add("s-maxage=\"10\", private", "0", "", "", "")
	f.Add("max-age=99999999999999999999, stale-if-error=-5", "", "Origin, Cookie", "sha-256=:not base64:, blake3=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:", "x")
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, cc, expires, vary, digest, etag string) {
		h := http.Header{}
		for k, v := range map[string]string{"Cache-Control": cc, "Expires": expires, "Vary": vary, "Repr-Digest": digest, "ETag": etag} {
			if v != "" {
				h.Set(k, v)
			}
		}
		fr := edgeFreshness(200, h, now, time.Hour)
		if fr.private && fr.store {
			t.Fatalf("stored though private: %+v", fr)
		}
		if fr.swr < 0 || fr.sie < 0 {
			t.Fatalf("negative stale periods: %+v", fr)
		}
		if fr.store && fr.until.Before(now) {
			t.Fatalf("stored, fresh until %v, before now", fr.until)
		}
		if fr.store && !fr.until.After(now) && etag == "" {
			t.Fatalf("stored stale without a validator: %+v", fr)
		}
		for _, d := range originDigests(h) {
			if d.sum != nil && len(d.sum) != 32 || d.alg != "sha-256" && d.alg != "blake3" {
				t.Fatalf("digest %q of %d bytes", d.alg, len(d.sum))
			}
		}
	})
}

// TestOriginDigests: every digest an origin states counts, in every
// field and on every line; an unreadable one of a known algorithm is
// kept (it matches nothing), an unknown algorithm is not.
func TestOriginDigests(t *testing.T) {
	good := "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
	h := http.Header{}
	h.Add("Repr-Digest", "sha-256=:"+good+":, blake3=:"+good+":, md5=:abc:")
	h.Add("Repr-Digest", "SHA-256=:not base64!:")
	h.Add("Content-Digest", "sha-256=:"+good+":")
	h.Add("X-Amz-Checksum-Sha256", "AAAA")
	var got []string
	for _, d := range originDigests(h) {
		got = append(got, fmt.Sprintf("%s/%d", d.alg, len(d.sum)))
	}
	if want := "sha-256/32 blake3/32 sha-256/0 sha-256/32 sha-256/0"; strings.Join(got, " ") != want {
		t.Fatalf("stated digests %q, want %q", strings.Join(got, " "), want)
	}
}
