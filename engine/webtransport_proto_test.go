package engine_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// rawWT is a WebTransport session opened by hand over quic-go's HTTP/3
// client API, for the tests that break the protocol on purpose or look
// at exactly how the server ends its streams.
type rawWT struct {
	qc  *quic.Conn
	cc  *http3.RawClientConn
	str *http3.RequestStream
	res *http.Response
	// uni receives the server's WebTransport unidirectional streams, their
	// header (type 0x54 and session ID) read.
	uni chan *quic.ReceiveStream
}

// dialRawWT opens a session on the diagnostics endpoint with query.
func dialRawWT(t *testing.T, addr string, pki *testPKI, query string) *rawWT {
	t.Helper()
	w, status := openRawWT(t, addr, pki, query, nil)
	if status != 200 {
		t.Fatalf("CONNECT: %d", status)
	}
	return w
}

// openRawWT is dialRawWT with the client's QUIC settings (flow-control
// windows, say) over its defaults, and the response status for the
// caller to judge.
func openRawWT(t *testing.T, addr string, pki *testPKI, query string, qconf *quic.Config) (*rawWT, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scale(10*time.Second))
	defer cancel()
	if qconf == nil {
		qconf = &quic.Config{}
	}
	qconf.EnableDatagrams, qconf.EnableStreamResetPartialDelivery = true, true
	qc, err := quic.DialAddr(ctx, addr, &tls.Config{RootCAs: pki.pool, ServerName: "localhost", NextProtos: []string{"h3"}}, qconf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	cc := (&http3.Transport{EnableDatagrams: true, AdditionalSettings: map[uint64]uint64{0x2c7cf000: 1}}).NewRawClientConn(qc)
	uni := make(chan *quic.ReceiveStream, 4)
	go func() {
		for {
			s, err := qc.AcceptUniStream(context.Background())
			if err != nil {
				return
			}
			go func() {
				// WebTransport streams (0x54) stay here; the others
				// (control, QPACK) are HTTP/3's.
				if typ, err := quicvarint.Peek(s); err != nil || typ != 0x54 {
					cc.HandleUnidirectionalStream(s)
					return
				}
				r := quicvarint.NewReader(s)
				quicvarint.Read(r) // the type
				if _, err := quicvarint.Read(r); err == nil {
					uni <- s
				}
			}()
		}
	}()
	select {
	case <-cc.ReceivedSettings():
	case <-ctx.Done():
		t.Fatal("no SETTINGS from the server")
	}
	st := cc.Settings()
	if !st.EnableDatagrams || !st.EnableExtendedConnect || st.Other[0x2c7cf000] != 1 || st.Other[0x2b603742] != 1 || st.Other[0x14e9cd29] == 0 {
		t.Fatalf("server SETTINGS do not offer WebTransport: %+v", st)
	}
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("https://localhost/.well-known/engine/diagnostics?" + query)
	if err := str.SendRequestHeader(&http.Request{Method: "CONNECT", Proto: "webtransport", URL: u, Host: "localhost", Header: http.Header{}}); err != nil {
		t.Fatal(err)
	}
	res, err := str.ReadResponse()
	if err != nil {
		t.Fatal(err)
	}
	return &rawWT{qc: qc, cc: cc, str: str, res: res, uni: uni}, res.StatusCode
}

// capsule reads the next capsule the server sent on the CONNECT stream.
func (w *rawWT) capsule(t *testing.T) (uint64, []byte, error) {
	t.Helper()
	w.str.SetReadDeadline(time.Now().Add(scale(10 * time.Second)))
	p := http3.NewCapsuleParser(w.str)
	typ, r, err := p.Next()
	if err != nil {
		return 0, nil, err
	}
	b, err := io.ReadAll(r)
	return uint64(typ), b, err
}

// wantClose reads capsules until a CLOSE_WEBTRANSPORT_SESSION and checks
// its code.
func (w *rawWT) wantClose(t *testing.T, code uint32) string {
	t.Helper()
	for {
		typ, b, err := w.capsule(t)
		if err != nil {
			t.Fatalf("waiting for CLOSE_WEBTRANSPORT_SESSION %#x: %v", code, err)
		}
		if typ != 0x2843 {
			continue
		}
		if len(b) < 4 || binary.BigEndian.Uint32(b) != code {
			t.Fatalf("CLOSE_WEBTRANSPORT_SESSION %x, want code %#x", b, code)
		}
		return string(b[4:])
	}
}

func wtServer(t *testing.T, extra string) (*testServer, *testPKI, *syncBuffer) {
	return wtServerAt(t, siteRoot(t), extra)
}

// wtServerAt is wtServer serving root.
func wtServerAt(t *testing.T, root, extra string) (*testServer, *testPKI, *syncBuffer) {
	pki := newPKI(t, t.TempDir(), "localhost")
	var log syncBuffer
	ts := startLog(t, fmt.Sprintf("root = %q\n%s[[sites]]\ndomain = \"localhost\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n%s%s",
		root, extra, root, pki.certFile, pki.keyFile, ktlsAuto, wtConf), &log)
	return ts, pki, &log
}

// TestWebTransportProtocolErrors: what the server does with a client that
// breaks the draft's rules.
func TestWebTransportProtocolErrors(t *testing.T) {
	ts, pki, log := wtServer(t, "[limits]\nheader_timeout = \"1s\"\n")

	t.Run("close capsule too long", func(t *testing.T) {
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		b := quicvarint.Append(nil, 0x2843)
		b = quicvarint.Append(b, 4+2000)
		b = append(b, make([]byte, 4+2000)...)
		w.str.Write(b)
		w.wantClose(t, 0x106)
	})
	t.Run("unknown capsules are skipped", func(t *testing.T) {
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		b := quicvarint.Append(nil, 0x1234567)
		b = quicvarint.Append(b, 5)
		w.str.Write(append(b, "hello"...))
		// The session still echoes.
		s, err := w.qc.OpenStreamSync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		hdr := quicvarint.Append(quicvarint.Append(nil, 0x41), uint64(w.str.StreamID()))
		s.Write(append(hdr, "ping"...))
		s.Close()
		s.SetReadDeadline(time.Now().Add(scale(5 * time.Second)))
		got, err := io.ReadAll(s)
		if err != nil || string(got) != "ping" {
			t.Fatalf("echo after an unknown capsule: %q, %v", got, err)
		}
	})
	t.Run("client FIN ends the session", func(t *testing.T) {
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		w.str.Close()
		if _, _, err := w.capsule(t); !errors.Is(err, io.EOF) {
			t.Errorf("after the client's FIN the server sent %v, want its own FIN", err)
		}
		if !waitFor(scale(5*time.Second), func() bool {
			_, port, _ := strings.Cut(w.qc.LocalAddr().String(), "]:")
			if port == "" {
				_, port, _ = strings.Cut(w.qc.LocalAddr().String(), ":")
			}
			return strings.Contains(log.String(), fmt.Sprintf("session=%d client=127.0.0.1:%s by=client code=0", w.str.StreamID(), port))
		}) {
			t.Errorf("no log line for the client's FIN:\n%s", log.String())
		}
	})
	t.Run("stream for no session", func(t *testing.T) {
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		s, _ := w.qc.OpenStreamSync(context.Background())
		s.Write(quicvarint.Append(quicvarint.Append(nil, 0x41), 400))
		s.SetReadDeadline(time.Now().Add(scale(5 * time.Second)))
		start := time.Now()
		_, err := s.Read(make([]byte, 1))
		var se *quic.StreamError
		if !errors.As(err, &se) || se.ErrorCode != 0x3994bd84 {
			t.Fatalf("a stream of an unknown session: %v, want WT_BUFFERED_STREAM_REJECTED", err)
		}
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Errorf("refused after %v; the server should wait a second for the session", d)
		}
	})
	t.Run("session ID not a request stream", func(t *testing.T) {
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		s, _ := w.qc.OpenStreamSync(context.Background())
		s.Write(quicvarint.Append(quicvarint.Append(nil, 0x41), 2))
		select {
		case <-w.qc.Context().Done():
		case <-time.After(scale(5 * time.Second)):
			t.Fatal("connection still open")
		}
		var ae *quic.ApplicationError
		if err := context.Cause(w.qc.Context()); !errors.As(err, &ae) || ae.ErrorCode != quic.ApplicationErrorCode(http3.ErrCodeIDError) {
			t.Errorf("connection closed with %v, want H3_ID_ERROR", err)
		}
	})
	t.Run("stream header never finished", func(t *testing.T) {
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		s, _ := w.qc.OpenStreamSync(context.Background())
		s.Write([]byte{0x40, 0x41}) // the signal, no session ID
		s.SetReadDeadline(time.Now().Add(scale(10 * time.Second)))
		_, err := s.Read(make([]byte, 1))
		var se *quic.StreamError
		if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeGeneralProtocolError) {
			t.Fatalf("a stream without its session ID: %v, want a reset (H3_GENERAL_PROTOCOL_ERROR) after header_timeout", err)
		}
	})
	t.Run("reset streams free their slots", func(t *testing.T) {
		// max_streams_per_session = 4: eight streams reset by the client
		// one after the other, then four open at once, all echoed.
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		hdr := quicvarint.Append(quicvarint.Append(nil, 0x41), uint64(w.str.StreamID()))
		for i := range 8 {
			s, err := w.qc.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s.Write(append(hdr[:len(hdr):len(hdr)], "abc"...))
			buf := make([]byte, 3)
			s.SetReadDeadline(time.Now().Add(scale(5 * time.Second)))
			if _, err := io.ReadFull(s, buf); err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if i%2 == 0 {
				s.CancelWrite(0x52e4a40fa8db)
				s.CancelRead(0x52e4a40fa8db)
			} else {
				s.CancelWrite(0x52e4a40fa8db) // the server resets its side in turn
				if _, err := io.ReadAll(s); err == nil {
					t.Errorf("stream %d: the server finished a stream the client had reset", i)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
		var strs []*quic.Stream
		for range 4 {
			s, err := w.qc.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s.Write(append(hdr[:len(hdr):len(hdr)], "ping"...))
			strs = append(strs, s)
		}
		for i, s := range strs {
			s.Close()
			s.SetReadDeadline(time.Now().Add(scale(5 * time.Second)))
			if got, err := io.ReadAll(s); err != nil || string(got) != "ping" {
				t.Fatalf("stream %d of 4 after 8 resets: %q, %v", i, got, err)
			}
		}
	})
	t.Run("capsules are bounded", func(t *testing.T) {
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		b := quicvarint.Append(nil, 0x1234567)
		b = quicvarint.Append(b, 100<<10)
		w.str.Write(append(b, make([]byte, 100<<10)...))
		w.wantClose(t, 0x106)
	})
	t.Run("datagram with the session's quarter stream ID", func(t *testing.T) {
		w := dialRawWT(t, ts.addr, pki, "mode=echo")
		if err := w.str.SendDatagram([]byte("datagram")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), scale(5*time.Second))
		defer cancel()
		b, err := w.str.ReceiveDatagram(ctx)
		if err != nil || !bytes.Equal(b, []byte("datagram")) {
			t.Fatalf("echoed datagram %q, %v", b, err)
		}
	})
}

// TestWebTransportDrain: a stop sends DRAIN_WEBTRANSPORT_SESSION at once
// and, when the grace period ends with the session still open,
// CLOSE_WEBTRANSPORT_SESSION with 0x105.
func TestWebTransportDrain(t *testing.T) {
	ts, pki, _ := wtServer(t, "shutdown_grace = \"1s\"\n")
	w := dialRawWT(t, ts.addr, pki, "mode=echo")
	go ts.stop()
	typ, b, err := w.capsule(t)
	if err != nil || typ != 0x78ae || len(b) != 0 {
		t.Fatalf("first capsule after the stop: type %#x %x, %v; want DRAIN_WEBTRANSPORT_SESSION", typ, b, err)
	}
	start := time.Now()
	if msg := w.wantClose(t, 0x105); !strings.Contains(msg, "shutting down") {
		t.Errorf("close message %q", msg)
	}
	if d := time.Since(start); d > scale(5*time.Second) {
		t.Errorf("closed %v after the drain; grace is 1s", d)
	}
}

// wtSourceFailedReset is the HTTP/3 error code a stream reset with the
// WebTransport application code 0x107 (the server's "source failed")
// carries: codes are mapped from 0x52e4a40fa8db up, skipping one
// reserved codepoint in every 0x1f (draft-ietf-webtrans-http3, "Resetting
// Data Streams").
const wtSourceFailedReset = 0x52e4a40fa8db + 0x107 + 0x107/0x1e

// TestWebTransportSourceFileChanged: a mode=source&file= stream whose
// bytes stop being the file the session's Repr-Digest names (the file is
// rewritten in place while it is sent) ends with the stream reset with
// 0x107, never with a FIN, and the session closed with 0x107. The client
// here checks no digest: what it sees is what the server did.
func TestWebTransportSourceFileChanged(t *testing.T) {
	root := siteRoot(t)
	const size = 4 << 20 // under wtConf's max_bytes_per_session (8 MiB)
	file := make([]byte, size)
	mrand.NewChaCha8([32]byte{7}).Read(file)
	path := filepath.Join(root, "change.bin")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	ts, pki, log := wtServerAt(t, root, "")

	// A 64 KiB stream window: the server can be at most that far ahead
	// of what this client has read, plus the one 64 KiB piece it has
	// read from the file and is writing.
	const window = 64 << 10
	var w *rawWT
	if !waitFor(scale(10*time.Second), func() bool {
		// The first sessions may get 503 while the digest is computed.
		var status int
		w, status = openRawWT(t, ts.addr, pki, "mode=source&file=/change.bin", &quic.Config{
			InitialStreamReceiveWindow: window, MaxStreamReceiveWindow: window,
			InitialConnectionReceiveWindow: 4 * window, MaxConnectionReceiveWindow: 4 * window,
		})
		if status != 503 && status != 200 {
			t.Fatalf("CONNECT: %d", status)
		}
		return status == 200
	}) {
		t.Fatal("CONNECT: still 503 (no digest) after 10s")
	}
	var st *quic.ReceiveStream
	select {
	case st = <-w.uni:
	case <-time.After(scale(10 * time.Second)):
		t.Fatal("the server opened no stream")
	}
	st.SetReadDeadline(time.Now().Add(scale(30 * time.Second)))
	got := make([]byte, window)
	if _, err := io.ReadFull(st, got); err != nil || !bytes.Equal(got, file[:window]) {
		t.Fatalf("the stream's first %d bytes: %v, or not the file's", window, err)
	}
	// The server has read at most 3 windows of the file: flip bytes far
	// past them, in place (same inode, same size).
	const at = size / 2
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{^file[at], ^file[at+1]}, at); err != nil {
		t.Fatal(err)
	}
	f.Close()

	rest, err := io.ReadAll(st)
	n := window + len(rest)
	var se *quic.StreamError
	switch {
	case err == nil:
		t.Fatalf("the stream ended with a FIN after %d bytes; want a reset with 0x107: the bytes sent are not the advertised digest's", n)
	case !errors.As(err, &se) || !se.Remote || se.ErrorCode != wtSourceFailedReset:
		t.Fatalf("the stream ended after %d bytes with %v; want a reset with 0x107 (HTTP/3 code %#x)", n, err, uint64(wtSourceFailedReset))
	}
	// What did arrive is the file as it was sent: its start unchanged.
	if k := min(len(rest), at-window); !bytes.Equal(rest[:k], file[window:window+k]) {
		t.Errorf("bytes before the change differ from the file")
	}
	if msg := w.wantClose(t, 0x107); !strings.Contains(msg, "changed while it was sent") {
		t.Errorf("session closed with 0x107 %q; want the file changed while it was sent", msg)
	}
	if !waitFor(scale(5*time.Second), func() bool {
		return strings.Contains(log.String(), "the file changed while it was sent; stream reset")
	}) {
		t.Errorf("no log line for the changed file:\n%s", log.String())
	}
}
