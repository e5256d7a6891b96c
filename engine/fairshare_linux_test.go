package engine_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// The fair share of connection slots (issue 40): a limit per client
// address over TCP and QUIC together, responses slower than
// min_send_rate closed to admit new clients at max_connections, idle
// QUIC connections reclaimed there as TCP ones are, and a proxied
// response whose client stopped reading giving its upstream connection
// to a request that waits. Loopback's 127.0.0.0/8 gives the tests as
// many client addresses as they need.

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: scale(5 * time.Second)}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(scale(60 * time.Second)))
	return &rawConn{t: t, Conn: c, r: bufio.NewReaderSize(c, 64<<10)}
}

// quicFrom dials addr over QUIC (h3) from the loopback address src.
func quicFrom(t *testing.T, src, addr string, pki *testPKI) (*quic.Conn, error) {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(src)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scale(5*time.Second))
	defer cancel()
	c, err := tr.Dial(ctx, ua, &tls.Config{RootCAs: pki.pool, ServerName: "localhost", NextProtos: []string{"h3"}}, &quic.Config{HandshakeIdleTimeout: scale(5 * time.Second)})
	if err == nil {
		t.Cleanup(func() { c.CloseWithError(0, "") })
	}
	return c, err
}

func refused(err error) bool {
	var te *quic.TransportError
	return errors.As(err, &te) && te.ErrorCode == quic.ConnectionRefused
}

// TestPerAddressLimit: max_connections_per_address counts one address's
// TCP and QUIC connections together; past it a new one from that address
// is closed at once (TCP) or refused (QUIC), counted and logged with the
// address, while another address is served; a connection that ends gives
// its address the room back.
func TestPerAddressLimit(t *testing.T) {
	root := siteRoot(t)
	var log syncBuffer
	ts, pki := startTLSLog(t, root, ktlsAuto+"[limits]\nmax_connections_per_address = 2\n", &log)
	a := dialFrom(t, "127.0.0.2", ts.addr)
	if _, err := quicFrom(t, "127.0.0.2", ts.addr, pki); err != nil {
		t.Fatalf("the address's second connection (QUIC) was refused: %v", err)
	}
	// The third, over either transport, is one too many.
	if c := dialFrom(t, "127.0.0.2", ts.addr); !c.closed(scale(5 * time.Second)) {
		t.Error("a third TCP connection from the address stayed open")
	}
	if _, err := quicFrom(t, "127.0.0.2", ts.addr, pki); !refused(err) {
		t.Errorf("a third connection (QUIC) from the address: %v, want CONNECTION_REFUSED", err)
	}
	// Another address is not concerned.
	other := dialFrom(t, "127.0.0.3", ts.addr)
	if other.closed(300 * time.Millisecond) {
		t.Error("another address's connection was closed")
	}
	if _, err := quicFrom(t, "127.0.0.3", ts.addr, pki); err != nil {
		t.Errorf("another address's QUIC connection: %v", err)
	}
	st := ts.Stats()
	if st.RefusedAddress < 1 || st.H3RefusedAddress < 1 {
		t.Errorf("refused per address: tcp %d, quic %d; want both counted", st.RefusedAddress, st.H3RefusedAddress)
	}
	if !strings.Contains(log.String(), "max_connections_per_address") || !strings.Contains(log.String(), "127.0.0.2") {
		t.Errorf("no log line names the refused address:\n%s", log.String())
	}
	// The room comes back when a connection ends.
	a.Close()
	if !waitFor(scale(5*time.Second), func() bool {
		c, err := quicFrom(t, "127.0.0.2", ts.addr, pki)
		if err == nil {
			c.CloseWithError(0, "")
		}
		return err == nil
	}) {
		t.Error("the address got no connection back after one of its own closed")
	}
}

// stallTCP starts a download of path on c and stops reading once the head
// is in: the response stays in flight, moving nothing.
func stallTCP(t *testing.T, c *rawConn, path string) {
	t.Helper()
	c.send("GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if resp := c.head("GET"); resp.StatusCode != 200 {
		t.Fatalf("%s: %s", path, resp.Status)
	}
}

// tryGet asks for path on a new connection from src and reports whether
// it was answered 200 within a second (false: the connection was closed
// unanswered, refused at max_connections).
func tryGet(t *testing.T, src, addr, path string) bool {
	c := dialFrom(t, src, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err == nil && resp.StatusCode == 200
}

// TestSlowResponseMakesRoom: at max_connections, with nobody waiting for
// its client, a response in flight that moved less than min_send_rate
// over its window is closed to admit a new client; one not yet measured
// over a whole window is not, and the new client is refused.
func TestSlowResponseMakesRoom(t *testing.T) {
	for _, tc := range []struct {
		window string
		room   bool
	}{{"1s", true}, {"10m", false}} {
		t.Run("window "+tc.window, func(t *testing.T) {
			root := siteRoot(t)
			linkBig(t, root, "big.bin")
			ts := start(t, fmt.Sprintf("root = %q\nworkers = 1\n[limits]\nmax_connections = 1\nmin_send_rate = \"1MiB\"\nmin_send_rate_window = %q\n", root, tc.window))
			slow := dialFrom(t, "127.0.0.2", ts.addr)
			stallTCP(t, slow, "/big.bin")
			limit := scale(15 * time.Second)
			if !tc.room {
				limit = 3 * time.Second
			}
			got := waitFor(limit, func() bool { return tryGet(t, "127.0.0.3", ts.addr, "/alpha.txt") })
			if got != tc.room {
				t.Fatalf("a new client served: %v, want %v (slow response closed for room: %d)", got, tc.room, ts.Stats().ReclaimedSlow)
			}
			if !tc.room {
				if ts.Stats().Rejected < 1 {
					t.Error("refusals not counted")
				}
				return
			}
			if st := ts.Stats(); st.ReclaimedSlow != 1 {
				t.Errorf("slow responses closed: %d, want 1", st.ReclaimedSlow)
			}
			slow.SetReadDeadline(time.Now().Add(scale(10 * time.Second)))
			if _, err := io.Copy(io.Discard, slow.r); err != nil && !isReset(err) {
				t.Errorf("the slow client's connection: %v, want it closed", err)
			}
		})
	}
}

func isReset(err error) bool {
	return errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset")
}

// TestH3MaxConnectionsShare: handshakes and connections count against
// max_connections; at the limit a new QUIC connection is admitted by
// closing an idle connection of an address that holds more than the
// newcomer's, never one with a request in flight (not yet measured
// slow), and a newcomer from the address holding every slot is refused.
func TestH3MaxConnectionsShare(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nmax_connections = 2\nmin_send_rate_window = \"10m\"\n")
	busy, err := quicFrom(t, "127.0.0.2", ts.addr, pki)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://"+ts.addr+"/big.bin", nil)
	resp, err := (&http3.Transport{}).NewClientConn(busy).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // in flight, unread
	idle, err := quicFrom(t, "127.0.0.2", ts.addr, pki)
	if err != nil {
		t.Fatal(err)
	}
	if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().H3Active == 2 }) {
		t.Fatal("the two connections not counted")
	}
	if _, err := quicFrom(t, "127.0.0.2", ts.addr, pki); !refused(err) {
		t.Fatalf("a third connection from the address holding both slots: %v, want CONNECTION_REFUSED", err)
	}
	if st := ts.Stats(); st.H3Refused != 1 { // one attempt, however many Initial packets
		t.Errorf("refused %d, want 1", st.H3Refused)
	}
	c, err := quicFrom(t, "127.0.0.3", ts.addr, pki)
	if err != nil {
		t.Fatalf("a client holding nothing: %v", err)
	}
	req, _ = http.NewRequest("GET", "https://"+ts.addr+"/alpha.txt", nil)
	r, err := (&http3.Transport{}).NewClientConn(c).RoundTrip(req)
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("the new client's request: %v", err)
	}
	r.Body.Close()
	select {
	case <-idle.Context().Done():
	case <-time.After(scale(5 * time.Second)):
		t.Error("the idle connection was not closed")
	}
	if busy.Context().Err() != nil {
		t.Error("the connection with a request in flight was closed")
	}
	if st := ts.Stats(); st.H3ReclaimedIdle != 1 {
		t.Errorf("idle connections closed for room: %d, want 1", st.H3ReclaimedIdle)
	}
}

// TestH3SlowMakesRoom: at max_connections a QUIC connection whose
// responses moved less than min_send_rate over the window is closed to
// admit a new one.
func TestH3SlowMakesRoom(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nmax_connections = 1\nmin_send_rate = \"1MiB\"\nmin_send_rate_window = \"1s\"\n")
	qc, err := quicFrom(t, "127.0.0.2", ts.addr, pki)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://"+ts.addr+"/big.bin", nil)
	resp, err := (&http3.Transport{}).NewClientConn(qc).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !waitFor(scale(20*time.Second), func() bool {
		_, err := quicFrom(t, "127.0.0.3", ts.addr, pki)
		return err == nil
	}) {
		t.Fatal("no new connection admitted in place of a stalled one")
	}
	select {
	case <-qc.Context().Done():
	case <-time.After(scale(5 * time.Second)):
		t.Error("the stalled connection was not closed")
	}
	if st := ts.Stats(); st.H3ReclaimedSlow != 1 {
		t.Errorf("slow connections closed for room: %d, want 1", st.H3ReclaimedSlow)
	}
}

// TestProxyStalledClientGivesWay: a proxied response whose client stops
// reading gives its upstream connection (max_conns = 1) to a request
// that waits for one, about 5 s on; without that the request would wait
// for send_timeout or response_timeout.
func TestProxyStalledClientGivesWay(t *testing.T) {
	big := strings.Repeat("x", 64<<20)
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		io.WriteString(w, "small")
	}))
	ts := start(t, "workers = 1\n"+proxyConfig(t, "/", "max_conns = 1\nresponse_timeout = \"5m\"\n", b.hostPort())+"[limits]\nsend_timeout = \"5m\"\n")
	stalled := dialFrom(t, "127.0.0.2", ts.addr)
	stallTCP(t, stalled, "/big")
	c := dialFrom(t, "127.0.0.3", ts.addr)
	c.SetDeadline(time.Now().Add(scale(30 * time.Second)))
	c.send("GET /small HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body := c.response("GET")
	if resp.StatusCode != 200 || string(body) != "small" {
		t.Fatalf("the waiting request: %s %q", resp.Status, body)
	}
	if st := ts.Stats(); st.ProxyPreempted != 1 {
		t.Errorf("preempted %d, want 1", st.ProxyPreempted)
	}
	stalled.SetReadDeadline(time.Now().Add(scale(10 * time.Second)))
	n, err := io.Copy(io.Discard, stalled.r)
	if err == nil && n >= int64(len(big)) {
		t.Error("the stalled client got its whole response anyway")
	}
}

// TestFairShareAtCapacity: at max_connections, with nothing waiting and
// nothing slow by min_send_rate (its window not yet over), a client
// whose address holds next to nothing is admitted by closing a response
// of the address holding the most, over TCP and over QUIC; a newcomer
// from that address itself is refused, and so is one from an address
// holding as many as every other.
func TestFairShareAtCapacity(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := start(t, fmt.Sprintf("workers = 1\n[[sites]]\ndomain = \"localhost\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n%s[limits]\nmax_connections = 4\nmin_send_rate_window = \"10m\"\n",
		root, pki.certFile, pki.keyFile, ktlsAuto))
	tlsGet := func(src string) (*tls.Conn, *bufio.Reader) {
		c := dialFrom(t, src, ts.addr)
		tc := tls.Client(c.Conn, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
		tc.SetDeadline(time.Now().Add(scale(20 * time.Second)))
		if err := tc.Handshake(); err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		io.WriteString(tc, "GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
		r := bufio.NewReader(tc)
		if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v", src, err)
		}
		return tc, r
	}
	// served reports whether a new TLS connection from src is answered.
	served := func(src string) bool {
		c := dialFrom(t, src, ts.addr)
		defer c.Close()
		tc := tls.Client(c.Conn, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
		tc.SetDeadline(time.Now().Add(scale(5 * time.Second)))
		if err := tc.Handshake(); err != nil {
			return false
		}
		io.WriteString(tc, "GET /alpha.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		return err == nil && resp.StatusCode == 200
	}
	var heavy []*tls.Conn
	for range 3 {
		c, _ := tlsGet("127.0.0.2")
		heavy = append(heavy, c)
	}
	light, _ := tlsGet("127.0.0.3")
	if served("127.0.0.2") {
		t.Error("the address holding the most took a fourth slot from others")
	}
	if !served("127.0.0.5") {
		t.Fatal("a client holding nothing was refused at max_connections while one address held three slots")
	}
	if st := ts.Stats(); st.ReclaimedShare != 1 {
		t.Errorf("closed for the fair share: %d, want 1", st.ReclaimedShare)
	}
	// The closed one is the heavy address's; the light one's goes on.
	closed := 0
	for _, c := range heavy {
		c.SetReadDeadline(time.Now().Add(scale(5 * time.Second)))
		if _, err := io.Copy(io.Discard, c); err == nil || !isTimeout(err) {
			closed++
		}
	}
	if closed != 1 {
		t.Errorf("%d of the heavy address's responses closed, want 1", closed)
	}
	light.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := io.Copy(io.Discard, light); err == nil || !isTimeout(err) {
		t.Errorf("the light address's response was closed: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestH3FairShareAtCapacity: the fair share over QUIC (h3/share.go).
func TestH3FairShareAtCapacity(t *testing.T) {
	root := siteRoot(t)
	linkBig(t, root, "big.bin")
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nmax_connections = 2\nmin_send_rate_window = \"10m\"\n")
	var heavy []*quic.Conn
	for range 2 {
		qc, err := quicFrom(t, "127.0.0.2", ts.addr, pki)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "https://"+ts.addr+"/big.bin", nil)
		resp, err := (&http3.Transport{}).NewClientConn(qc).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		heavy = append(heavy, qc)
	}
	if _, err := quicFrom(t, "127.0.0.2", ts.addr, pki); !refused(err) {
		t.Errorf("the address holding every slot took another: %v", err)
	}
	if _, err := quicFrom(t, "127.0.0.3", ts.addr, pki); err != nil {
		t.Fatalf("a client holding nothing: %v", err)
	}
	if st := ts.Stats(); st.H3ReclaimedShare != 1 {
		t.Errorf("closed for the fair share: %d, want 1", st.H3ReclaimedShare)
	}
	if !waitFor(scale(5*time.Second), func() bool {
		return heavy[0].Context().Err() != nil || heavy[1].Context().Err() != nil
	}) {
		t.Error("none of the heavy address's connections was closed")
	}
}

// TestProxyWaitersFewestFirst: when a connection to a full upstream
// (max_conns) frees, the waiting request whose client address holds the
// fewest connections goes first, not the oldest: a crowd with requests
// queued cannot keep a newcomer waiting.
func TestProxyWaitersFewestFirst(t *testing.T) {
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ch, ok := release[strings.TrimPrefix(r.URL.Path, "/hold/")]; ok {
			select {
			case <-ch:
			case <-time.After(scale(30 * time.Second)):
			}
		}
		io.WriteString(w, r.URL.Path)
	}))
	ts := start(t, "workers = 1\n"+proxyConfig(t, "/", "max_conns = 2\nresponse_timeout = \"1m\"\n", b.hostPort()))
	ask := func(c *rawConn, path string) chan string {
		c.send("GET " + path + " HTTP/1.1\r\nHost: a\r\n\r\n")
		got := make(chan string, 1)
		go func() {
			resp, err := http.ReadResponse(c.r, nil)
			if err != nil {
				got <- err.Error()
				return
			}
			body, _ := io.ReadAll(resp.Body)
			got <- string(body)
		}()
		return got
	}
	a := ask(dialFrom(t, "127.0.0.2", ts.addr), "/hold/a")
	bb := ask(dialFrom(t, "127.0.0.3", ts.addr), "/hold/b")
	if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().ProxyOpened == 2 }) {
		t.Fatal("the two held requests did not take both connections")
	}
	// A crowd's address with three connections asks first, then a
	// newcomer with one.
	crowd := dialFrom(t, "127.0.0.4", ts.addr)
	dialFrom(t, "127.0.0.4", ts.addr)
	dialFrom(t, "127.0.0.4", ts.addr)
	if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().Open == 5 }) {
		t.Fatalf("%d connections open, want 5", ts.Stats().Open)
	}
	first := ask(crowd, "/crowd")
	if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().ProxyQueued == 1 }) {
		t.Fatal("the crowd's request is not waiting")
	}
	t0 := time.Now()
	q0 := ts.Stats().ProxyQueued
	second := ask(dialFrom(t, "127.0.0.5", ts.addr), "/newcomer")
	if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().ProxyQueued > q0 }) {
		t.Fatal("the newcomer's request is not waiting")
	}
	// Under load a request was once counted as queued twice (taken from
	// the queue and put back), and the newcomer's was not in yet: give
	// it time to be.
	time.Sleep(scale(300 * time.Millisecond))
	close(release["a"])
	if got := <-a; got != "/hold/a" {
		t.Fatalf("held request: %q", got)
	}
	select {
	case got := <-second:
		if got != "/newcomer" {
			t.Fatalf("newcomer: %q", got)
		}
	case got := <-first:
		st := ts.Stats()
		t.Fatalf("the crowd's request (%q) went before the newcomer's (%v after it was asked; opened %d queued %d preempted %d)", got, time.Since(t0), st.ProxyOpened, st.ProxyQueued, st.ProxyPreempted)
	case <-time.After(scale(10 * time.Second)):
		t.Fatal("no waiting request went")
	}
	close(release["b"])
	<-bb
	if got := <-first; got != "/crowd" {
		t.Fatalf("crowd: %q", got)
	}
}

// TestH3RetryUnderPressure: a new QUIC connection from an address that
// holds half its share already proves its address with a Retry first
// (counted), and is served.
func TestH3RetryUnderPressure(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nmax_connections_per_address = 2\n")
	if _, err := quicFrom(t, "127.0.0.2", ts.addr, pki); err != nil {
		t.Fatal(err)
	}
	if st := ts.Stats(); st.H3Retries != 0 {
		t.Fatalf("a Retry for the address's first connection (%d)", st.H3Retries)
	}
	if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().H3Active == 1 }) {
		t.Fatal("the first connection not counted")
	}
	c, err := quicFrom(t, "127.0.0.2", ts.addr, pki)
	if err != nil {
		t.Fatalf("the second connection: %v", err)
	}
	req, _ := http.NewRequest("GET", "https://"+ts.addr+"/alpha.txt", nil)
	resp, err := (&http3.Transport{}).NewClientConn(c).RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("served after the Retry: %v", err)
	}
	resp.Body.Close()
	// Counted once per attempt, though a ClientHello with a post-quantum
	// key share takes two Initial packets, each answered with a Retry.
	if st := ts.Stats(); st.H3Retries != 1 {
		t.Errorf("Retries %d, want 1", st.H3Retries)
	}
}

// TestProxyTricklingUploadGivesWay: a request body trickled in below
// min_send_rate gives its upstream connection (max_conns = 1) to a
// request that waits for one; before, an upload at a byte a second held
// it for as long as it trickled (outside attack, finding 1).
func TestProxyTricklingUploadGivesWay(t *testing.T) {
	b := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the whole body before answering
		io.WriteString(w, "small")
	}))
	ts := start(t, "workers = 1\n"+proxyConfig(t, "/", "max_conns = 1\nresponse_timeout = \"5m\"\n", b.hostPort())+"[limits]\nbody_timeout = \"5m\"\n")
	up := dialFrom(t, "127.0.0.2", ts.addr)
	up.send("POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
				if _, err := io.WriteString(up, strings.Repeat("u", 100)); err != nil {
					return
				}
			}
		}
	}()
	if !waitFor(scale(5*time.Second), func() bool { return ts.Stats().ProxyOpened == 1 }) {
		t.Fatal("the upload did not take the connection")
	}
	c := dialFrom(t, "127.0.0.3", ts.addr)
	c.SetDeadline(time.Now().Add(scale(30 * time.Second)))
	c.send("GET /small HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body := c.response("GET")
	if resp.StatusCode != 200 || string(body) != "small" {
		t.Fatalf("the waiting request: %s %q", resp.Status, body)
	}
	if st := ts.Stats(); st.ProxyPreempted != 1 {
		t.Errorf("preempted %d, want 1", st.ProxyPreempted)
	}
}
