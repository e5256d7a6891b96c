package engine_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestProxyH3StalledBody: an HTTP/3 request for a route whose body stops
// short of its Content-Length, or stalls, is answered within
// body_timeout (408) or refused (400), logged, and never holds its
// exchange: the upstream is not left waiting for bytes that never come.
func TestProxyH3StalledBody(t *testing.T) {
	up, _ := countingBackend(t)
	pki := newPKI(t, t.TempDir(), "localhost")
	logs := &syncBuffer{}
	ts := startLog(t, fmt.Sprintf(`
shutdown_grace = "2s"
[limits]
body_timeout = "1s"
[[sites]]
domain = "localhost"
root = %q
[sites.tls]
cert = %q
key = %q
[kernel]
ktls = "auto"
[reverse_proxy]
enabled = true
[[reverse_proxy.routes]]
domain = "localhost"
path_prefix = "/api/"
upstreams = [%q]
`, t.TempDir(), pki.certFile, pki.keyFile, up.hostPort()), logs)
	client, _ := h3Client(t, pki)
	url := "https://localhost:" + portOf(ts.addr) + "/api/upload"

	for _, tc := range []struct {
		name, sent string
		close      bool // the stream ends after what was sent
		want       int
	}{
		{"stalled", "12345", false, 408},
		{"short", "12345", true, 400},
		{"empty", "", true, 400},
	} {
		pr, pw := io.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), scale(15*time.Second))
		req, _ := http.NewRequestWithContext(ctx, "POST", url, pr)
		req.ContentLength = 10
		go func() {
			if tc.sent != "" {
				pw.Write([]byte(tc.sent))
			}
			if tc.close {
				pw.Close()
			}
		}()
		began := time.Now()
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		took := time.Since(began)
		cancel()
		pw.CloseWithError(io.ErrClosedPipe)
		switch {
		case err != nil:
			t.Errorf("%s: no answer within %v: %v", tc.name, took, err)
		case resp.StatusCode != tc.want:
			t.Errorf("%s: %d after %v, want %d", tc.name, resp.StatusCode, took, tc.want)
		}
	}
	for _, want := range []string{"body_timeout", "ended before its Content-Length"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line says %q:\n%s", want, logs.String())
		}
	}
}
