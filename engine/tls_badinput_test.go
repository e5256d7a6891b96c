package engine_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mediaship/engine/ktls"
)

// rawTLS is a crypto/tls client whose socket the test can also write to
// directly, with the client's own application keys (from its key log), to
// send records crypto/tls never would.
type rawTLS struct {
	t    *testing.T
	raw  net.Conn
	tls  *tls.Conn
	keys ktls.Keys
	sec  []byte
	seal *ktls.Sealer
	r    *bufio.Reader
}

type secretLog struct{ secrets map[string][]byte }

func (l *secretLog) Write(p []byte) (int, error) {
	f := strings.Fields(string(p))
	if len(f) == 3 {
		b, _ := hex.DecodeString(f[2])
		l.secrets[f[0]] = b
	}
	return len(p), nil
}

func dialRawTLS(t *testing.T, addr string, pki *testPKI) *rawTLS {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetDeadline(time.Now().Add(scale(20 * time.Second)))
	log := &secretLog{secrets: map[string][]byte{}}
	c := tls.Client(raw, &tls.Config{RootCAs: pki.pool, ServerName: "localhost", KeyLogWriter: log})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	suite, _ := ktls.SuiteByID(c.ConnectionState().CipherSuite)
	sec := log.secrets["CLIENT_TRAFFIC_SECRET_0"]
	keys, err := ktls.TrafficKeys(suite, sec)
	if err != nil {
		t.Fatal(err)
	}
	seal, _ := ktls.NewSealer(keys, 0) // the client has sent no application record yet
	return &rawTLS{t: t, raw: raw, tls: c, keys: keys, sec: sec, seal: seal, r: bufio.NewReader(c)}
}

// inject seals a record of content type typ from the client.
func (c *rawTLS) inject(typ byte, data []byte) {
	c.t.Helper()
	rec, err := c.seal.Seal(nil, typ, data)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.raw.Write(rec); err != nil {
		c.t.Fatal(err)
	}
}

// readErr reads until the server ends the connection and returns the
// error crypto/tls reports (an alert it received, or EOF).
func (c *rawTLS) readErr() error {
	_, err := io.ReadAll(c.tls)
	return err
}

func TestTLSBadRecords(t *testing.T) {
	root := siteRoot(t)
	big, want := linkBig(t, root, "big.bin")
	_ = big
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")

	// A download on another connection runs through all of it unharmed.
	done := make(chan string, 1)
	go func() {
		got, _, _ := getSHA(t, pki.client(nil), "https://localhost:"+portOf(ts.addr)+"/big.bin")
		done <- got
	}()

	tests := []struct {
		name  string
		send  func(c *rawTLS)
		alert string
	}{
		{"bad MAC", func(c *rawTLS) {
			rec, _ := c.seal.Seal(nil, ktls.RecordApplicationData, []byte("GET / HTTP/1.1\r\n"))
			rec[len(rec)-1] ^= 0x80
			c.raw.Write(rec)
		}, "bad record MAC"},
		{"garbage record", func(c *rawTLS) {
			c.raw.Write([]byte{23, 3, 3, 0, 40})
			c.raw.Write(bytes.Repeat([]byte{0x42}, 40))
		}, "bad record MAC"},
		{"oversized record", func(c *rawTLS) {
			c.raw.Write([]byte{23, 3, 3, 0x48, 0x00}) // 18432 bytes: more than 2^14 + 256
			c.raw.Write(make([]byte, 100))
		}, "record overflow"},
		{"unexpected content type", func(c *rawTLS) {
			c.inject(20, []byte{1}) // ChangeCipherSpec after the handshake
		}, "unexpected message"},
		{"renegotiation", func(c *rawTLS) {
			c.inject(ktls.RecordHandshake, []byte{1, 0, 0, 4, 3, 3, 0, 0}) // a ClientHello
		}, "unexpected message"},
		{"truncated handshake message", func(c *rawTLS) {
			c.inject(ktls.RecordHandshake, []byte{24, 0, 0})
		}, "error decoding message"},
		{"bad KeyUpdate", func(c *rawTLS) {
			c.inject(ktls.RecordHandshake, []byte{24, 0, 0, 1, 7})
		}, "unexpected message"},
		{"KeyUpdate not at the end of its record", func(c *rawTLS) {
			c.inject(ktls.RecordHandshake, []byte{24, 0, 0, 1, 0, 24, 0, 0, 1, 0})
		}, "unexpected message"},
		{"empty handshake record", func(c *rawTLS) {
			c.inject(ktls.RecordHandshake, nil)
		}, "unexpected message"},
		{"alert record of the wrong length", func(c *rawTLS) {
			c.inject(ktls.RecordAlert, []byte{1})
		}, "error decoding message"},
		{"unprotected record after the handshake", func(c *rawTLS) {
			c.raw.Write([]byte{20, 3, 3, 0, 1, 1}) // ChangeCipherSpec in the clear
		}, "unexpected message"},
		{"a run of empty records", func(c *rawTLS) {
			for range 40 {
				c.inject(ktls.RecordApplicationData, nil)
			}
		}, "unexpected message"},
	}
	before := ts.Stats().TLSRecordErrors
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRawTLS(t, ts.addr, pki)
			tt.send(c)
			err := c.readErr()
			if err == nil || !strings.Contains(err.Error(), tt.alert) {
				t.Errorf("client saw %v, want an alert %q", err, tt.alert)
			}
		})
	}
	if got := ts.Stats().TLSRecordErrors - before; got < int64(len(tests)) {
		t.Errorf("TLSRecordErrors grew by %d, want %d", got, len(tests))
	}
	select {
	case got := <-done:
		if got != want {
			t.Errorf("the concurrent download was harmed: sha256 %s", got)
		}
	case <-time.After(scale(60 * time.Second)):
		t.Error("the concurrent download did not finish")
	}
}

// TestTLSCloseNotifyAnswered: a client that sends close_notify with
// nothing to ask gets close_notify back before the connection closes
// (RFC 8446 §6.1), not a bare FIN.
func TestTLSCloseNotifyAnswered(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")
	c := dialRawTLS(t, ts.addr, pki)
	if err := c.tls.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.raw.SetReadDeadline(time.Now().Add(scale(10 * time.Second)))
	wire, err := io.ReadAll(c.raw) // records the client's TLS never reads
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	last := -1
	for len(wire) >= 5 {
		n := int(wire[3])<<8 | int(wire[4])
		if len(wire) < 5+n {
			break
		}
		last = n
		wire = wire[5+n:]
	}
	// An encrypted alert: 2 bytes, the inner type and a 16-byte tag.
	if last != 2+1+16 || len(wire) != 0 {
		t.Errorf("last record from the server: %d bytes (left over %d), want an encrypted close_notify (19)", last, len(wire))
	}
}

// TestTLSKeyUpdateRequested sends a KeyUpdate asking for ours, then a
// request under the client's next key. crypto/tls (client) must then read
// the server's KeyUpdate and the response under the server's next key.
func TestTLSKeyUpdateRequested(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")
	c := dialRawTLS(t, ts.addr, pki)
	c.inject(ktls.RecordHandshake, []byte{24, 0, 0, 1, 1}) // KeyUpdate(update_requested)
	next, err := ktls.NextSecret(c.keys.Suite, c.sec)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := ktls.TrafficKeys(c.keys.Suite, next)
	c.seal, _ = ktls.NewSealer(k, 0)
	c.inject(ktls.RecordApplicationData, []byte(get("/alpha.txt")))
	resp, err := http.ReadResponse(c.r, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("after KeyUpdate: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("body %q", body)
	}
	if ts.Stats().TLSKeyUpdates != 1 {
		t.Errorf("TLSKeyUpdates = %d", ts.Stats().TLSKeyUpdates)
	}
}

// TestTLSNotTLS: plain HTTP to the TLS port gets an alert, not an answer
// in the clear, and is counted.
func TestTLSNotTLS(t *testing.T) {
	root := siteRoot(t)
	ts, _ := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")
	c := dial(t, ts.addr)
	c.send(get("/alpha.txt"))
	b, _ := io.ReadAll(c.r)
	if len(b) != 7 || b[0] != 21 || b[5] != 2 {
		t.Errorf("answer to plain HTTP: % x (%q), want one alert record", b, b)
	}
	if ts.Stats().TLSHandshakeErrors != 1 {
		t.Errorf("TLSHandshakeErrors = %d", ts.Stats().TLSHandshakeErrors)
	}
	// A handshake cut off in the middle: the client sends half a
	// ClientHello and leaves; nothing is left running.
	c2 := dial(t, ts.addr)
	c2.send("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
	c2.Close()
	if !waitFor(scale(3*time.Second), func() bool { return ts.Stats().Open == 0 }) {
		t.Errorf("connections still open: %d", ts.Stats().Open)
	}
}

// corruptingConn flips a byte in the client's second write: its Finished.
type corruptingConn struct {
	net.Conn
	writes int
}

func (c *corruptingConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes == 2 && len(p) > 10 {
		q := bytes.Clone(p)
		q[len(q)-3] ^= 0xff
		return c.Conn.Write(q)
	}
	return c.Conn.Write(p)
}

// TestTLSGarbageInHandshake: a client whose Finished is corrupted gets an
// alert from crypto/tls and a close; it is counted, and nothing of the
// site is sent.
func TestTLSGarbageInHandshake(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, "[kernel]\nktls = \"auto\"\n")
	raw, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(scale(10 * time.Second)))
	c := tls.Client(&corruptingConn{Conn: raw}, &tls.Config{RootCAs: pki.pool, ServerName: "localhost"})
	c.Handshake() // the client's side completes; the server's does not
	io.WriteString(c, get("/alpha.txt"))
	b, err := io.ReadAll(c)
	if err == nil || len(b) > 0 {
		t.Errorf("after a corrupted Finished the client read %q, err %v", b, err)
	}
	if !waitFor(scale(3*time.Second), func() bool { return ts.Stats().TLSHandshakeErrors == 1 }) {
		t.Errorf("TLSHandshakeErrors = %d", ts.Stats().TLSHandshakeErrors)
	}
	if ts.Stats().Requests != 0 {
		t.Error("a request was answered on a failed handshake")
	}
}
