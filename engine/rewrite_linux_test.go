package engine_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// rewriteInPlace overwrites 100 bytes of p at off with other bytes,
// keeping its size and modification time (rsync --inplace -t).
func rewriteInPlace(t *testing.T, p string, off int64) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	old := make([]byte, 100)
	if _, err := f.ReadAt(old, off); err != nil {
		t.Fatal(err)
	}
	for i := range old {
		old[i] ^= 0xff
	}
	if _, err := f.WriteAt(old, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// TestFileRewrittenDuringTransfer: a file whose bytes are rewritten in
// place (size and mtime kept) while a response for it is under way never
// ends cleanly: the rest is refused, on every path: sendfile (plain
// HTTP/1.1), records sealed in userspace (HTTP/1.1 over TLS), HTTP/2 (the
// stream reset, not the connection), HTTP/3 (the stream reset).
func TestFileRewrittenDuringTransfer(t *testing.T) {
	src, _ := bigFile()
	for _, proto := range []string{"h1", "h1 TLS", "h2", "h3"} {
		t.Run(proto, func(t *testing.T) {
			root := t.TempDir()
			p := filepath.Join(root, "model.bin")
			copyFile(t, src, p)
			var body io.Reader
			var length int64
			var ts *testServer
			switch proto {
			case "h1":
				ts = start(t, fmt.Sprintf("root = %q\n", root))
				c := dial(t, ts.addr)
				c.Conn.(*net.TCPConn).SetReadBuffer(64 << 10)
				c.send(get("/model.bin"))
				resp := c.head("GET")
				body, length = resp.Body, resp.ContentLength
			default:
				var pki *testPKI
				ts, pki = startTLS(t, root, ktlsAuto+"[h3]\nbulk_pace_rate = \"20MiB\"\n")
				url := "https://localhost:" + portOf(ts.addr) + "/model.bin"
				var c *http.Client
				switch proto {
				case "h1 TLS":
					c = pki.client(nil)
					c.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				case "h2":
					c = h2Client(pki)
				case "h3":
					c, _ = h3Client(t, pki)
					url = "https://" + ts.addr + "/model.bin"
				}
				resp, err := c.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { resp.Body.Close() })
				body, length = resp.Body, resp.ContentLength
			}
			if _, err := io.CopyN(io.Discard, body, 2<<20); err != nil {
				t.Fatal(err)
			}
			time.Sleep(scale(100 * time.Millisecond))
			rewriteInPlace(t, p, length-10<<20)
			n, err := io.Copy(io.Discard, body)
			if total := n + 2<<20; err == nil {
				t.Fatalf("the response ended cleanly after %d of %d bytes, the file rewritten under it", total, length)
			}
			if st := ts.Stats(); proto == "h2" && (st.H2BodyFailures != 1 || st.Aborted != 0) {
				t.Errorf("HTTP/2: streams reset %d, connections aborted %d; want the stream reset alone", st.H2BodyFailures, st.Aborted)
			}
		})
	}
}
