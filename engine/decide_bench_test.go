package engine

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/engine/files"
	"github.com/mediaship/engine/engine/policy"
)

// BenchmarkDecide is the routing and policy decision of one request, on
// its own: a path with no policy, with a header policy, and with a
// signed URL (the signature seen before, as every request of a
// keep-alive download after its first).
func BenchmarkDecide(b *testing.B) {
	dir := b.TempDir()
	key := filepath.Join(dir, "k1")
	if err := os.WriteFile(key, []byte("secretsecretsecretsecretsecret12"), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Parse("bench.toml", dir, []byte(`listen = "127.0.0.1:0"
[[sites]]
domain = "*"
root = "`+dir+`"
[[sites.paths]]
prefix = "/hdr/"
cache_control = "private, max-age=3600"
set_headers = { "X-Frame-Options" = "DENY" }
[[sites.paths]]
prefix = "/sig/"
auth = "signed"
[signing]
keys = { k1 = "`+key+`" }
[integrity]
state_dir = "`+filepath.Join(dir, "state")+`"
`))
	if err != nil {
		b.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	keys, err := policy.LoadKeys(map[string]string{"k1": key})
	if err != nil {
		b.Fatal(err)
	}
	q, err := keys.Sign(policy.SignRequest{KeyID: "k1", Path: "/sig/1k.bin", Expires: time.Now().Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, target string }{
		{"none", "/pub/1k.bin"},
		{"headers", "/hdr/1k.bin"},
		{"signed", "/sig/1k.bin?" + q},
	} {
		path, query, _ := strings.Cut(tc.target, "?")
		f := reqFacts{proto: protoH1, host: []byte("127.0.0.1:8080"), method: []byte("GET"), path: []byte(path),
			now: time.Now(), peer: netip.MustParseAddr("127.0.0.1")}
		if query != "" {
			f.query = []byte(query)
		}
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 64)
			d, _ := s.decide(&f, buf)
			if d.status != 0 {
				b.Fatalf("%s: status %d (%s)", tc.target, d.status, d.reason)
			}
			b.ReportAllocs()
			for b.Loop() {
				d, buf = s.decide(&f, buf)
			}
		})
		b.Run(tc.name+"+fields", func(b *testing.B) {
			buf := make([]byte, 0, 64)
			w := h1Fields{b: make([]byte, 0, 1024)}
			date := []byte("Sat, 05 Dec 2026 01:13:18 GMT")
			resp := files.Response{Status: 200, ContentType: "application/octet-stream", ContentLength: 1024,
				ETag: `"400-18ee3678fd0f77b4"`, LastModified: "Sat, 05 Dec 2026 01:13:14 GMT", AcceptRanges: true,
				Link: []byte(`</x/1k.bin.obao>; rel="blake3-outboard"`), File: &files.Entry{}}
			var d decision
			b.ReportAllocs()
			for b.Loop() {
				d, buf = s.decide(&f, buf)
				w.b = w.b[:0]
				writeFields(&w, &resp, d.site, d.policyResp(), date)
			}
		})
	}
}
