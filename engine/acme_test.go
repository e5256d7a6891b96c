package engine_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"golang.org/x/crypto/ocsp"

	"github.com/mediaship/engine/engine/acme"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/internal/selfsigned"
	"github.com/mediaship/engine/internal/testtool"
)

// Pebble, Let's Encrypt's ACME test server, and its challenge test server
// as the DNS that Pebble resolves every name with (to 127.0.0.1): a real
// CA over loopback that validates each challenge against the engine.
// .ci/run installs both with go install at testtool.PebbleVersion.

// pebbleCA is a running Pebble.
type pebbleCA struct {
	t        *testing.T
	dir      string
	dirURL   string // the ACME directory
	mgmt     string // the management API (roots, intermediates)
	caRoot   string // PEM file of the root of Pebble's own HTTPS certificate
	dns      string // the DNS server Pebble asks
	httpPort int    // where Pebble validates http-01
	tlsPort  int    // where Pebble validates tls-alpn-01
	validity int    // certificate lifetime in seconds; 0: Pebble's default
	ocspURL  string // written into certificates; "" for none
	rsa      bool   // RSA CA keys (Pebble exports only those); else ECDSA

	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *syncBuffer
	port int // the ACME port
	mp   int // the management port

	// The engine reaches Pebble through a gate on gatePort, a TCP
	// forwarder that down closes (connections refused) and up opens
	// again: a CA that is down, without losing Pebble's state. Pebble
	// writes its URLs with the Host it was asked at, so every request
	// of the engine's goes through the gate.
	gatePort int
	gate     net.Listener
}

// up opens the gate to Pebble.
func (p *pebbleCA) up() {
	t := p.t
	t.Helper()
	var ln net.Listener
	var err error
	for try := 0; try < 50; try++ {
		if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p.gatePort)); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.gate = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
				if err != nil {
					return
				}
				defer u.Close()
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, u)
			}()
		}
	}()
}

// down closes the gate: the engine's connections to the CA are refused.
func (p *pebbleCA) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		p.gate.Close()
		p.gate = nil
	}
}

// freeTCPPort returns a TCP port free on 127.0.0.1 now (and on UDP,
// for the engine's HTTP/3 on the same port).
func freeTCPPort(t *testing.T) int {
	t.Helper()
	handedMu.Lock()
	defer handedMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		ln.Close()
		if err == nil {
			u.Close()
			if !handed[port] { // a port closed again may come back: hand each out once
				handed[port] = true
				return port
			}
		}
	}
}

var (
	handedMu sync.Mutex
	handed   = map[int]bool{}
)

// startDNS runs pebble-challtestsrv as a DNS server answering every A
// query with 127.0.0.1 and no AAAA, and returns its address.
func startDNS(t *testing.T) string {
	t.Helper()
	bin := testtool.Require(t, "pebble-challtestsrv")
	for try := 0; try < 5; try++ {
		addr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
		cmd := exec.Command(bin, "-dnsserver", addr, "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "",
			"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "", "-management", fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)))
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if waitFor(scale(5*time.Second), func() bool {
			return strings.Contains(out.String(), "Starting challenge servers") || strings.Contains(out.String(), "DNS")
		}) {
			time.Sleep(100 * time.Millisecond)
			if cmd.ProcessState == nil {
				return addr
			}
		}
		t.Logf("challtestsrv: %s", out.String())
	}
	t.Fatal("pebble-challtestsrv did not start")
	return ""
}

// newPebble prepares a Pebble validating on the given ports; start runs it.
func newPebble(t *testing.T, dns string, httpPort, tlsPort int) *pebbleCA {
	t.Helper()
	dir := t.TempDir()
	cert, err := selfsigned.New("pebble test", 24*time.Hour, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, _ := selfsigned.PEM(cert)
	writeFile(t, filepath.Join(dir, "cert.pem"), string(certPEM))
	writeFile(t, filepath.Join(dir, "key.pem"), string(keyPEM))
	return &pebbleCA{t: t, dir: dir, caRoot: filepath.Join(dir, "cert.pem"), dns: dns,
		httpPort: httpPort, tlsPort: tlsPort, port: freeTCPPort(t), mp: freeTCPPort(t), gatePort: freeTCPPort(t)}
}

// start runs Pebble (again, after stop: a new CA, with a new root).
func (p *pebbleCA) start() {
	t := p.t
	t.Helper()
	bin := testtool.Require(t, "pebble")
	profile := map[string]any{"description": "test", "validityPeriod": 90 * 24 * 3600}
	if p.validity > 0 {
		profile["validityPeriod"] = p.validity
	}
	conf := map[string]any{"pebble": map[string]any{
		"listenAddress":                  fmt.Sprintf("127.0.0.1:%d", p.port),
		"managementListenAddress":        fmt.Sprintf("127.0.0.1:%d", p.mp),
		"certificate":                    filepath.Join(p.dir, "cert.pem"),
		"privateKey":                     filepath.Join(p.dir, "key.pem"),
		"httpPort":                       p.httpPort,
		"tlsPort":                        p.tlsPort,
		"ocspResponderURL":               p.ocspURL,
		"externalAccountBindingRequired": false,
		"retryAfter":                     map[string]int{"authz": 1, "order": 1},
		"keyAlgorithm":                   "ecdsa",
		"profiles":                       map[string]any{"default": profile},
	}}
	if p.rsa {
		conf["pebble"].(map[string]any)["keyAlgorithm"] = "rsa"
	}
	b, _ := json.Marshal(conf)
	writeFile(t, filepath.Join(p.dir, "pebble.json"), string(b))
	cmd := exec.Command(bin, "-config", filepath.Join(p.dir, "pebble.json"), "-dnsserver", p.dns)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.cmd, p.log = cmd, log
	p.mu.Unlock()
	t.Cleanup(p.stop)
	p.dirURL = fmt.Sprintf("https://localhost:%d/dir", p.port)
	p.mgmt = fmt.Sprintf("https://localhost:%d", p.mp)
	if !waitFor(scale(10*time.Second), func() bool { return strings.Contains(log.String(), "Listening on") }) {
		t.Fatalf("pebble did not start: %s", log.String())
	}
	if !waitFor(scale(5*time.Second), func() bool { _, err := p.get("/dir", false); return err == nil }) {
		t.Fatalf("pebble does not answer: %s", log.String())
	}
	p.up()
	t.Cleanup(p.down)
}

// stop ends Pebble; its certificates stay valid for the clients that
// trust its root.
func (p *pebbleCA) stop() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// issued counts the certificates Pebble has issued since it started.
func (p *pebbleCA) issued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Count(p.log.String(), "Issued certificate serial")
}

func (p *pebbleCA) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// get fetches a path of the ACME server (mgmt: of the management API).
func (p *pebbleCA) get(path string, mgmt bool) ([]byte, error) {
	roots := x509.NewCertPool()
	pemBytes, err := os.ReadFile(p.caRoot)
	if err != nil {
		return nil, err
	}
	roots.AppendCertsFromPEM(pemBytes)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer c.CloseIdleConnections()
	base := fmt.Sprintf("https://localhost:%d", p.port)
	if mgmt {
		base = p.mgmt
	}
	resp, err := c.Get(base + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: %s", path, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// root returns the root that signs the certificates this Pebble issues.
func (p *pebbleCA) root() []byte {
	p.t.Helper()
	b, err := p.get("/roots/0", true)
	if err != nil {
		p.t.Fatal(err)
	}
	return b
}

// acmeTOML is the [acme] table for this Pebble.
func (p *pebbleCA) acmeTOML(storage string, challenges ...string) string {
	q := make([]string, len(challenges))
	for i, c := range challenges {
		q[i] = `"` + c + `"`
	}
	return fmt.Sprintf("[acme]\nemail = \"ops@example.com\"\nca = %q\nca_root = %q\nstorage = %q\nchallenges = [%s]\nagree = true\nrenew_interval = \"1s\"\n",
		fmt.Sprintf("https://localhost:%d/dir", p.gatePort), p.caRoot, storage, strings.Join(q, ", "))
}

// tlsGet fetches path from addr over TLS with SNI name, trusting only
// roots; it returns the body and the leaf certificate served.
func tlsGet(addr, name, path string, roots *x509.CertPool) ([]byte, *x509.Certificate, error) {
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2: false,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return leafAndBody(c.Get("https://" + name + path))
}

// leafAndBody reads a response: its body, the server's leaf certificate,
// and an error unless it was a 200.
func leafAndBody(resp *http.Response, err error) ([]byte, *x509.Certificate, error) {
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var leaf *x509.Certificate
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		leaf = resp.TLS.PeerCertificates[0]
	}
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return body, leaf, err
}

func pool(pems ...[]byte) *x509.CertPool {
	p := x509.NewCertPool()
	for _, b := range pems {
		p.AppendCertsFromPEM(b)
	}
	return p
}

// handshakeAlert returns the error of a TLS handshake with SNI name.
func handshakeErr(addr, name string) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err == nil {
		c.Close()
	}
	return err
}

// handshakeALPN returns the error of a TLS handshake offering protos.
func handshakeALPN(addr, name string, protos ...string) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: name, InsecureSkipVerify: true, NextProtos: protos})
	if err == nil {
		c.Close()
	}
	return err
}

// acmeSite writes a site root with a file and returns the root and the
// file's content.
func acmeSite(t *testing.T) (string, []byte) {
	root := t.TempDir()
	body := bytes.Repeat([]byte("verified bytes from an ACME certificate\n"), 5000)
	writeFile(t, filepath.Join(root, "file.txt"), string(body))
	return root, body
}

func serial(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	return c.SerialNumber.String()
}

// acmeConfig is an engine config serving root for name with an ACME
// certificate, on the TLS port Pebble validates.
func acmeConfig(p *pebbleCA, storage, root string, names []string, challenges ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen = \"127.0.0.1:%d\"\n[kernel]\nktls = \"auto\"\n", p.tlsPort)
	for _, n := range names {
		fmt.Fprintf(&b, "[[sites]]\ndomain = %q\nroot = %q\n[sites.tls]\nacme = true\n", n, root)
	}
	for _, c := range challenges {
		if c == "http-01" {
			fmt.Fprintf(&b, "[redirect_http]\nlisten = \"127.0.0.1:%d\"\n", p.httpPort)
			break
		}
	}
	b.WriteString(p.acmeTOML(storage, challenges...))
	return b.String()
}

// TestACMELifecycle runs a whole life against Pebble: issuance by
// TLS-ALPN-01 while serving (handshakes for the name refused with
// unrecognized_name until the certificate is there), a restart that
// reuses storage without a new order, a restart while the CA is down
// (the stored name served at once, the new one refused, preflight's
// report naming it and the error, then obtained when the CA is back).
func TestACMELifecycle(t *testing.T) {
	t.Parallel()
	dns := startDNS(t)
	p := newPebble(t, dns, freeTCPPort(t), freeTCPPort(t))
	p.start()
	root, body := acmeSite(t)
	storage := t.TempDir()
	logs := &syncBuffer{}
	t0 := time.Now()
	// d.example.com is a site without a certificate of its own yet.
	siteD := fmt.Sprintf("[[sites]]\ndomain = \"d.example.com\"\nroot = %q\n[acme]", root)
	srv := startLog(t, strings.Replace(acmeConfig(p, storage, root, []string{"a.example.com"}, "tls-alpn-01"), "[acme]", siteD, 1), logs)
	roots := pool(p.root())
	var got []byte
	var leaf *x509.Certificate
	var err error
	if !waitFor(scale(30*time.Second), func() bool {
		got, leaf, err = tlsGet(srv.addr, "a.example.com", "/file.txt", roots)
		return err == nil
	}) {
		t.Fatalf("no verified HTTPS response: %v\n%s", err, p.logText())
	}
	t.Logf("first verified HTTPS response %v after start; serial %s", time.Since(t0).Round(time.Millisecond), serial(leaf))
	if !bytes.Equal(got, body) {
		t.Fatalf("body differs")
	}
	if st := srv.Stats(); st.ACMEChallenges == 0 {
		t.Errorf("the CA's validations did not reach the engine's handshake: %+v", st)
	}
	if !strings.Contains(logs.String(), "no certificate for this name yet") {
		t.Errorf("no log line for the handshakes refused before the certificate came")
	}
	// A handshake offering acme-tls/1 alone, with no validation under
	// way, gets no certificate; one that offers it beside h2 is an
	// ordinary handshake and gets HTTP/2, never acme-tls/1.
	if c, err := tls.Dial("tcp", srv.addr, &tls.Config{ServerName: "a.example.com", InsecureSkipVerify: true, NextProtos: []string{"acme-tls/1"}}); err == nil {
		t.Errorf("an acme-tls/1 handshake with no challenge under way succeeded (ALPN %q)", c.ConnectionState().NegotiatedProtocol)
		c.Close()
	}
	// A flood of them logs certmagic's complaint once per 10 s, not
	// once per handshake; an unmanaged name gets no_application_protocol.
	for i := 0; i < 30; i++ {
		if c, err := tls.Dial("tcp", srv.addr, &tls.Config{ServerName: "a.example.com", InsecureSkipVerify: true, NextProtos: []string{"acme-tls/1"}}); err == nil {
			c.Close()
		}
	}
	if n := strings.Count(logs.String(), `msg="tls-alpn challenge"`); n > 1 {
		t.Errorf("31 acme-tls/1 handshakes logged certmagic's line %d times", n)
	}
	if err := handshakeALPN(srv.addr, "evil.example.com", "acme-tls/1"); err == nil || !strings.Contains(err.Error(), "no application protocol") {
		t.Errorf("acme-tls/1 for an unmanaged name: %v, want no_application_protocol", err)
	}
	if c, err := tls.Dial("tcp", srv.addr, &tls.Config{ServerName: "a.example.com", RootCAs: roots, NextProtos: []string{"acme-tls/1", "h2"}}); err != nil || c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Errorf("acme-tls/1 beside h2: %v", err)
	} else {
		c.Close()
	}
	firstSerial := serial(leaf)

	// A reload (SIGHUP) that turns on ACME for d.example.com: it is
	// obtained, the certificate obtained for a.example.com is kept (no
	// new order for it). A reload that changes more than certificates
	// is refused and changes nothing.
	issued0 := p.issued()
	two := acmeConfig(p, storage, root, []string{"a.example.com", "d.example.com"}, "tls-alpn-01")
	if err := srv.Reload(parseConfig(t, strings.Replace(two, "[kernel]\n", "[kernel]\nbulk_threshold = \"2MiB\"\n", 1))); err == nil || !strings.Contains(err.Error(), "kernel changed") {
		t.Errorf("a reload changing [kernel]: %v, want it refused naming kernel", err)
	}
	if err := srv.Reload(parseConfig(t, two)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if !waitFor(scale(30*time.Second), func() bool {
		_, _, err = tlsGet(srv.addr, "d.example.com", "/file.txt", roots)
		return err == nil
	}) {
		t.Fatalf("a name added by a reload was not obtained: %v", err)
	}
	if _, leaf, err = tlsGet(srv.addr, "a.example.com", "/file.txt", roots); err != nil || serial(leaf) != firstSerial {
		t.Errorf("after a reload a.example.com: %v, serial %s want %s", err, serial(leaf), firstSerial)
	}
	if n := p.issued() - issued0; n != 1 {
		t.Errorf("the reload made the CA issue %d certificates, want 1 (for the new name)", n)
	}
	srv.stop()

	// Restart: storage has the certificate; no new order.
	issued := p.issued()
	logs2 := &syncBuffer{}
	srv = startLog(t, acmeConfig(p, storage, root, []string{"a.example.com"}, "tls-alpn-01"), logs2)
	if got, leaf, err = tlsGet(srv.addr, "a.example.com", "/file.txt", roots); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("after a restart, the stored certificate is not served at once: %v", err)
	}
	if serial(leaf) != firstSerial {
		t.Errorf("after a restart the serial is %s, want the stored %s", serial(leaf), firstSerial)
	}
	time.Sleep(2 * time.Second)
	if n := p.issued(); n != issued {
		t.Errorf("a restart with the certificate in storage made the CA issue %d more", n-issued)
	}
	if strings.Contains(logs2.String(), "asking the CA") {
		t.Errorf("a restart with the certificate in storage asked the CA for one:\n%s", logs2.String())
	}
	srv.stop()

	// The CA is down at start: a.example.com is served from storage,
	// c.example.com is refused with a clear alert until the CA is back.
	p.down()
	logs3 := &syncBuffer{}
	cfg3 := acmeConfig(p, storage, root, []string{"a.example.com", "c.example.com"}, "tls-alpn-01")
	srv = startLog(t, cfg3, logs3)
	if _, _, err = tlsGet(srv.addr, "a.example.com", "/file.txt", roots); err != nil {
		t.Fatalf("with the CA down, the stored certificate is not served: %v", err)
	}
	err = handshakeErr(srv.addr, "c.example.com")
	if err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Fatalf("a name without a certificate: handshake error %v, want the unrecognized_name alert", err)
	}
	if !waitFor(scale(20*time.Second), func() bool { return strings.Contains(logs3.String(), "could not get a certificate") }) {
		t.Fatalf("no log line for the failed order:\n%s", logs3.String())
	}
	cfgFile := filepath.Join(t.TempDir(), "engine.toml")
	writeFile(t, cfgFile, strings.Replace(cfg3, "listen = ", "root = \""+root+"\"\nlisten = ", 1))
	rc, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	rep := acme.Report(rc)
	if len(rep) != 2 || rep[0].Name != "a.example.com" || rep[0].NotAfter.IsZero() ||
		rep[1].Name != "c.example.com" || !rep[1].NotAfter.IsZero() || rep[1].LastError == "" || rep[1].Missing == "" {
		t.Errorf("preflight's ACME report with the CA down: %+v", rep)
	}
	p.up()
	t.Log("CA back; certmagic retries after its first back-off (1 minute)")
	if !waitFor(scale(150*time.Second), func() bool {
		_, leaf, err = tlsGet(srv.addr, "c.example.com", "/file.txt", roots)
		return err == nil
	}) {
		t.Fatalf("c.example.com not served after the CA came back: %v\n%s", err, logs3.String())
	}
	if _, _, err = tlsGet(srv.addr, "a.example.com", "/file.txt", roots); err != nil {
		t.Errorf("a.example.com after c.example.com was obtained: %v", err)
	}
}

// TestACMEHTTP01Renewal: issuance by HTTP-01 answered on the
// [redirect_http] listener, a curl that trusts only Pebble's root
// receiving the file byte-exact, the listener's 308, and renewal of a
// short-lived certificate (Pebble issues 30-second ones here) while a
// keep-alive connection made under the old certificate goes on.
func TestACMEHTTP01Renewal(t *testing.T) {
	t.Parallel()
	curl := testtool.Require(t, "curl")
	dns := startDNS(t)
	p := newPebble(t, dns, freeTCPPort(t), freeTCPPort(t))
	p.validity = 30
	p.start()
	root, body := acmeSite(t)
	storage := t.TempDir()
	logs := &syncBuffer{}
	srv := startLog(t, acmeConfig(p, storage, root, []string{"b.example.com"}, "http-01"), logs)
	rootPEM := filepath.Join(t.TempDir(), "pebble-root.pem")
	writeFile(t, rootPEM, string(p.root()))
	out := filepath.Join(t.TempDir(), "out")
	url := fmt.Sprintf("https://b.example.com:%d/file.txt", p.tlsPort)
	var cerr []byte
	if !waitFor(scale(30*time.Second), func() bool {
		os.Remove(out)
		cmd := exec.Command(curl, "-sS", "--fail", "--cacert", rootPEM, "--resolve", fmt.Sprintf("b.example.com:%d:127.0.0.1", p.tlsPort), "-o", out, url)
		var err error
		cerr, err = cmd.CombinedOutput()
		return err == nil
	}) {
		t.Fatalf("curl trusting only Pebble's root got no response: %s\n%s", cerr, logs.String())
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, body) {
		t.Fatalf("curl received %d bytes that differ from the file's %d", len(got), len(body))
	}
	if st := srv.Stats(); st.ACMEChallenges == 0 {
		t.Errorf("the http-01 validations were not answered by the engine: %+v", st)
	}

	// The redirect listener sends the name's requests to https.
	c := dial(t, srv.RedirectAddr())
	c.send(fmt.Sprintf("GET /file.txt?x=1&y=%%20 HTTP/1.1\r\nHost: b.example.com:%d\r\n\r\n", p.httpPort))
	resp, _ := c.response("GET")
	if want := fmt.Sprintf("https://b.example.com:%d/file.txt?x=1&y=%%20", p.tlsPort); resp.StatusCode != 308 || resp.Header.Get("Location") != want {
		t.Errorf("redirect: %d Location %q, want 308 %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}

	// Renewal: a connection made under the first certificate stays up.
	roots := pool(p.root())
	var first *x509.Certificate
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "b.example.com"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, srv.addr)
		},
		IdleConnTimeout: time.Minute,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	fetch := func() (*http.Response, []byte) {
		t.Helper()
		resp, err := client.Get("https://b.example.com/file.txt")
		if err != nil {
			t.Fatalf("keep-alive client: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	r1, _ := fetch()
	first = r1.TLS.PeerCertificates[0]
	var leaf *x509.Certificate
	var err error
	if !waitFor(scale(60*time.Second), func() bool {
		_, leaf, err = tlsGet(srv.addr, "b.example.com", "/file.txt", roots)
		if err == nil {
			fetch() // keep the first connection alive meanwhile
		}
		return err == nil && serial(leaf) != serial(first)
	}) {
		t.Fatalf("no renewed certificate within 60 s of a 30 s one: %v\n%s", err, logs.String())
	}
	if !leaf.NotAfter.After(first.NotAfter) {
		t.Errorf("renewed certificate expires %v, not after the first's %v", leaf.NotAfter, first.NotAfter)
	}
	r2, b2 := fetch()
	if serial(r2.TLS.PeerCertificates[0]) != serial(first) || !bytes.Equal(b2, body) {
		t.Errorf("the connection made before the renewal did not go on: serial %s (first %s), %d bytes",
			serial(r2.TLS.PeerCertificates[0]), serial(first), len(b2))
	}
	if !strings.Contains(logs.String(), "renewal=true") {
		t.Errorf("no renewal logged:\n%s", logs.String())
	}
}

// ocspResponder answers OCSP requests for the certificates Pebble issues,
// signed with Pebble's intermediate key (from its management API): the
// responder a CA runs, for stapling.
func ocspResponder(t *testing.T, p *pebbleCA) (url string, asked *atomic.Int64) {
	t.Helper()
	asked = &atomic.Int64{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var der []byte
		if r.Method == http.MethodPost {
			der, _ = io.ReadAll(io.LimitReader(r.Body, 4096))
		} else if b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(r.URL.Path, "/")); err == nil {
			der = b
		}
		req, err := ocsp.ParseRequest(der)
		if err != nil {
			t.Logf("OCSP responder: %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, err.Error(), 400)
			return
		}
		issuerPEM, err1 := p.get("/intermediates/0", true)
		keyPEM, err2 := p.get("/intermediate-keys/0", true)
		if err1 != nil || err2 != nil {
			t.Logf("OCSP responder: %v %v", err1, err2)
			http.Error(w, "pebble", 500)
			return
		}
		ib, _ := pem.Decode(issuerPEM)
		issuer, err := x509.ParseCertificate(ib.Bytes)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		kb, _ := pem.Decode(keyPEM)
		key, err := parseKey(kb.Bytes)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		now := time.Now().Truncate(time.Minute)
		resp, err := ocsp.CreateResponse(issuer, issuer, ocsp.Response{
			Status: ocsp.Good, SerialNumber: req.SerialNumber,
			ThisUpdate: now.Add(-time.Minute), NextUpdate: now.Add(24 * time.Hour),
		}, key)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		asked.Add(1)
		w.Header().Set("Content-Type", "application/ocsp-response")
		w.Write(resp)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/", asked
}

func parseKey(der []byte) (crypto.Signer, error) {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	return x509.ParsePKCS1PrivateKey(der)
}

// TestACMEOCSPStaple: when the CA's certificates name an OCSP responder,
// the handshake staples its answer (for TLS over TCP and over QUIC).
func TestACMEOCSPStaple(t *testing.T) {
	t.Parallel()
	dns := startDNS(t)
	p := newPebble(t, dns, freeTCPPort(t), freeTCPPort(t))
	url, asked := ocspResponder(t, p)
	p.ocspURL, p.rsa = url, true
	p.start()
	root, body := acmeSite(t)
	srv := startLog(t, acmeConfig(p, t.TempDir(), root, []string{"o.example.com"}, "tls-alpn-01"), nil)
	roots := pool(p.root())
	var state tls.ConnectionState
	if !waitFor(scale(30*time.Second), func() bool {
		c, err := tls.Dial("tcp", srv.addr, &tls.Config{RootCAs: roots, ServerName: "o.example.com"})
		if err != nil {
			return false
		}
		state = c.ConnectionState()
		c.Close()
		return len(state.OCSPResponse) > 0
	}) {
		t.Fatalf("no OCSP staple in the handshake (responder asked %d times)", asked.Load())
	}
	leaf := state.PeerCertificates[0]
	issuer := state.PeerCertificates[1]
	resp, err := ocsp.ParseResponseForCert(state.OCSPResponse, leaf, issuer)
	if err != nil || resp.Status != ocsp.Good {
		t.Fatalf("stapled OCSP response: %v, status %v", err, resp)
	}

	// HTTP/3 gets the same certificate, and the file byte-exact.
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "o.example.com"}}
	defer tr.Close()
	req, _ := http.NewRequest("GET", "https://"+srv.addr+"/file.txt", nil)
	req.Host = "o.example.com"
	r, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("HTTP/3 with the ACME certificate: %v", err)
	}
	got, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || !bytes.Equal(got, body) || serial(r.TLS.PeerCertificates[0]) != serial(leaf) {
		t.Errorf("HTTP/3: %d, %d bytes, serial %s want %s", r.StatusCode, len(got), serial(r.TLS.PeerCertificates[0]), serial(leaf))
	}
}

// TestACMERestartServesStored (its own name: certmagic keeps the
// challenges under way in one table per process, shared by the ACME
// tests that run in parallel): an engine restarted with a valid
// certificate in storage serves it on the very first handshake, over TCP
// and over HTTP/3, restart after restart, and asks the CA for nothing.
// (certmagic loads stored certificates on goroutines of its own; a
// handshake the moment the loops accept must not overtake them.)
func TestACMERestartServesStored(t *testing.T) {
	t.Parallel()
	dns := startDNS(t)
	p := newPebble(t, dns, freeTCPPort(t), freeTCPPort(t))
	p.start()
	root, body := acmeSite(t)
	cfg := acmeConfig(p, t.TempDir(), root, []string{"r.example.com"}, "tls-alpn-01")
	roots := pool(p.root())
	srv := startLog(t, cfg, nil)
	var leaf *x509.Certificate
	var err error
	if !waitFor(scale(30*time.Second), func() bool {
		_, leaf, err = tlsGet(srv.addr, "r.example.com", "/file.txt", roots)
		return err == nil
	}) {
		t.Fatalf("no certificate obtained: %v\n%s", err, p.logText())
	}
	want := serial(leaf)
	srv.stop()
	issued := p.issued()
	for i := range 20 {
		srv = startLog(t, cfg, nil)
		proto := "HTTP/1.1"
		var got []byte
		if i%2 == 0 {
			got, leaf, err = tlsGet(srv.addr, "r.example.com", "/file.txt", roots)
		} else {
			proto = "HTTP/3"
			got, leaf, err = h3Get(srv.addr, "r.example.com", "/file.txt", roots)
		}
		srv.stop()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("restart %d: the first %s request after start: %v (%d bytes)", i+1, proto, err, len(got))
		}
		if serial(leaf) != want {
			t.Fatalf("restart %d: served serial %s, want the stored %s", i+1, serial(leaf), want)
		}
	}
	if n := p.issued() - issued; n != 0 {
		t.Errorf("20 restarts with the certificate in storage made the CA issue %d more", n)
	}
}

// h3Get is tlsGet over HTTP/3.
func h3Get(addr, name, path string, roots *x509.CertPool) ([]byte, *x509.Certificate, error) {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name}}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+addr+path, nil)
	req.Host = name
	return leafAndBody(tr.RoundTrip(req))
}

// parseConfig parses and validates a config text as engine serve does.
func parseConfig(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.toml", t.TempDir(), []byte(text))
	if err == nil {
		setTestStateDir(t, cfg)
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}
