package main

// The client against webtransport-go's own server (server_test.go) over
// loopback: every operation, through the CLI entry point, its JSON read
// back.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/webtransport-go"
	"github.com/zeebo/blake3"
)

// TestMain lets the tests run this test binary as the command itself.
func TestMain(m *testing.M) {
	if os.Getenv("WTCLIENT_TEST_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// client runs the command in-process with args and decodes its one JSON
// object into out.
func client(t *testing.T, out any, args ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := cli(args, &stdout, &stderr); code != 0 {
		t.Fatalf("wtclient %q: exit %d, stderr %s", args, code, stderr.String())
	}
	text := stdout.String()
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("wtclient %q: %v in %s", args, err, text)
	}
	if dec.More() {
		t.Fatalf("wtclient %q: more than one JSON object: %s", args, text)
	}
	t.Logf("wtclient %s\n%s", strings.Join(args, " "), text)
}

func session(t *testing.T, ts *testServer, query string, args ...string) *SessionResult {
	t.Helper()
	var r SessionResult
	client(t, &r, append([]string{"-url", ts.url(query), "-ca", ts.caFile, "-timeout", "10s"}, args...)...)
	return &r
}

func patternBlake3(n int) string {
	b := make([]byte, n)
	fillPattern(b, 0)
	sum := blake3.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func wantOK(t *testing.T, r *SessionResult) {
	t.Helper()
	if !r.OK || r.Error != "" || r.Status != 200 {
		t.Fatalf("ok %v, error %q, status %d; want ok, no error, 200", r.OK, r.Error, r.Status)
	}
}

// wantClosedLocally: the operation ended the session itself, with code 0.
func wantClosedLocally(t *testing.T, r *SessionResult) {
	t.Helper()
	if want := (Closed{By: "local", Code: 0, Capsule: true}); r.Closed != want {
		t.Errorf("closed %+v, want %+v", r.Closed, want)
	}
}

func TestEcho(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=echo", "-op", "echo", "-streams", "4", "-bytes", "300000", "-datagrams", "20", "-dgsize", "500", "-origin", "https://media.example.com")
	wantOK(t, r)
	if r.StreamsOK != 4 || r.Bytes != 4*300000 || r.SentBytes != 4*300000 || !r.Verified {
		t.Errorf("streams_ok %d, bytes %d, sent_bytes %d, verified %v", r.StreamsOK, r.Bytes, r.SentBytes, r.Verified)
	}
	d := r.Datagrams
	if d.Sent != 20 || d.Size != 500 || d.Received+d.Lost != 20 || d.Corrupt+d.Duplicates+d.OutOfRange != 0 {
		t.Errorf("datagrams %+v", d)
	}
	if d.Received == 0 {
		t.Errorf("no datagram echoed on loopback: %+v", d)
	}
	wantClosedLocally(t, r)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if want := []string{"https://media.example.com"}; !slices.Equal(ts.origins, want) {
		t.Errorf("the server saw Origin %q, want %q", ts.origins, want)
	}
	if want := []string{"webtransport-h3"}; !slices.Equal(ts.protos, want) {
		t.Errorf("the server saw :protocol %q, want %q", ts.protos, want)
	}
}

func TestEchoNoOrigin(t *testing.T) {
	ts := startServer(t)
	wantOK(t, session(t, ts, "mode=echo", "-op", "echo", "-bytes", "0"))
	if ts.origins[0] != "" {
		t.Errorf("Origin %q sent without -origin", ts.origins[0])
	}
}

func TestSource(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=source&bytes=1000003", "-op", "source")
	wantOK(t, r)
	if r.Bytes != 1000003 || !r.Verified || r.Blake3 != patternBlake3(1000003) || r.Headers["Engine-Source-Bytes"] != "1000003" {
		t.Errorf("bytes %d, verified %v, blake3 %s, headers %v", r.Bytes, r.Verified, r.Blake3, r.Headers)
	}
	wantClosedLocally(t, r)
	// The server sees the client's CLOSE_WEBTRANSPORT_SESSION, code 0.
	var sessErr *webtransport.SessionError
	if errs := ts.sessionErrs(1); !errors.As(errs[0], &sessErr) || !sessErr.Remote || sessErr.ErrorCode != 0 {
		t.Errorf("the server's session ended with %v, want the client's close with code 0", errs[0])
	}
}

func TestSourceFailures(t *testing.T) {
	ts := startServer(t)
	for _, tc := range []struct{ query, err string }{
		{"mode=source&bytes=100000&flip=77777", "byte 77777 is not the pattern"},
		{"mode=source&bytes=100000&lie=1", "100000 bytes received, Engine-Source-Bytes says 100001"},
		{"mode=source&file=baddigest", "Repr-Digest says"},
	} {
		r := session(t, ts, tc.query, "-op", "source")
		if r.OK || r.Verified || r.Status != 200 || !strings.Contains(r.Error, tc.err) {
			t.Errorf("%s: ok %v, verified %v, status %d, error %q; want not ok, an error with %q", tc.query, r.OK, r.Verified, r.Status, r.Error, tc.err)
		}
	}
}

func TestSourceFile(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=source&file=/a", "-op", "source")
	wantOK(t, r)
	if !r.Verified || !strings.HasPrefix(r.Headers["Repr-Digest"], "blake3=:") || r.Bytes != 32000 {
		t.Errorf("verified %v, bytes %d, headers %v", r.Verified, r.Bytes, r.Headers)
	}
}

func TestSink(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=sink", "-op", "sink", "-streams", "3", "-bytes", "200001")
	wantOK(t, r)
	if r.StreamsOK != 3 || r.SentBytes != 3*200001 || !r.Verified || r.Blake3 != patternBlake3(200001) {
		t.Errorf("streams_ok %d, sent_bytes %d, verified %v, blake3 %s", r.StreamsOK, r.SentBytes, r.Verified, r.Blake3)
	}
	wantClosedLocally(t, r)
}

func TestSinkAgainstEcho(t *testing.T) {
	// An echo server's reply is the bytes, not the sink's line.
	ts := startServer(t)
	r := session(t, ts, "mode=echo", "-op", "sink", "-bytes", "100")
	if r.OK || !strings.Contains(r.Error, "sink reply") {
		t.Errorf("ok %v, error %q; want a sink reply error", r.OK, r.Error)
	}
}

func TestDatagrams(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=datagrams&rate=1000&count=40&size=600", "-op", "datagrams", "-grace", "200ms")
	wantOK(t, r)
	d := r.Datagrams
	if d.Sent != 40 || d.Size != 600 || d.Received+d.Lost != 40 || d.Corrupt+d.Duplicates+d.OutOfRange != 0 || d.Bytes != 600*d.Received || r.Bytes != d.Bytes {
		t.Errorf("datagrams %+v, bytes %d", d, r.Bytes)
	}
	if d.Received == 0 || d.ElapsedS <= 0 || d.MiBs <= 0 {
		t.Errorf("datagrams %+v: none received on loopback, or no rate", d)
	}
	if r.Headers["Engine-Datagram-Bytes"] != "600" {
		t.Errorf("headers %v", r.Headers)
	}
	wantClosedLocally(t, r)
}

func TestDatagramsBad(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=datagrams&rate=1000&count=10&size=100&bad=1", "-op", "datagrams", "-grace", "200ms")
	d := r.Datagrams
	if r.OK || r.Verified || d.Corrupt != 1 || d.Duplicates != 1 || d.OutOfRange != 1 || d.Received+d.Lost != 10 {
		t.Errorf("ok %v, verified %v, datagrams %+v; want 1 corrupt, 1 duplicate, 1 out of range", r.OK, r.Verified, d)
	}
}

func TestHoldClosedByServer(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=close&after=300&code=256&msg=idle_timeout", "-op", "hold", "-streams", "2")
	wantOK(t, r)
	if want := (Closed{By: "remote", Code: 0x100, Message: "idle_timeout", Capsule: true}); r.Closed != want {
		t.Errorf("closed %+v, want %+v", r.Closed, want)
	}
	if r.StreamsOK != 2 {
		t.Errorf("streams_ok %d, want 2", r.StreamsOK)
	}
}

func TestHoldRefusedStreams(t *testing.T) {
	ts := startServer(t)
	var r SessionResult
	client(t, &r, "-url", ts.url("mode=refuse"), "-ca", ts.caFile, "-timeout", "1s", "-op", "hold", "-streams", "3")
	if r.OK || !strings.Contains(r.Error, "still open") || !strings.Contains(r.Error, "timeout") {
		t.Errorf("ok %v, error %q; want a timeout with the session open", r.OK, r.Error)
	}
	if !slices.Contains(r.StreamResetCodes, 0x104) {
		t.Errorf("stream_reset_codes %v, want 0x104 among them", r.StreamResetCodes)
	}
	wantClosedLocally(t, &r)
}

func TestClose(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=echo", "-op", "close", "-code", "0x2a", "-msg", "bye now")
	wantOK(t, r)
	if want := (Closed{By: "local", Code: 42, Message: "bye now", Capsule: true}); r.Closed != want {
		t.Errorf("closed %+v, want %+v", r.Closed, want)
	}
	var sessErr *webtransport.SessionError
	if errs := ts.sessionErrs(1); !errors.As(errs[0], &sessErr) || sessErr.ErrorCode != 42 || sessErr.Message != "bye now" {
		t.Errorf("the server's session ended with %v, want the client's code 42 and message", errs[0])
	}
}

func TestFlood(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=echo&limit=3000000", "-op", "flood")
	wantOK(t, r)
	if want := (Closed{By: "remote", Code: 0x102, Message: "max_bytes_per_session", Capsule: true}); r.Closed != want {
		t.Errorf("closed %+v, want %+v", r.Closed, want)
	}
	if r.SentBytes < 3000000 {
		t.Errorf("sent_bytes %d, want at least the limit", r.SentBytes)
	}
}

func TestBigDatagram(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=echo&maxdg=1200", "-op", "bigdatagram", "-dgsize", "1201")
	wantOK(t, r)
	if want := (Closed{By: "remote", Code: 0x103, Message: "datagram too large", Capsule: true}); r.Closed != want {
		t.Errorf("closed %+v, want %+v", r.Closed, want)
	}
}

func TestSessions(t *testing.T) {
	ts := startServer(t)
	ts.maxSessions.Store(1)
	var m MultiResult
	// hold=3: the session admitted keeps its slot until all three
	// requests came (10 bytes each finished before the next arrived, and
	// all three passed, in one suite run).
	client(t, &m, "-url", ts.url("mode=source&bytes=10&hold=3"), "-ca", ts.caFile, "-timeout", "10s", "-op", "source", "-sessions", "3")
	if m.OK || len(m.Sessions) != 3 {
		t.Fatalf("ok %v, %d sessions; want not ok, 3", m.OK, len(m.Sessions))
	}
	// webtransport-go's server takes one session per connection without
	// WebTransport flow control; the stand-in's own limit answers 503
	// before that, as the engine's max_sessions does.
	statuses := map[int]int{}
	for _, s := range m.Sessions {
		statuses[s.Status]++
		if s.Status == 503 && (s.OK || s.Headers["Retry-After"] != "1") {
			t.Errorf("a 503 session: %+v", s)
		}
		if s.Status == 200 && !s.OK {
			t.Errorf("a 200 session not ok: %+v", s)
		}
	}
	if statuses[200] < 1 || statuses[200]+statuses[503] != 3 {
		t.Errorf("statuses %v, want 200s and 503s", statuses)
	}
}

func TestNotFound(t *testing.T) {
	ts := startServer(t)
	var r SessionResult
	client(t, &r, "-url", "https://"+ts.addr+"/elsewhere", "-ca", ts.caFile, "-timeout", "5s")
	if r.OK || r.Status != 404 || !strings.Contains(r.Error, "404") || r.Closed.By != "none" {
		t.Errorf("ok %v, status %d, error %q, closed %+v; want a failed 404", r.OK, r.Status, r.Error, r.Closed)
	}
}

func TestUntrustedCertificate(t *testing.T) {
	ts := startServer(t)
	var r SessionResult
	client(t, &r, "-url", ts.url("mode=echo"), "-timeout", "5s")
	if r.OK || r.Status != 0 || !strings.Contains(r.Error, "certificate") {
		t.Errorf("ok %v, status %d, error %q; want a certificate error", r.OK, r.Status, r.Error)
	}
	client(t, &r, "-url", ts.url("mode=echo"), "-insecure", "-timeout", "5s", "-bytes", "10")
	wantOK(t, &r)
}

// TestTimeout: a server that does nothing; every operation that waits on
// it ends at -timeout with the JSON saying so.
func TestTimeout(t *testing.T) {
	ts := startServer(t)
	for _, op := range []string{"echo", "source", "sink", "datagrams", "hold", "flood"} {
		start := time.Now()
		var r SessionResult
		client(t, &r, "-url", ts.url("mode=idle&count=3"), "-ca", ts.caFile, "-timeout", "700ms", "-op", op, "-bytes", "20000000")
		if r.OK || r.Status != 200 || !strings.Contains(r.Error, "timeout") {
			t.Errorf("%s: ok %v, status %d, error %q; want a timeout", op, r.OK, r.Status, r.Error)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s: took %v with a 700ms -timeout", op, d)
		}
		wantClosedLocally(t, &r)
	}
}

// TestSessionClosedMidStream: the server ends the session while the echo
// is under way; the error says how, code included, and closed says it.
func TestSessionClosedMidStream(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=closemid", "-op", "echo", "-bytes", "10000000")
	if r.OK || !strings.Contains(r.Error, "session closed by the server with code 0x102") {
		t.Errorf("ok %v, error %q; want the session's close in the error", r.OK, r.Error)
	}
	if want := (Closed{By: "remote", Code: 0x102, Capsule: true}); r.Closed != want {
		t.Errorf("closed %+v, want %+v", r.Closed, want)
	}
}

// TestConnectStreamFinished: the server finishes the CONNECT stream
// without a CLOSE_WEBTRANSPORT_SESSION capsule.
func TestConnectStreamFinished(t *testing.T) {
	ts := startServer(t)
	r := session(t, ts, "mode=fin", "-op", "hold")
	wantOK(t, r)
	if r.Closed.By != "remote" || r.Closed.Code != 0 || r.Closed.Capsule || !strings.Contains(r.Closed.Detail, "without a CLOSE_WEBTRANSPORT_SESSION") {
		t.Errorf("closed %+v, want by the server without a capsule", r.Closed)
	}
	if len(r.StreamErrors) != 0 {
		t.Errorf("stream_errors %q: the session's end is in closed, not there", r.StreamErrors)
	}
}

func TestNoServer(t *testing.T) {
	var r SessionResult
	client(t, &r, "-url", "https://127.0.0.1:9/x", "-insecure", "-timeout", "300ms")
	if r.OK || !strings.Contains(r.Error, "timeout") {
		t.Errorf("ok %v, error %q; want a timeout", r.OK, r.Error)
	}
}

// TestCommand runs the command as a process: one JSON line on stdout and
// exit 0 for a run, exit 2 and nothing on stdout for bad flags.
func TestCommand(t *testing.T) {
	ts := startServer(t)
	cmd := exec.Command(os.Args[0], "-url", ts.url("mode=echo"), "-ca", ts.caFile, "-bytes", "1000")
	cmd.Env = append(os.Environ(), "WTCLIENT_TEST_MAIN=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var fields map[string]any
	if err := json.Unmarshal(out, &fields); err != nil || bytes.Count(out, []byte("\n")) != 1 {
		t.Fatalf("stdout %q: %v", out, err)
	}
	for _, k := range []string{"ok", "error", "status", "headers", "bytes", "sent_bytes", "blake3", "verified", "streams_ok", "datagrams", "closed", "stream_reset_codes", "elapsed_s"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("no %q in %s", k, out)
		}
	}
	if fields["ok"] != true {
		t.Errorf("not ok: %s", out)
	}

	for _, args := range [][]string{
		{},
		{"-url", "https://x/", "-op", "nosuch"},
		{"-url", "http://x/"},
		{"-url", "https://x/", "-dgsize", "7"},
		{"-url", "https://x/", "-ca", "f", "-insecure"},
		{"-url", "https://x/", "-code", "0x100000000"},
		{"-url", "https://x/", "stray"},
		{"-nosuchflag"},
	} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "WTCLIENT_TEST_MAIN=1")
		out, err := cmd.Output()
		if exitErr, ok := err.(*exec.ExitError); !ok || exitErr.ExitCode() != 2 || len(out) != 0 {
			t.Errorf("wtclient %q: %v, stdout %q; want exit 2 and no output", args, err, out)
		}
	}
}
