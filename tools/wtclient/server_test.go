package main

// A stand-in for the engine's diagnostics endpoint, on webtransport-go's
// own server, so that the client is proved against webtransport-go before
// (and independently of) the engine's server. It speaks the modes of
// docs/WEBTRANSPORT.md closely enough for the client's checks, plus a few
// test-only knobs to make it misbehave on purpose.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
	"github.com/zeebo/blake3"
)

const diagPath = "/.well-known/engine/diagnostics"

type testServer struct {
	t      *testing.T
	addr   string // host:port
	caFile string // PEM of the self-signed certificate

	maxSessions atomic.Int64 // 0: no limit; else 503 with Retry-After: 1 beyond it (atomic: a test sets it while the server runs)
	handled     atomic.Int64 // session requests that reached the handler, admitted or not
	active      atomic.Int64

	mu       sync.Mutex
	origins  []string // the Origin of each CONNECT, "" when absent
	protos   []string // the :protocol of each CONNECT
	sessErrs []error  // how each session ended, as the server saw it
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	cert, pemBytes := selfSigned(t)
	ts := &testServer{t: t, caFile: filepath.Join(t.TempDir(), "ca.pem")}
	if err := os.WriteFile(ts.caFile, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = udp.LocalAddr().String()
	s := &webtransport.Server{
		H3: &http3.Server{
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{http3.NextProtoH3}},
		},
		// The engine checks Origin against allowed_origins; this server
		// takes any and records it.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	mux := http.NewServeMux()
	mux.HandleFunc(diagPath, func(w http.ResponseWriter, r *http.Request) { ts.handle(s, w, r) })
	s.H3.Handler = mux
	served := make(chan error, 1)
	go func() { served <- s.Serve(udp) }()
	t.Cleanup(func() {
		s.Close()
		<-served
		udp.Close()
	})
	return ts
}

func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "wtclient test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	var pemBuf bytes.Buffer
	pemBuf.WriteString("-----BEGIN CERTIFICATE-----\n")
	b64 := base64.StdEncoding.EncodeToString(der)
	for len(b64) > 64 {
		pemBuf.WriteString(b64[:64] + "\n")
		b64 = b64[64:]
	}
	pemBuf.WriteString(b64 + "\n-----END CERTIFICATE-----\n")
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pemBuf.Bytes()
}

func (ts *testServer) url(query string) string {
	return "https://" + ts.addr + diagPath + "?" + query
}

func (ts *testServer) handle(s *webtransport.Server, w http.ResponseWriter, r *http.Request) {
	ts.mu.Lock()
	ts.origins = append(ts.origins, r.Header.Get("Origin"))
	ts.protos = append(ts.protos, r.Proto)
	ts.mu.Unlock()

	ts.handled.Add(1)
	q := r.URL.Query()
	mode := q.Get("mode")
	if limit := ts.maxSessions.Load(); limit > 0 {
		if ts.active.Add(1) > limit {
			ts.active.Add(-1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		defer ts.active.Add(-1)
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(q.Get(k), 10, 64); return n }

	var run func(*webtransport.Session)
	switch mode {
	case "echo":
		run = func(sess *webtransport.Session) { ts.echo(sess, num("limit"), int(num("maxdg"))) }
	case "source":
		body := make([]byte, num("bytes"))
		fillPattern(body, 0)
		if q.Has("file") { // a "file": not the pattern, with its digest
			body = bytes.Repeat([]byte("a file's bytes, not the pattern\n"), 1000)
			sum := blake3.Sum256(body)
			if q.Get("file") == "baddigest" {
				sum[0] ^= 1
			}
			w.Header().Set("Repr-Digest", "blake3=:"+base64.StdEncoding.EncodeToString(sum[:])+":")
		}
		w.Header().Set("Engine-Source-Bytes", strconv.Itoa(len(body)+int(num("lie"))))
		if q.Has("flip") {
			body[num("flip")] ^= 0x80
		}
		run = func(sess *webtransport.Session) {
			// hold=N: keep the session (and its slot) until N session
			// requests have reached the handler, so that sessions dialled
			// at once overlap however fast each one would finish.
			for deadline := time.Now().Add(10 * time.Second); ts.handled.Load() < num("hold") && time.Now().Before(deadline); {
				time.Sleep(2 * time.Millisecond)
			}
			ts.source(sess, body)
		}
	case "sink":
		run = ts.sink
	case "datagrams":
		size := int(num("size"))
		w.Header().Set("Engine-Datagram-Bytes", strconv.Itoa(size))
		run = func(sess *webtransport.Session) { ts.datagrams(sess, num("count"), size, q.Has("bad")) }
	case "close": // close the session after a while, as a limit would
		after := time.Duration(num("after")) * time.Millisecond
		run = func(sess *webtransport.Session) {
			time.Sleep(after)
			sess.CloseWithError(webtransport.SessionErrorCode(num("code")), q.Get("msg"))
		}
	case "idle", "fin": // do nothing (fin: see below): no stream read, none opened
		run = func(*webtransport.Session) {}
	case "closemid": // close the session once a stream has brought 100 kB
		run = func(sess *webtransport.Session) {
			str, err := sess.AcceptStream(context.Background())
			if err != nil {
				return
			}
			io.CopyN(io.Discard, str, 100000)
			sess.CloseWithError(0x102, "")
		}
	case "refuse": // reset every stream the client opens with 0x104
		run = func(sess *webtransport.Session) {
			for {
				str, err := sess.AcceptStream(context.Background())
				if err != nil {
					return
				}
				str.CancelRead(0x104)
				str.CancelWrite(0x104)
			}
		}
	default:
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	sess, err := s.Upgrade(w, r)
	if err != nil {
		ts.t.Logf("upgrade: %v", err)
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if mode == "fin" { // finish the CONNECT stream without the capsule
		run = func(*webtransport.Session) {
			time.Sleep(100 * time.Millisecond)
			w.(http3.HTTPStreamer).HTTPStream().Close()
		}
	}
	go run(sess)
	<-sess.Context().Done()
	_, err = sess.OpenStream() // the error the session ended with
	ts.mu.Lock()
	ts.sessErrs = append(ts.sessErrs, err)
	ts.mu.Unlock()
}

func (ts *testServer) echo(sess *webtransport.Session, limit int64, maxdg int) {
	var total atomic.Int64
	over := func(n int) {
		if limit > 0 && total.Add(int64(n)) > limit {
			sess.CloseWithError(0x102, "max_bytes_per_session")
		}
	}
	go func() {
		for {
			b, err := sess.ReceiveDatagram(context.Background())
			if err != nil {
				return
			}
			if maxdg > 0 && len(b) > maxdg {
				sess.CloseWithError(0x103, "datagram too large")
				return
			}
			over(len(b))
			sess.SendDatagram(b)
		}
	}()
	for {
		str, err := sess.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := str.Read(buf)
				if n > 0 {
					over(n)
					if _, werr := str.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err == io.EOF {
					str.Close()
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (ts *testServer) source(sess *webtransport.Session, body []byte) {
	str, err := sess.OpenUniStreamSync(context.Background())
	if err != nil {
		return
	}
	str.Write(body)
	str.Close()
}

func (ts *testServer) sink(sess *webtransport.Session) {
	for {
		str, err := sess.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go func() {
			h := blake3.New()
			n, err := io.Copy(h, str)
			if err != nil {
				return
			}
			fmt.Fprintf(str, "%d %x\n", n, h.Sum(nil))
			str.Close()
		}()
	}
}

// datagrams sends count datagrams of size bytes, 1 ms apart, then the line.
// With bad, it also sends a corrupt one, a duplicate and one out of range.
func (ts *testServer) datagrams(sess *webtransport.Session, count int64, size int, bad bool) {
	for seq := range uint64(count) {
		d := makeDatagram(seq, size)
		if bad && seq == 3 {
			d[size-1] ^= 1
		}
		sess.SendDatagram(d)
		if bad && seq == 4 {
			sess.SendDatagram(d)
		}
		time.Sleep(time.Millisecond)
	}
	if bad {
		sess.SendDatagram(makeDatagram(uint64(count), size))
	}
	str, err := sess.OpenUniStreamSync(context.Background())
	if err != nil {
		return
	}
	fmt.Fprintf(str, "%d %d\n", count, size)
	str.Close()
}

// sessionErrs returns how the server's sessions ended, once n have.
func (ts *testServer) sessionErrs(n int) []error {
	for range 100 {
		ts.mu.Lock()
		errs := append([]error(nil), ts.sessErrs...)
		ts.mu.Unlock()
		if len(errs) >= n {
			return errs
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.t.Fatalf("fewer than %d sessions ended on the server", n)
	return nil
}
