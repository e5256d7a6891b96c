package engine_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/testtool"
	"github.com/mediaship/engine/internal/vmtest"
	"github.com/mediaship/engine/ktls"
)

// tlsStat reads a counter from /proc/net/tls_stat, the kernel's own count
// of kernel TLS contexts: proof that a connection really used it.
func tlsStat(t *testing.T, name string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tls_stat")
	if err != nil {
		t.Fatalf("read /proc/net/tls_stat: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/net/tls_stat:\n%s", name, b)
	return 0
}

// randomFile writes n pseudo-random bytes and returns them.
func randomFile(t *testing.T, p string, n int, seed byte) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// TestKernelTLSPromotion serves files over TLS with ktls = "require" on a
// kernel with kernel TLS (in the VM when this one has none): responses
// switch to the kernel after promote_after, keep-alive continues on the
// kernel's key, and the kernel's counters say it did the work. The client
// reads several responses after the promotion, so a sequence number off by
// one would fail them.
func TestKernelTLSPromotion(t *testing.T) {
	openssl, _ := testtool.Find("openssl")
	var bins []string
	if openssl != "" {
		bins = []string{openssl}
	}
	if !vmtest.OnKTLSKernel(t, vmtest.Options{Binaries: bins}) {
		return
	}
	root := t.TempDir()
	big := randomFile(t, filepath.Join(root, "big.bin"), 3<<20+12345, 1)
	writeFile(t, filepath.Join(root, "small.txt"), "small response")
	writeFile(t, filepath.Join(root, "app.js"), strings.Repeat("x", 100))
	writeSidecar(t, filepath.Join(root, "app.js.br"), "BR")

	for _, promote := range []string{"1MiB", "0B"} {
		t.Run("promote_after="+promote, func(t *testing.T) {
			ts, pki := startTLS(t, root, fmt.Sprintf("[kernel]\nktls = \"require\"\npromote_after = %q\n", promote))
			txBefore := tlsStat(t, "TlsTxSw")
			c, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Minute))
			r := bufio.NewReaderSize(c, 64<<10)
			steps := []struct {
				req  string
				want []byte
			}{
				{get("/small.txt"), []byte("small response")}, // userspace, before promotion
				{get("/big.bin"), big},                        // promoted mid-response
				{get("/small.txt"), []byte("small response")}, // plaintext into the kernel
				{get("/big.bin", "Range: bytes=2000000-2999999\r\n"), big[2000000:3000000]},
				{get("/app.js", "Accept-Encoding: br\r\n"), []byte("BR")},
				{get("/big.bin"), big},
				{get("/small.txt"), []byte("small response")},
			}
			for i, s := range steps {
				io.WriteString(c, s.req)
				resp, err := http.ReadResponse(r, &http.Request{Method: "GET"})
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil || !bytes.Equal(body, s.want) {
					t.Fatalf("response %d: %d bytes (sha %s), want %d (sha %s), err %v",
						i, len(body), digest(body), len(s.want), digest(s.want), err)
				}
			}
			st := ts.Stats()
			if st.Promotions != 1 || st.PromoteFailures != 0 || st.TLSKernelBytes < int64(len(big)) {
				t.Errorf("promotions %d, failures %d, kernel bytes %d", st.Promotions, st.PromoteFailures, st.TLSKernelBytes)
			}
			if promote == "1MiB" && st.TLSUserBytes < 1<<20 {
				t.Errorf("userspace bytes %d: the first MiB should have gone through our record layer", st.TLSUserBytes)
			}
			if got := tlsStat(t, "TlsTxSw") - txBefore; got != 1 {
				t.Errorf("TlsTxSw grew by %d, want 1 (one connection promoted)", got)
			}
			t.Logf("promotions %d, kernel bytes %d, userspace bytes %d", st.Promotions, st.TLSKernelBytes, st.TLSUserBytes)
		})
	}

	// What an operator sees of it: /metrics counts the bytes kernel TLS
	// carried, and the JSON access log says which response it carried.
	t.Run("metrics", func(t *testing.T) {
		logPath := filepath.Join(t.TempDir(), "access.log")
		pki := newPKI(t, t.TempDir(), "localhost")
		ts := start(t, fmt.Sprintf("access_log = %q\naccess_log_format = \"json\"\n[[sites]]\ndomain = \"localhost\"\ndefault = true\nroot = %q\n"+
			"[sites.tls]\ncert = %q\nkey = %q\n[kernel]\nktls = \"require\"\npromote_after = \"1MiB\"\n[admin]\nlisten = \"127.0.0.1:0\"\n",
			logPath, root, pki.certFile, pki.keyFile))
		c := pki.client(nil)
		for _, p := range []string{"/small.txt", "/big.bin"} {
			resp, err := c.Get("https://" + ts.addr + p)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || p == "/big.bin" && !bytes.Equal(body, big) {
				t.Fatalf("%s: %d bytes, %v", p, len(body), err)
			}
		}
		fams := scrape(t, ts.AdminAddr())
		kernel := metric(t, fams, "engine_response_bytes_total", "transport=kernel_tls_sendfile")
		user := metric(t, fams, "engine_response_bytes_total", "transport=userspace_tls")
		if p := metric(t, fams, "engine_ktls_promotions_total"); p != 1 || kernel < float64(len(big)-1<<20) || user < 1<<20 {
			t.Errorf("promotions %v, kernel TLS bytes %v, userspace %v (file %d bytes, promote_after 1MiB)", p, kernel, user, len(big))
		}
		ts.stop()
		lines := readLines(t, logPath)
		if len(lines) != 2 || !strings.Contains(lines[0], `"path":"/small.txt"`) || !strings.Contains(lines[0], `"ktls":false`) ||
			!strings.Contains(lines[1], `"path":"/big.bin"`) || !strings.Contains(lines[1], `"ktls":true`) {
			t.Errorf("access log:\n%s", strings.Join(lines, "\n"))
		}
		t.Logf("metrics: kernel_tls_sendfile %v bytes, userspace_tls %v", kernel, user)
	})

	// HTTP/2: four streams on one connection cross promote_after together;
	// frames sealed in userspace until then, header plus sendfile after.
	t.Run("h2", func(t *testing.T) {
		ts, pki := startTLS(t, root, "[kernel]\nktls = \"require\"\npromote_after = \"1MiB\"\n")
		txBefore := tlsStat(t, "TlsTxSw")
		c := h2Client(pki)
		for round := 0; round < 2; round++ {
			errs := make(chan error, 5)
			for i := 0; i < 5; i++ {
				go func() {
					path, want := "/big.bin", big
					if i == 4 {
						path, want = "/small.txt", []byte("small response")
					}
					resp, err := c.Get("https://" + ts.addr + path)
					if err != nil {
						errs <- err
						return
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || !bytes.Equal(body, want) || resp.ProtoMajor != 2 {
						err = fmt.Errorf("%s over %s: %d bytes (want %d), err %v", path, resp.Proto, len(body), len(want), err)
					}
					errs <- err
				}()
			}
			for i := 0; i < 5; i++ {
				if err := <-errs; err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
		}
		st := ts.Stats()
		if st.H2Connections != 1 || st.Promotions != 1 || st.PromoteFailures != 0 || st.TLSKernelBytes < int64(len(big)) || st.TLSUserBytes < 1<<20 {
			t.Errorf("h2 connections %d, promotions %d, failures %d, kernel bytes %d, userspace bytes %d",
				st.H2Connections, st.Promotions, st.PromoteFailures, st.TLSKernelBytes, st.TLSUserBytes)
		}
		if got := tlsStat(t, "TlsTxSw") - txBefore; got != 1 {
			t.Errorf("TlsTxSw grew by %d, want 1", got)
		}
		t.Logf("h2: promotions %d, kernel bytes %d, userspace bytes %d", st.Promotions, st.TLSKernelBytes, st.TLSUserBytes)
	})

	// The other two suites, which Go's client never negotiates: openssl.
	if openssl == "" {
		testtool.Missing(t, "openssl") // the AES-256-GCM and ChaCha20-Poly1305 promotions
	}
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"require\"\npromote_after = \"1MiB\"\n")
	for _, suite := range []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"} {
		before := ts.Stats().Promotions
		req := get("/small.txt") + get("/big.bin") + get("/small.txt") + get("/big.bin", "Connection: close\r\n")
		cmd := exec.Command(openssl, "s_client", "-connect", ts.addr, "-servername", "localhost", "-tls1_3",
			"-ciphersuites", suite, "-CAfile", pki.caFile, "-quiet", "-verify_return_error")
		cmd.Stdin = strings.NewReader(req)
		out, err := cmd.Output()
		if err != nil && len(out) == 0 {
			t.Fatalf("%s: openssl: %v", suite, err)
		}
		r := bufio.NewReader(bytes.NewReader(out))
		for i, want := range [][]byte{[]byte("small response"), big, []byte("small response"), big} {
			resp, err := http.ReadResponse(r, &http.Request{Method: "GET"})
			if err != nil {
				t.Fatalf("%s: response %d: %v", suite, i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if !bytes.Equal(body, want) {
				t.Fatalf("%s: response %d: %d bytes, want %d", suite, i, len(body), len(want))
			}
		}
		if got := ts.Stats().Promotions - before; got != 1 {
			t.Errorf("%s: %d promotions, want 1", suite, got)
		}
	}
}

// TestKernelTLSBigAndKeyUpdate: a 100 MiB download promoted after 1 MiB,
// compared byte for byte; then a KeyUpdate asking for the server's after
// promotion, answered by rekeying the kernel where it can (Linux 6.14) or
// else by a clean close once the queued response is out.
func TestKernelTLSBigAndKeyUpdate(t *testing.T) {
	if !vmtest.OnKTLSKernel(t, vmtest.Options{}) {
		return
	}
	root := t.TempDir()
	big := randomFile(t, filepath.Join(root, "big.bin"), 100<<20, 7)
	want := digest(big)
	big = nil
	writeFile(t, filepath.Join(root, "small.txt"), "small response")
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"require\"\npromote_after = \"1MiB\"\n")

	c := dialRawTLS(t, ts.addr, pki)
	c.raw.SetDeadline(time.Now().Add(10 * time.Minute))
	c.inject(23, []byte(get("/big.bin")))
	resp, err := http.ReadResponse(c.r, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if n, err := io.Copy(h, resp.Body); err != nil || n != 100<<20 || hex.EncodeToString(h.Sum(nil)) != want {
		t.Fatalf("100 MiB after promotion: %d bytes, err %v, sha ok %v", n, err, hex.EncodeToString(h.Sum(nil)) == want)
	}
	if ts.Stats().Promotions != 1 {
		t.Fatalf("promotions %d", ts.Stats().Promotions)
	}

	// KeyUpdate(update_requested), then a request under the next key.
	c.inject(22, []byte{24, 0, 0, 1, 1})
	next, _ := ktls.NextSecret(c.keys.Suite, c.sec)
	k, _ := ktls.TrafficKeys(c.keys.Suite, next)
	c.seal, _ = ktls.NewSealer(k, 0)
	c.inject(23, []byte(get("/small.txt")))
	if _, err := c.r.Peek(1); err != nil {
		// No kernel rekey: a clean end (close_notify makes crypto/tls
		// report io.EOF), not a broken record or a bare FIN.
		if err != io.EOF {
			t.Errorf("without kernel rekey the connection should end with close_notify, got %v", err)
		}
		t.Logf("no kernel rekey here: the connection ended with close_notify")
		return
	}
	resp, err = http.ReadResponse(c.r, &http.Request{Method: "GET"})
	if err == nil {
		// The kernel rekeyed: the response came under the server's next
		// key, which crypto/tls switched to on the server's KeyUpdate.
		body, _ := io.ReadAll(resp.Body)
		if string(body) != "small response" {
			t.Errorf("after a kernel rekey: %q", body)
		}
		t.Logf("kernel rekey: the response arrived under the server's next key")
		return
	}
	t.Errorf("after the KeyUpdate: %v", err)
}

// TestKernelTLSProxy: a proxied body over TLS goes through our record
// layer for its first promote_after bytes, then the connection is
// promoted and the rest moves from the upstream's socket into the kernel
// TLS socket by splice(2), byte-exact; the next response on the
// connection is plaintext into the kernel.
func TestKernelTLSProxy(t *testing.T) {
	if !vmtest.OnKTLSKernel(t, vmtest.Options{}) {
		return
	}
	body := make([]byte, 5<<20+4321)
	rand.NewChaCha8([32]byte{7}).Read(body)
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	}))
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "small.txt"), "small response")
	ts, pki := startTLS(t, root, fmt.Sprintf("[kernel]\nktls = \"require\"\npromote_after = \"1MiB\"\n"+
		"[reverse_proxy]\nenabled = true\n[[reverse_proxy.routes]]\ndomain = \"*\"\npath_prefix = \"/api/\"\nupstreams = [%q]\n", b.hostPort()))
	txBefore := tlsStat(t, "TlsTxSw")
	c, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	r := bufio.NewReaderSize(c, 64<<10)
	for i, s := range []struct {
		req  string
		want []byte
	}{
		{get("/api/big"), body},
		{get("/small.txt"), []byte("small response")},
		{get("/api/big"), body},
	} {
		io.WriteString(c, s.req)
		resp, err := http.ReadResponse(r, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, s.want) {
			t.Fatalf("response %d: %d bytes (sha %s), want %d (sha %s), err %v", i, len(got), digest(got), len(s.want), digest(s.want), err)
		}
	}
	st := ts.Stats()
	// Proxied bytes count toward promote_after as they are queued; what
	// was queued past the record boundary of the promotion goes to the
	// kernel as plaintext, so up to one upstream read (256 KiB in bulk
	// mode) under 1 MiB is sealed here.
	if st.Promotions != 1 || st.PromoteFailures != 0 || st.TLSUserBytes < 768<<10 || st.BytesSplice < int64(len(body)) {
		t.Errorf("promotions %d, failures %d, userspace bytes %d, spliced %d", st.Promotions, st.PromoteFailures, st.TLSUserBytes, st.BytesSplice)
	}
	if got := tlsStat(t, "TlsTxSw") - txBefore; got != 1 {
		t.Errorf("TlsTxSw grew by %d, want 1 (one connection promoted)", got)
	}
	t.Logf("promotions %d, userspace bytes %d, spliced into kernel TLS %d", st.Promotions, st.TLSUserBytes, st.BytesSplice)
}
