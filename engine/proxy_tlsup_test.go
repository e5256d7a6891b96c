package engine_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/internal/nginxtest"
)

// clientPKI makes a CA and a client certificate (clientAuth) it signs, in
// dir: the CA's file (for nginx's ssl_client_certificate) and the
// certificate's and key's.
func clientPKI(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "engine test client CA"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "edge-1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "client-ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writePEM(t, caFile, "CERTIFICATE", caDER)
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return caFile, certFile, keyFile
}

// freeAddr is a 127.0.0.1 address no one listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestProxyUpstreamTLS: routes speak TLS to a real TLS server (nginx):
// a 100 MiB file arrives byte-exact and small requests reuse pooled TLS
// connections; the upstream's certificate is verified (against the
// route's ca, for tls_server_name, or for the upstream's IP address) and
// a failed verification is a 502 that says why in the log, never a
// response from an unverified upstream; a client certificate is shown
// to an upstream that asks for one.
func TestProxyUpstreamTLS(t *testing.T) {
	root := t.TempDir()
	os.Chmod(root, 0o755)
	_, sum := linkBig(t, root, "big.bin")
	writeFile(t, root+"/small.txt", "small file over TLS")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	up := newPKI(t, dir, "origin.test")
	clientCA, clientCert, clientKey := clientPKI(t, dir)
	mtls := freeAddr(t)
	addr := nginxtest.Start(t, fmt.Sprintf(`
    sendfile on;
    keepalive_timeout 30s;
    keepalive_requests 1000000;
    ssl_certificate %[3]q;
    ssl_certificate_key %[4]q;
    server {
        listen %%[2]s ssl;
        root %[1]q;
    }
    server {
        listen %[5]s ssl;
        root %[1]q;
        ssl_verify_client on;
        ssl_client_certificate %[6]q;
        keepalive_timeout 300ms;
    }`, root, "", up.certFile, up.keyFile, mtls, clientCA))

	route := func(upstream, extra string) string {
		return proxyConfig(t, "/", "upstream_tls = true\n"+extra, upstream)
	}
	get := func(ts *testServer, path string) (int, string) {
		t.Helper()
		resp, err := http.Get(ts.url + path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer resp.Body.Close()
		h := sha256.New()
		io.Copy(h, resp.Body)
		return resp.StatusCode, hex.EncodeToString(h.Sum(nil))
	}
	small := sha256.Sum256([]byte("small file over TLS"))

	t.Run("verified by ca, for tls_server_name", func(t *testing.T) {
		ts := start(t, route(addr, fmt.Sprintf("ca = %q\ntls_server_name = \"origin.test\"\n", up.caFile)))
		if st, got := get(ts, "/big.bin"); st != 200 || got != sum {
			t.Fatalf("100 MiB through TLS: status %d, digest match %v", st, got == sum)
		}
		for range 50 {
			if st, got := get(ts, "/small.txt"); st != 200 || got != hex.EncodeToString(small[:]) {
				t.Fatalf("small: status %d, digest match %v", st, got == hex.EncodeToString(small[:]))
			}
		}
		st := ts.Stats()
		if st.ProxyOpened > 2 || st.ProxyReused < 49 {
			t.Fatalf("51 sequential requests opened %d TLS connections and reused %d times; want them pooled", st.ProxyOpened, st.ProxyReused)
		}
	})
	t.Run("HTTP/2 and HTTP/3 clients", func(t *testing.T) {
		pki := newPKI(t, t.TempDir(), "localhost")
		ts := start(t, tlsProxyConfig(pki, addr, "")+fmt.Sprintf("upstream_tls = true\nca = %q\ntls_server_name = \"origin.test\"\n", up.caFile))
		h3, _ := h3Client(t, pki)
		for _, c := range []struct {
			proto  int
			client *http.Client
		}{{2, h2Client(pki)}, {3, h3}} {
			resp, err := c.client.Get("https://localhost:" + portOf(ts.addr) + "/big.bin")
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != c.proto || hex.EncodeToString(h.Sum(nil)) != sum {
				t.Fatalf("HTTP/%d: status %d, HTTP/%d, %d bytes, err %v", c.proto, resp.StatusCode, resp.ProtoMajor, n, err)
			}
		}
	})
	t.Run("verified for the upstream's IP address", func(t *testing.T) {
		ts := start(t, route(addr, fmt.Sprintf("ca = %q\n", up.caFile)))
		if st, _ := get(ts, "/small.txt"); st != 200 {
			t.Fatalf("status %d; the certificate names 127.0.0.1", st)
		}
	})
	for _, tc := range []struct{ name, extra, why string }{
		{"system roots", "", "certificate signed by unknown authority"},
		{"another name", fmt.Sprintf("ca = %q\ntls_server_name = \"other.test\"\n", up.caFile), "not other.test"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			var log syncBuffer
			ts := startLog(t, route(addr, tc.extra), &log)
			if st, _ := get(ts, "/small.txt"); st != 502 {
				t.Fatalf("status %d from an upstream whose certificate does not verify; want 502", st)
			}
			if !strings.Contains(log.String(), tc.why) {
				t.Fatalf("the log does not say why (%q):\n%s", tc.why, log.String())
			}
			if f := ts.Stats().ProxyFailed; f == 0 {
				t.Fatal("the failed handshake is not counted as a failed upstream connection")
			}
		})
	}
	t.Run("client certificate", func(t *testing.T) {
		without := start(t, route(mtls, fmt.Sprintf("ca = %q\n", up.caFile)))
		if st, _ := get(without, "/small.txt"); st != 400 {
			t.Fatalf("without a client certificate nginx answered %d through the proxy; want its 400", st)
		}
		with := start(t, route(mtls, fmt.Sprintf("ca = %q\ntls_client_cert = %q\ntls_client_key = %q\n", up.caFile, clientCert, clientKey)))
		if st, got := get(with, "/small.txt"); st != 200 || got != hex.EncodeToString(small[:]) {
			t.Fatalf("with the client certificate: status %d, digest match %v", st, got == hex.EncodeToString(small[:]))
		}
		// This upstream closes idle connections after 300 ms: the pooled
		// TLS connection it closed is seen closed (through the bridge)
		// and never handed a request that would fail.
		for range 3 {
			time.Sleep(600 * time.Millisecond)
			if st, _ := get(with, "/small.txt"); st != 200 {
				t.Fatalf("after the upstream closed the idle connection: status %d", st)
			}
		}
		if n := with.Stats().ProxyOpened; n != 4 {
			t.Fatalf("opened %d TLS connections for 4 requests 600 ms apart (the upstream closes them after 300 ms); want 4", n)
		}
	})
	t.Run("upstream down", func(t *testing.T) {
		ts := start(t, route(freeAddr(t), fmt.Sprintf("ca = %q\n", up.caFile)))
		if st, _ := get(ts, "/small.txt"); st != 502 {
			t.Fatalf("status %d with nothing listening; want 502", st)
		}
	})
}
