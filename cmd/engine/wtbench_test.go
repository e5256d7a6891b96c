package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediaship/engine/bench"
)

// wtConfig turns on the engine's WebTransport diagnostics endpoint.
const wtConfig = "[webtransport]\nenabled = true\nmax_datagram_bytes = 1000\n"

const wtPath = "/.well-known/engine/diagnostics"

// benchJSON runs engine bench with args and --json, and parses the
// report (nil when it printed none).
func benchJSON(t *testing.T, args ...string) (int, *bench.Report, string) {
	t.Helper()
	code, out, errs := run2(append(append([]string{"bench"}, args...), "--json")...)
	var r bench.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return code, nil, out + errs
	}
	return code, &r, out + errs
}

// TestBenchWebTransportSource: engine bench --protocol webtransport
// against the engine's diagnostics endpoint, mode=source with generated
// bytes: every sample accepted, every byte that arrived verified against
// the pattern, in JSON and in text (sessions per second, sessions per
// connection).
func TestBenchWebTransportSource(t *testing.T) {
	srv := startServer(t, t.TempDir(), wtConfig, "self-signed", "true")
	u := "https://" + srv.Addr() + wtPath + "?mode=source&bytes=3000000"
	args := []string{u, "--protocol", "webtransport", "-k", "--connections", "2", "--streams", "2",
		"--duration", "1s", "--samples", "2", "--warmup", "200ms"}
	code, r, out := benchJSON(t, args...)
	if code != 0 || r == nil {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if r.Accepted != 2 || r.Bytes == 0 || r.Bytes != r.BytesReceived || len(r.Errors) != 0 || r.Datagrams != nil ||
		!strings.Contains(r.Checked, "pattern") || r.Protocol != "webtransport" || r.ConnectionsOpened != 2 {
		t.Errorf("report: accepted %d, %d of %d bytes verified, errors %v, checked %q, %d connections, datagrams %v",
			r.Accepted, r.Bytes, r.BytesReceived, r.Errors, r.Checked, r.ConnectionsOpened, r.Datagrams)
	}
	code, out, errs := run2(append([]string{"bench"}, args...)...)
	if code != 0 || !strings.Contains(out, "webtransport, 2 connection(s) x 2 session(s)") ||
		!regexp.MustCompile(`(?m)^ +1 +[\d.]+ MiB/s +[\d.]+ ses/s .* accepted$`).MatchString(out) {
		t.Errorf("text: exit %d\n%s%s", code, out, errs)
	}
}

// TestBenchWebTransportFileChanged: mode=source&file= is checked against
// the file's Repr-Digest. A file rewritten in place under the engine,
// with its size and mtime kept, is a new content to the engine (its
// change time is in the content's identity): sessions for it are refused
// (503) until it is hashed again, or reset (0x107) if the old bytes'
// digest was already promised, and then served under the new digest. A
// session bench does not verify counts no byte; the sessions it accepts
// carry the new bytes under their own digest. What the server does when
// the bytes change under a stream is engine's
// TestWebTransportSourceFileChanged.
func TestBenchWebTransportFileChanged(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "f.bin")
	orig := bytes.Repeat([]byte("webtransport file "), 4<<20/18)
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	srv := startServer(t, root, wtConfig, "self-signed", "true")
	u := "https://" + srv.Addr() + wtPath + "?mode=source&file=f.bin"
	args := []string{u, "--protocol", "webtransport", "-k", "--requests", "4", "--samples", "1", "--warmup", "0s"}
	// The first sessions may be refused (503) until the digest is known.
	var r *bench.Report
	var code int
	var out string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, r, out = benchJSON(t, args...); code == 0 || time.Now().After(deadline) {
			break
		}
	}
	if code != 0 || r == nil || r.Bytes != 4*int64(len(orig)) || !strings.Contains(r.Checked, "Repr-Digest") {
		t.Fatalf("before the change: exit %d\n%s", code, out)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("CHANGED"), int64(len(orig)/2))
	f.Close()
	os.Chtimes(path, st.ModTime(), st.ModTime())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, r, out = benchJSON(t, args...)
		if r == nil {
			t.Fatalf("after the change: exit %d, no report\n%s", code, out)
		}
		if code == 0 {
			break
		}
		// Sessions are refused (503 until hashed again) or reset
		// (0x107); one that ended cleanly with bytes its digest does not
		// describe would show as a digest error.
		if r.Errors["digest"] != 0 {
			t.Errorf("after the change, a run that failed: %d sessions got bytes other than their digest, errors %v", r.Errors["digest"], r.Errors)
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the change: no run verified the new bytes in 10s; last: exit %d, errors %v", code, r.Errors)
		}
	}
	if r.Bytes != 4*int64(len(orig)) || !strings.Contains(r.Checked, "Repr-Digest") {
		t.Fatalf("after the change: %d bytes verified, want %d\n%s", r.Bytes, 4*len(orig), out)
	}
}

// TestBenchWebTransportDatagrams: mode=datagrams over a path that drops
// one in 8 of the server's packets: datagrams are lost (QUIC does not
// resend them), the loss is reported per sample and in total, and the
// samples are still accepted, because every datagram that did arrive
// was right; the server's streams (its closing line) are resent.
func TestBenchWebTransportDatagrams(t *testing.T) {
	srv := startServer(t, t.TempDir(), wtConfig, "self-signed", "true")
	relay := lossyRelay(t, srv.Addr(), 8)
	u := "https://" + relay + wtPath + "?mode=datagrams&rate=2000&count=400"
	code, r, out := benchJSON(t, u, "--protocol", "webtransport", "-k", "--streams", "2",
		"--duration", "1200ms", "--samples", "2", "--warmup", "200ms")
	if code != 0 || r == nil {
		t.Fatalf("exit %d\n%s", code, out)
	}
	d := r.Datagrams
	if d == nil || r.Accepted != 2 || len(r.Errors) != 0 || r.DatagramLoss == nil {
		t.Fatalf("accepted %d, errors %v, datagrams %+v, loss %+v\n%s", r.Accepted, r.Errors, d, r.DatagramLoss, out)
	}
	if d.Expected == 0 || d.Expected%400 != 0 || d.Lost == 0 || d.Received+d.Lost != d.Expected || d.Sent != d.Expected ||
		d.Corrupt != 0 || d.Duplicates != 0 || d.LossPercent <= 0 || d.LossPercent > 50 {
		t.Errorf("datagrams %+v: want some lost of whole sessions of 400, none wrong", *d)
	}
	// The bytes are the datagrams that arrived, 1000 bytes each.
	if r.Bytes == 0 || r.Bytes%1000 != 0 || r.Bytes != r.BytesReceived {
		t.Errorf("%d of %d bytes verified: want whole datagrams of 1000 bytes, all verified", r.Bytes, r.BytesReceived)
	}
	for i, s := range r.Samples {
		if s.Datagrams == nil || s.Datagrams.Expected == 0 {
			t.Errorf("sample %d: no datagram figures", i+1)
		}
	}
	// Straight to the engine, the text report says the same things.
	u = "https://" + srv.Addr() + wtPath + "?mode=datagrams&rate=2000&count=400"
	code, text, errs := run2("bench", u, "--protocol", "webtransport", "-k", "--duration", "600ms", "--samples", "1", "--warmup", "0s")
	if code != 0 || !regexp.MustCompile(`(?m)^ +1 .* ses/s  lost \d+/\d+ \([\d.]+%\)  .* accepted$`).MatchString(text) ||
		!regexp.MustCompile(`(?m)^datagrams: +\d+ expected, \d+ sent \(by the server\), \d+ received right, \d+ lost \([\d.]+%\), 0 duplicate, 0 corrupt$`).MatchString(text) {
		t.Errorf("text: exit %d\n%s%s", code, text, errs)
	}
}

// lossyRelay forwards UDP between clients and target (a loopback
// host:port) and drops every every-th packet from target to a client,
// after the first 30 of each client (the handshake goes through whole).
func lossyRelay(t *testing.T, target string, every int) string {
	t.Helper()
	ln, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ups := map[string]*net.UDPConn{} // guarded by mu: by client address
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := ln.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			up := ups[from.String()]
			if up == nil {
				if up, err = net.DialUDP("udp", nil, dst); err != nil {
					mu.Unlock()
					continue
				}
				ups[from.String()] = up
				go func() {
					b := make([]byte, 64<<10)
					for i := 0; ; i++ {
						n, err := up.Read(b)
						if err != nil {
							return
						}
						if i < 30 || i%every != 0 {
							ln.WriteTo(b[:n], from)
						}
					}
				}()
			}
			mu.Unlock()
			up.Write(buf[:n])
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, up := range ups {
			up.Close()
		}
	})
	return ln.LocalAddr().String()
}
