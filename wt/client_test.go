package wt_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/zeebo/blake3"

	"github.com/mediaship/engine/engine"
	"github.com/mediaship/engine/engine/config"
	"github.com/mediaship/engine/wt"
)

// The client against the engine's diagnostics endpoint
// (docs/WEBTRANSPORT.md), over real sockets.

var insecure = &tls.Config{InsecureSkipVerify: true}

// serve runs an engine with a self-signed certificate and extra TOML
// until the test ends, and returns the endpoint's URL and its cancel
// (a graceful stop).
func serve(t *testing.T, extra string) (string, context.CancelFunc) {
	t.Helper()
	root := t.TempDir()
	os.WriteFile(root+"/f.bin", bytes.Repeat([]byte("file bytes "), 10000), 0o644)
	cfg, err := config.Parse("t.toml", root, []byte(fmt.Sprintf("root = %q\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"500ms\"\n%s", root, extra)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.SetFlag("self-signed", "true")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := engine.New(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return "https://" + srv.Addr() + "/.well-known/engine/diagnostics", cancel
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestClientEcho: streams and datagrams of an echo session come back as
// they were sent, several sessions share a connection, and a closed
// session is gone from it.
func TestClientEcho(t *testing.T) {
	base, _ := serve(t, "[webtransport]\nenabled = true\n")
	ctx := ctxFor(t)
	c, err := wt.DialConn(ctx, strings.TrimPrefix(strings.Split(base, "/.well-known")[0], "https://"), insecure, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		s, rsp, err := c.Dial(ctx, base+"?mode=echo", nil)
		if err != nil || rsp.StatusCode != 200 {
			t.Fatalf("session %d: %v, %v", i, rsp, err)
		}
		// Two streams at once, each echoed whole.
		for j := range 2 {
			str, err := s.OpenStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			msg := bytes.Repeat([]byte(fmt.Sprintf("session %d stream %d ", i, j)), 10000)
			go func() { str.Write(msg); str.Close() }()
			str.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(str)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("session %d stream %d: %d of %d bytes back, %v", i, j, len(got), len(msg), err)
			}
		}
		// Datagrams: unreliable, but on loopback the first of a few
		// tries comes back.
		msg := []byte(fmt.Sprintf("datagram of session %d", i))
		var got []byte
		for try := 0; try < 5 && got == nil; try++ {
			if err := s.SendDatagram(msg); err != nil {
				t.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			got, _ = s.ReceiveDatagram(dctx)
			cancel()
		}
		if !bytes.Equal(got, msg) {
			t.Errorf("datagram: got %q, want %q", got, msg)
		}
		if err := s.Close(0, "done"); err != nil {
			t.Errorf("Close: %v", err)
		}
		var se *wt.SessionError
		if !errors.As(s.Err(), &se) || se.Remote || se.Code != 0 || se.Message != "done" {
			t.Errorf("Err after Close = %v, want ours, code 0 \"done\"", s.Err())
		}
		if _, err := s.OpenStream(ctx); err == nil {
			t.Error("OpenStream on a closed session succeeded")
		}
	}
}

// TestClientSourceAndSink: a source session's one server stream carries
// the pattern; a sink session answers a stream with its length and
// BLAKE3; a stream the mode does not use is reset with the
// WebTransport code 0x104.
func TestClientSourceAndSink(t *testing.T) {
	base, _ := serve(t, "[webtransport]\nenabled = true\n")
	ctx := ctxFor(t)
	s, rsp, err := wt.Dial(ctx, base+"?mode=source&bytes=1000000", insecure, nil)
	if err != nil || rsp.Header.Get("Engine-Source-Bytes") != "1000000" {
		t.Fatalf("source: %v, %v", rsp, err)
	}
	str, err := s.AcceptUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(str)
	if err != nil || len(got) != 1000000 || wt.CheckPattern(got, 0) != -1 {
		t.Errorf("source: %d bytes, %v, first wrong byte %d", len(got), err, wt.CheckPattern(got, 0))
	}
	// No mode takes the client's unidirectional streams.
	u, err := s.OpenUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var se *quic.StreamError
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err = u.Write([]byte("x")); err != nil {
			break
		}
	}
	if code, ok := wt.AppCode(errorCode(err, &se)); !ok || code != 0x104 {
		t.Errorf("a refused stream: %v, want a reset with WebTransport code 0x104", err)
	}
	s.Close(0, "")

	s, _, err = wt.Dial(ctx, base+"?mode=sink", insecure, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(0, "")
	b, err := s.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("sunk "), 50000)
	b.Write(body)
	b.Close()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := io.ReadAll(b)
	sum := blake3.Sum256(body)
	if want := fmt.Sprintf("%d %x\n", len(body), sum); err != nil || string(line) != want {
		t.Errorf("sink: %q, %v; want %q", line, err, want)
	}
}

func errorCode(err error, se **quic.StreamError) quic.StreamErrorCode {
	if errors.As(err, se) {
		return (*se).ErrorCode
	}
	return 0
}

// TestClientRefusals: a refused CONNECT returns the response and an
// error, and opens nothing; a server without [webtransport] is
// ErrNotOffered before any CONNECT.
func TestClientRefusals(t *testing.T) {
	base, _ := serve(t, "[webtransport]\nenabled = true\n")
	ctx := ctxFor(t)
	for _, tt := range []struct {
		url    string
		hdr    http.Header
		status int
	}{
		{base + "?mode=nonsense", nil, 400},
		{base + "?mode=source&file=missing.bin", nil, 404},
		{base + "?mode=echo", http.Header{"Origin": {"https://elsewhere.example"}}, 403},
	} {
		s, rsp, err := wt.Dial(ctx, tt.url, insecure, tt.hdr)
		if s != nil || err == nil || rsp == nil || rsp.StatusCode != tt.status {
			t.Errorf("Dial(%s, %v) = %v, %v; want status %d and an error", tt.url, tt.hdr, rsp, err, tt.status)
		}
	}
	plain, _ := serve(t, "")
	if _, _, err := wt.Dial(ctx, plain+"?mode=echo", insecure, nil); !errors.Is(err, wt.ErrNotOffered) {
		t.Errorf("without [webtransport]: %v, want ErrNotOffered", err)
	}
}

// TestClientServerCloses: the server's close reaches the client with
// its code (idle_timeout: 0x100), and a graceful stop drains the session
// first (DRAIN_WEBTRANSPORT_SESSION), then ends it.
func TestClientServerCloses(t *testing.T) {
	base, stop := serve(t, "[webtransport]\nenabled = true\nidle_timeout = \"1s\"\n")
	ctx := ctxFor(t)
	s, _, err := wt.Dial(ctx, base+"?mode=echo", insecure, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("the idle session was not closed")
	}
	var se *wt.SessionError
	if !errors.As(s.Err(), &se) || !se.Remote || se.Code != 0x100 {
		t.Errorf("idle: Err = %v, want the server's close with 0x100", s.Err())
	}
	if !strings.Contains(s.Err().Error(), "closed by the server") {
		t.Errorf("idle: %q does not say the server closed it", s.Err())
	}
	s.Close(0, "")

	base, stop = serve(t, "[webtransport]\nenabled = true\n")
	s, _, err = wt.Dial(ctx, base+"?mode=echo", insecure, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(0, "")
	stop()
	select {
	case <-s.Draining():
	case <-ctx.Done():
		t.Fatal("no DRAIN_WEBTRANSPORT_SESSION on a graceful stop")
	}
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("the session outlived the shutdown grace")
	}
	// After the grace the server closes the session with 0x105 and the
	// connection with H3_NO_ERROR: either may arrive first.
	var ae *quic.ApplicationError
	switch {
	case errors.As(s.Err(), &se) && se.Remote && se.Code == 0x105:
	case errors.As(s.Err(), &ae) && ae.Remote && ae.ErrorCode == 0x100:
	default:
		t.Errorf("after the grace: %v, want the server's close with 0x105 or its H3_NO_ERROR", s.Err())
	}
}

// TestClientAddressShare: one client address holds at most
// max_sessions_per_address sessions at once; the next is refused (429)
// until one of its sessions ends.
func TestClientAddressShare(t *testing.T) {
	base, _ := serve(t, "[webtransport]\nenabled = true\nmax_sessions = 8\nmax_sessions_per_address = 2\n")
	ctx := ctxFor(t)
	var open []*wt.ClientSession
	for i := range 2 {
		s, rsp, err := wt.Dial(ctx, base+"?mode=echo", insecure, nil)
		if err != nil {
			t.Fatalf("session %d: %v %v", i+1, rsp, err)
		}
		open = append(open, s)
	}
	if s, rsp, err := wt.Dial(ctx, base+"?mode=echo", insecure, nil); s != nil || err == nil || rsp == nil || rsp.StatusCode != 429 {
		t.Fatalf("a third session from the address: %v, %v; want 429", rsp, err)
	}
	open[0].Close(0, "done")
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, rsp, err := wt.Dial(ctx, base+"?mode=echo", insecure, nil)
		if err == nil {
			s.Close(0, "done")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one of its sessions ended: %v, %v", rsp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	open[1].Close(0, "done")
}
