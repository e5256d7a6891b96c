package engine_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/testtool"
	"github.com/mediaship/engine/internal/vmtest"
	"github.com/mediaship/engine/preflight"
)

// testPKI is a CA and a server certificate for localhost, written as PEM.
type testPKI struct {
	pool     *x509.CertPool
	certFile string
	keyFile  string
	caFile   string
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// newPKI makes a CA and a server's leaf for the given names in dir.
func newPKI(t testing.TB, dir string, names ...string) *testPKI {
	t.Helper()
	return newPKIFor(t, dir, x509.ExtKeyUsageServerAuth, names...)
}

// newPKIFor is newPKI with the leaf's use: a server's or a client's.
func newPKIFor(t testing.TB, dir string, use x509.ExtKeyUsage, names ...string) *testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "engine test CA"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{use}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	p := &testPKI{pool: x509.NewCertPool(), certFile: filepath.Join(dir, names[0]+".pem"),
		keyFile: filepath.Join(dir, names[0]+"-key.pem"), caFile: filepath.Join(dir, names[0]+"-ca.pem")}
	p.pool.AddCert(caCert)
	writePEM(t, p.certFile, "CERTIFICATE", der)
	writePEM(t, p.keyFile, "PRIVATE KEY", keyDER)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	return p
}

// startTLS serves root over TLS with a fresh certificate for localhost.
func startTLS(t testing.TB, root, extra string) (*testServer, *testPKI) {
	t.Helper()
	return startTLSLog(t, root, extra, nil)
}

// startTLSLog is startTLS with the server's log also written to w.
func startTLSLog(t testing.TB, root, extra string, w io.Writer) (*testServer, *testPKI) {
	t.Helper()
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := startLog(t, fmt.Sprintf("root = %q\n[[sites]]\ndomain = \"localhost\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n%s",
		root, root, pki.certFile, pki.keyFile, extra), w)
	return ts, pki
}

func (p *testPKI) client(cache tls.ClientSessionCache) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: p.pool, ServerName: "localhost", ClientSessionCache: cache},
		ForceAttemptHTTP2: false,
	}}
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

func getSHA(t *testing.T, c *http.Client, url string) (string, int64, *http.Response) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatalf("%s after %d bytes: %v", url, n, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, resp
}

// TestTLSUserspaceDownload: with kernel TLS off everything goes through
// our record layer: a 100 MiB download, byte for byte, with resumption.
func TestTLSUserspaceDownload(t *testing.T) {
	root := siteRoot(t)
	_, want := linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"off\"\n")
	url := "https://localhost:" + portOf(ts.addr)
	cache := tls.NewLRUClientSessionCache(8)
	for i := 0; i < 2; i++ {
		c := pki.client(cache) // a new transport: a new connection, resumed the second time
		got, n, resp := getSHA(t, c, url+"/big.bin")
		if got != want || n != 100<<20 {
			t.Fatalf("download %d: %d bytes, sha256 %s, want %s", i, n, got, want)
		}
		if resp.TLS.Version != tls.VersionTLS13 || resp.TLS.DidResume != (i == 1) {
			t.Errorf("download %d: version %x resumed %v", i, resp.TLS.Version, resp.TLS.DidResume)
		}
		c.CloseIdleConnections()
	}
	st := ts.Stats()
	if st.Promotions != 0 || st.TLSUserBytes < 200<<20 || st.TLSHandshakes != 2 {
		t.Errorf("stats: promotions %d, userspace bytes %d, handshakes %d", st.Promotions, st.TLSUserBytes, st.TLSHandshakes)
	}
	// Sealed in batches of at most h2_tls_write_buffer_bytes (128 KiB by
	// default), one write each; a batch short of it is a response's
	// start or end, or a socket with less room.
	if per := st.TLSUserBytes / max(st.TLSUserBatches, 1); per < 64<<10 || per > 128<<10 {
		t.Errorf("stats: %d bytes in %d batches (%d per batch)", st.TLSUserBytes, st.TLSUserBatches, per)
	}
	if st.Writes < st.TLSUserBatches || st.Writes > 2*st.TLSUserBatches {
		t.Errorf("stats: %d writes for %d batches", st.Writes, st.TLSUserBatches)
	}
}

// TestTLSSessionTicketsOff: a site with session_tickets = false makes
// every handshake a full one (a client with a session cache is not
// resumed, over HTTP/1.1 and HTTP/2); the default resumes.
func TestTLSSessionTicketsOff(t *testing.T) {
	root := siteRoot(t)
	for _, tc := range []struct {
		extra  string
		resume bool
	}{
		{"", true},
		{"session_tickets = true\n", true},
		{"session_tickets = false\n", false},
	} {
		ts, pki := startTLS(t, root, tc.extra+ktlsAuto)
		url := "https://localhost:" + portOf(ts.addr) + "/alpha.txt"
		for _, h2 := range []bool{false, true} {
			cache := tls.NewLRUClientSessionCache(8)
			for i := 0; i < 2; i++ {
				c := pki.client(cache)
				if h2 {
					c = &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
						TLSClientConfig: &tls.Config{RootCAs: pki.pool, ServerName: "localhost", ClientSessionCache: cache}}}
				}
				_, _, resp := getSHA(t, c, url)
				if want := tc.resume && i == 1; resp.TLS.DidResume != want || resp.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] {
					t.Errorf("%q, HTTP/%d, connection %d: resumed %v, want %v", tc.extra, resp.ProtoMajor, i, resp.TLS.DidResume, want)
				}
				c.CloseIdleConnections()
			}
		}
	}
}

// TestTLSKeepAlive: many responses on one connection (small, large,
// ranges past 1 MiB, sidecars, HEAD, 404), pipelined, each checked.
func TestTLSKeepAlive(t *testing.T) {
	root := siteRoot(t)
	big, _ := linkBig(t, root, "big.bin")
	disk, _ := os.ReadFile(big)
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")
	conn, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(scale(60 * time.Second)))
	r := bufio.NewReaderSize(conn, 64<<10)
	type want struct {
		method string
		status int
		body   []byte
	}
	reqs := []struct {
		raw string
		w   want
	}{
		{get("/alpha.txt"), want{"GET", 200, []byte("abcdefghijklmnopqrstuvwxyz")}},
		{get("/big.bin", "Range: bytes=3000000-5999999\r\n"), want{"GET", 206, disk[3000000:6000000]}},
		{get("/app.js", "Accept-Encoding: br\r\n"), want{"GET", 200, []byte("BROTLI-BYTES")}},
		{"HEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\n", want{"HEAD", 200, nil}},
		{get("/missing"), want{"GET", 404, nil}},
		{get("/big.bin"), want{"GET", 200, disk}},
		{get("/alpha.txt", "Range: bytes=0-2\r\n"), want{"GET", 206, []byte("abc")}},
	}
	// Pipelined: everything written before anything is read.
	go func() {
		for _, q := range reqs {
			io.WriteString(conn, q.raw)
		}
	}()
	for i, q := range reqs {
		resp, err := http.ReadResponse(r, &http.Request{Method: q.w.method})
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("response %d body: %v", i, err)
		}
		if resp.StatusCode != q.w.status || (q.w.body != nil && string(body) != string(q.w.body)) {
			t.Errorf("response %d: status %d, %d bytes; want %d, %d bytes", i, resp.StatusCode, len(body), q.w.status, len(q.w.body))
		}
	}
}

// TestTLSCurlSuites: curl (OpenSSL) downloads with each TLS 1.3 suite.
func TestTLSCurlSuites(t *testing.T) {
	curl := testtool.Require(t, "curl")
	root := siteRoot(t)
	_, want := linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")
	url := "https://localhost:" + portOf(ts.addr) + "/big.bin"
	for _, suite := range []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"} {
		out := filepath.Join(t.TempDir(), "got")
		cmd := exec.Command(curl, "-sS", "--fail", "--tlsv1.3", "--tls13-ciphers", suite, "--cacert", pki.caFile,
			"--resolve", "localhost:"+portOf(ts.addr)+":127.0.0.1", "-o", out, "-w", "%{ssl_verify_result}", url)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("curl %s: %v\n%s", suite, err, b)
		}
		if got := sha256File(t, out); got != want {
			t.Errorf("curl %s: sha256 %s, want %s", suite, got, want)
		}
	}
}

// TestTLSOpenSSLKeyUpdate: openssl s_client asks for a KeyUpdate between
// two requests on one connection ("K": update_requested); both responses
// must arrive, so the server updated its read key and answered with its
// own KeyUpdate before switching keys.
func TestTLSOpenSSLKeyUpdate(t *testing.T) {
	openssl := testtool.Require(t, "openssl")
	root := siteRoot(t)
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")
	for _, suite := range []string{"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"} {
		cmd := exec.Command(openssl, "s_client", "-connect", ts.addr, "-servername", "localhost", "-tls1_3",
			"-ciphersuites", suite, "-CAfile", pki.caFile, "-crlf", "-verify_return_error")
		stdin, _ := cmd.StdinPipe()
		var out strings.Builder
		var mu sync.Mutex
		cmd.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		seen := func(s string, n int) bool {
			return waitFor(scale(10*time.Second), func() bool { mu.Lock(); defer mu.Unlock(); return strings.Count(out.String(), s) >= n })
		}
		if !seen("Verify return code: 0", 1) {
			t.Fatalf("%s: no verified handshake:\n%s", suite, out.String())
		}
		io.WriteString(stdin, "GET /alpha.txt HTTP/1.1\nHost: localhost\n\n")
		if !seen("abcdefghijklmnopqrstuvwxyz", 1) {
			t.Fatalf("%s: first response missing:\n%s", suite, out.String())
		}
		io.WriteString(stdin, "K\n")
		seen("KEYUPDATE", 1)
		io.WriteString(stdin, "GET /docs/index.html HTTP/1.1\nHost: localhost\n\n")
		if !seen("docs index", 1) {
			t.Errorf("%s: no response after KeyUpdate:\n%s", suite, out.String())
		}
		stdin.Close()
		cmd.Wait()
	}
	if ts.Stats().TLSKeyUpdates < 3 {
		t.Errorf("KeyUpdates counted: %d, want 3", ts.Stats().TLSKeyUpdates)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// TestTLSAutoWithoutKTLS: on a kernel without kTLS, ktls = "auto" serves
// everything in userspace and says so once, at start.
func TestTLSAutoWithoutKTLS(t *testing.T) {
	if vmtest.InVM() || hostHasKTLS() {
		t.Skip("this kernel has kernel TLS")
	}
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	pki := newPKI(t, t.TempDir(), "localhost")
	var logs syncBuffer
	ts := startLog(t, fmt.Sprintf("root = %q\n[[sites]]\ndomain = \"localhost\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n[kernel]\nktls = \"auto\"\n",
		root, root, pki.certFile, pki.keyFile), &logs)
	c := pki.client(nil)
	for i := 0; i < 3; i++ {
		if _, n, _ := getSHA(t, c, "https://localhost:"+portOf(ts.addr)+"/big.bin"); n != 100<<20 {
			t.Fatalf("download %d: %d bytes", i, n)
		}
	}
	if n := strings.Count(logs.String(), "kernel TLS unavailable; TLS is served from userspace"); n != 1 {
		t.Errorf("the userspace fallback was announced %d times, want once:\n%s", n, logs.String())
	}
	if st := ts.Stats(); st.Promotions != 0 || st.PromoteFailures != 0 {
		t.Errorf("promotions %d, failures %d: nothing should be tried without kTLS", st.Promotions, st.PromoteFailures)
	}
}

func hostHasKTLS() bool { return new(preflight.Prober).TLSULP() == nil }

// TestTLS12: a site with min_version = "1.2" serves TLS 1.2 clients from
// userspace with the 1.2 record layer (explicit nonces for AES-GCM, none
// for ChaCha20); sites without it refuse them; 1.2 sessions do not resume.
func TestTLS12(t *testing.T) {
	root := siteRoot(t)
	_, want := linkBig(t, root, "big.bin")
	dir := t.TempDir()
	old := newPKI(t, dir, "old.example")
	modern := newPKI(t, dir, "new.example")
	ts := start(t, fmt.Sprintf(`
[[sites]]
domain = "old.example"
default = true # answers the 127.0.0.1 the requests name
root = %q
[sites.tls]
cert = %q
key = %q
min_version = "1.2"
[[sites]]
domain = "new.example"
root = %q
[sites.tls]
cert = %q
key = %q
[kernel]
ktls = "auto"
`, root, old.certFile, old.keyFile, root, modern.certFile, modern.keyFile))
	cache := tls.NewLRUClientSessionCache(8)
	client := func(pki *testPKI, name string) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, ServerName: name,
			MaxVersion: tls.VersionTLS12, ClientSessionCache: cache}}}
	}
	for i := 0; i < 2; i++ {
		c := client(old, "old.example")
		got, n, resp := getSHA(t, c, "https://127.0.0.1:"+portOf(ts.addr)+"/big.bin")
		if got != want || n != 100<<20 || resp.TLS.Version != tls.VersionTLS12 || resp.TLS.DidResume {
			t.Fatalf("TLS 1.2 download %d: %d bytes, version %x, resumed %v, sha ok %v", i, n, resp.TLS.Version, resp.TLS.DidResume, got == want)
		}
		c.CloseIdleConnections()
	}
	if _, err := client(modern, "new.example").Get("https://127.0.0.1:" + portOf(ts.addr) + "/alpha.txt"); err == nil {
		t.Error("a TLS 1.3-only site accepted a TLS 1.2 client")
	}
	// TLS 1.3 clients of the 1.2 site still get 1.3.
	c13 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: old.pool, ServerName: "old.example"}}}
	if _, _, resp := getSHA(t, c13, "https://127.0.0.1:"+portOf(ts.addr)+"/alpha.txt"); resp.TLS.Version != tls.VersionTLS13 {
		t.Errorf("version %x for a TLS 1.3 client", resp.TLS.Version)
	}

	// Each TLS 1.2 suite of the site, forced in turn with curl
	// (OpenSSL's TLS 1.2, another implementation than Go's).
	t.Run("curl suites", func(t *testing.T) {
		curl := testtool.Require(t, "curl")
		for _, cipher := range []string{"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"} {
			out := filepath.Join(t.TempDir(), "got")
			b, err := exec.Command(curl, "-sS", "--fail", "--tlsv1.2", "--tls-max", "1.2", "--ciphers", cipher,
				"--cacert", old.caFile, "--resolve", "old.example:"+portOf(ts.addr)+":127.0.0.1",
				"-o", out, "https://old.example:"+portOf(ts.addr)+"/big.bin").CombinedOutput()
			if err != nil {
				t.Fatalf("curl %s: %v\n%s", cipher, err, b)
			}
			if got := sha256File(t, out); got != want {
				t.Errorf("curl TLS 1.2 %s: sha256 %s", cipher, got)
			}
		}
	})
}

// TestTLSSNIAndReload: each site gets its own certificate by SNI; after
// the files change, ReloadCertificates (SIGHUP) serves the new one to new
// handshakes while an open connection goes on.
func TestTLSSNIAndReload(t *testing.T) {
	root := siteRoot(t)
	dir := t.TempDir()
	a := newPKI(t, dir, "a.example")
	b := newPKI(t, dir, "b.example")
	ts := start(t, fmt.Sprintf(`
[[sites]]
domain = "a.example"
root = %q
[sites.tls]
cert = %q
key = %q
[[sites]]
domain = "b.example"
root = %q
[sites.tls]
cert = %q
key = %q
[kernel]
ktls = "auto"
`, root, a.certFile, a.keyFile, root, b.certFile, b.keyFile))
	leaf := func(name string, pool *x509.CertPool) (*tls.Conn, error) {
		return tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pool, ServerName: name})
	}
	for _, tt := range []struct {
		name string
		pki  *testPKI
	}{{"a.example", a}, {"b.example", b}} {
		c, err := leaf(tt.name, tt.pki.pool)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := c.ConnectionState().PeerCertificates[0].Subject.CommonName; got != tt.name {
			t.Errorf("SNI %s got the certificate of %s", tt.name, got)
		}
		c.Close()
	}
	// An open connection, then new files for a.example and a reload.
	open, err := leaf("a.example", a.pool)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	a2 := newPKI(t, t.TempDir(), "a.example")
	copyFile(t, a2.certFile, a.certFile)
	copyFile(t, a2.keyFile, a.keyFile)
	if err := ts.ReloadCertificates(); err != nil {
		t.Fatal(err)
	}
	if _, err := leaf("a.example", a.pool); err == nil {
		t.Error("a new handshake still got the old certificate")
	}
	c, err := leaf("a.example", a2.pool)
	if err != nil {
		t.Fatalf("new certificate not served: %v", err)
	}
	c.Close()
	io.WriteString(open, "GET /alpha.txt HTTP/1.1\r\nHost: a.example\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(open), &http.Request{Method: "GET"})
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("the connection open across the reload: %v", err)
	}
	// A broken file keeps the old certificates in use.
	os.WriteFile(a.keyFile, []byte("not a key"), 0o600)
	if err := ts.ReloadCertificates(); err == nil || !strings.Contains(err.Error(), a.certFile) {
		t.Errorf("reload of a broken key: %v", err)
	}
	if c, err := leaf("a.example", a2.pool); err != nil {
		t.Errorf("after a failed reload: %v", err)
	} else {
		c.Close()
	}
}

// TestTLSSlowReaders: TLS clients that stop reading a large file hold at
// most a batch of sealed records each, never the file.
func TestTLSSlowReaders(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")
	before := heapInUse()
	const clients = 16
	for i := 0; i < clients; i++ {
		raw, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		raw.(*net.TCPConn).SetReadBuffer(8192)
		c := tls.Client(raw, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, get("/big.bin"))
	}
	var last int64
	waitFor(scale(5*time.Second), func() bool {
		time.Sleep(100 * time.Millisecond)
		cur := ts.Stats().TLSUserBytes
		same := cur == last && cur > 0
		last = cur
		return same
	})
	grew := int64(heapInUse()) - int64(before)
	t.Logf("heap grew %d KiB for %d stalled TLS downloads", grew>>10, clients)
	if grew > clients*(512<<10) {
		t.Errorf("heap grew %d MiB for %d stalled TLS downloads", grew>>20, clients)
	}
}

// TestSelfSigned: serve --self-signed speaks TLS with an in-memory
// certificate for localhost and the loopback addresses.
func TestSelfSigned(t *testing.T) {
	root := siteRoot(t)
	ts := startFlags(t, fmt.Sprintf("root = %q\n", root), nil, "self-signed", "true")
	conn, err := tls.Dial("tcp", ts.addr, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("certificate for %s: %v", name, err)
		}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	resp, err := c.Get("https://" + ts.addr + "/alpha.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("status %d, body %q", resp.StatusCode, b)
	}
}
