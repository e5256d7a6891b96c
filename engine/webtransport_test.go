package engine_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/zeebo/blake3"
)

// wtResult is what tools/wtclient prints for one session.
type wtResult struct {
	OK        bool              `json:"ok"`
	Error     string            `json:"error"`
	Status    int               `json:"status"`
	Headers   map[string]string `json:"headers"`
	Bytes     int64             `json:"bytes"`
	SentBytes int64             `json:"sent_bytes"`
	Blake3    string            `json:"blake3"`
	Verified  bool              `json:"verified"`
	StreamsOK int               `json:"streams_ok"`
	Datagrams struct {
		Received, Duplicates, Corrupt, OutOfRange, Lost, Sent, Size, Bytes int64
	} `json:"datagrams"`
	Closed struct {
		By      string `json:"by"`
		Code    uint32 `json:"code"`
		Message string `json:"message"`
		Capsule bool   `json:"capsule"`
	} `json:"closed"`
	StreamResetCodes []uint32    `json:"stream_reset_codes"`
	Sessions         []*wtResult `json:"sessions"`
}

var (
	wtclientOnce sync.Once
	wtclientPath string
	wtclientErr  error
)

// wtclient builds tools/wtclient, the independent client (webtransport-go
// in a module of its own), once per test binary. .ci/run downloads its
// modules; a failed build fails the test, never skips it.
func wtclient(t *testing.T) string {
	t.Helper()
	wtclientOnce.Do(func() {
		dir, err := os.MkdirTemp("", "wtclient")
		if err != nil {
			wtclientErr = err
			return
		}
		wtclientPath = filepath.Join(dir, "wtclient")
		cmd := exec.Command("go", "build", "-o", wtclientPath, ".")
		cmd.Dir = filepath.Join("..", "tools", "wtclient")
		if out, err := cmd.CombinedOutput(); err != nil {
			wtclientErr = fmt.Errorf("go build tools/wtclient: %v\n%s", err, out)
		}
	})
	if wtclientErr != nil {
		t.Fatal(wtclientErr)
	}
	return wtclientPath
}

// wtRun runs the independent client against the diagnostics endpoint
// with query and flags, and returns its report.
func wtRun(t *testing.T, ts *testServer, pki *testPKI, query string, flags ...string) *wtResult {
	t.Helper()
	r, err := wtTry(wtclient(t), ts, pki, query, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// wtTry is wtRun for other goroutines than the test's: it reports
// failures instead of ending the test.
func wtTry(bin string, ts *testServer, pki *testPKI, query string, flags ...string) (*wtResult, error) {
	args := append([]string{"-url", "https://" + ts.addr + "/.well-known/engine/diagnostics?" + query,
		"-ca", pki.caFile, "-sni", "localhost", "-timeout", scale(20 * time.Second).String()}, flags...)
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("wtclient %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var r wtResult
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("wtclient output %q: %v", out, err)
	}
	return &r, nil
}

const wtConf = `[webtransport]
enabled = true
allowed_origins = ["https://media.example.com"]
max_sessions = 3
max_streams_per_session = 4
max_datagram_bytes = 1000
max_bytes_per_session = "8MiB"
idle_timeout = "2s"
`

// TestWebTransportIndependentClient: webtransport-go's client (another
// implementation of the protocol) against every mode and limit of the
// diagnostics endpoint, over loopback.
func TestWebTransportIndependentClient(t *testing.T) {
	root := siteRoot(t)
	file := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB
	writeFile(t, filepath.Join(root, "media.bin"), string(file))
	writeFile(t, filepath.Join(root, "big9m.bin"), strings.Repeat("x", 9<<20))
	var log syncBuffer
	pki := newPKI(t, t.TempDir(), "localhost")
	ts := startLog(t, fmt.Sprintf("root = %q\n[[sites]]\ndomain = \"localhost\"\nroot = %q\n[sites.tls]\ncert = %q\nkey = %q\n%s%s",
		root, root, pki.certFile, pki.keyFile, ktlsAuto, wtConf), &log)

	t.Run("echo", func(t *testing.T) {
		r := wtRun(t, ts, pki, "mode=echo", "-op", "echo", "-streams", "3", "-bytes", "500000", "-datagrams", "50", "-dgsize", "900")
		if !r.OK || r.StreamsOK != 3 || r.Bytes != 3*500000 || r.Status != 200 {
			t.Fatalf("echo: %+v", r)
		}
		if r.Datagrams.Received == 0 || r.Datagrams.Corrupt != 0 || r.Datagrams.Received+r.Datagrams.Lost != 50 {
			t.Errorf("echoed datagrams: %+v", r.Datagrams)
		}
		if r.Closed.By != "local" || r.Closed.Code != 0 {
			t.Errorf("session end: %+v", r.Closed)
		}
	})
	t.Run("source generated", func(t *testing.T) {
		r := wtRun(t, ts, pki, "mode=source&bytes=5000000", "-op", "source")
		if !r.OK || !r.Verified || r.Bytes != 5000000 || r.Headers["Engine-Source-Bytes"] != "5000000" {
			t.Fatalf("source: %+v", r)
		}
	})
	t.Run("source file", func(t *testing.T) {
		// The first session may find the digest unknown: 503 and
		// Retry-After while it is computed.
		var r *wtResult
		if !waitFor(scale(10*time.Second), func() bool {
			r = wtRun(t, ts, pki, "mode=source&file=/media.bin", "-op", "source")
			return r.Status != 503
		}) {
			t.Fatalf("source file: still 503: %+v", r)
		}
		if !r.OK || !r.Verified || r.Bytes != int64(len(file)) || !strings.HasPrefix(r.Headers["Repr-Digest"], "blake3=:") {
			t.Fatalf("source file: %+v", r)
		}
		// The client checked what it got against Repr-Digest; that
		// digest must be the file's own.
		if sum := blake3.Sum256(file); r.Blake3 != hex.EncodeToString(sum[:]) {
			t.Errorf("source file: received BLAKE3 %s, the file's is %x", r.Blake3, sum)
		}
		if r := wtRun(t, ts, pki, "mode=source&file=/nope.bin", "-op", "source"); r.Status != 404 {
			t.Errorf("missing file: %+v", r)
		}
		if r := wtRun(t, ts, pki, "mode=source&file=/../../etc/passwd", "-op", "source"); r.Status == 200 {
			t.Errorf("file outside the root: %+v", r)
		}
	})
	t.Run("exactly the byte limit", func(t *testing.T) {
		// 8 MiB is max_bytes_per_session: the whole of it is sent, and
		// the client's close is a close, not a limit hit.
		r := wtRun(t, ts, pki, "mode=source&bytes=8388608", "-op", "source")
		if !r.OK || !r.Verified || r.Bytes != 8<<20 || r.Closed.By != "local" {
			t.Fatalf("source of max_bytes_per_session: %+v", r)
		}
		if r := wtRun(t, ts, pki, "mode=source&file=/big9m.bin", "-op", "source"); r.Status != 400 {
			t.Errorf("a file over max_bytes_per_session: %+v", r)
		}
	})
	t.Run("sink", func(t *testing.T) {
		r := wtRun(t, ts, pki, "mode=sink", "-op", "sink", "-streams", "4", "-bytes", "1000000")
		if !r.OK || r.StreamsOK != 4 {
			t.Fatalf("sink: %+v", r)
		}
	})
	t.Run("datagrams", func(t *testing.T) {
		r := wtRun(t, ts, pki, "mode=datagrams&rate=2000&count=1000", "-op", "datagrams")
		d := r.Datagrams
		if !r.OK || d.Sent != 1000 || d.Size != 1000 || d.Corrupt != 0 || d.OutOfRange != 0 || d.Duplicates != 0 ||
			d.Received+d.Lost != 1000 || d.Received < 900 {
			t.Fatalf("datagrams: %+v", r)
		}
		if r.Headers["Engine-Datagram-Bytes"] != "1000" {
			t.Errorf("Engine-Datagram-Bytes %q", r.Headers["Engine-Datagram-Bytes"])
		}
	})
	t.Run("origin", func(t *testing.T) {
		if r := wtRun(t, ts, pki, "mode=echo", "-op", "echo", "-origin", "https://evil.example"); r.Status != 403 {
			t.Errorf("foreign Origin: %+v", r)
		}
		if r := wtRun(t, ts, pki, "mode=echo", "-op", "echo", "-origin", "https://media.example.com"); !r.OK {
			t.Errorf("allowed Origin: %+v", r)
		}
		if !strings.Contains(log.String(), `Origin \"https://evil.example\" is not in webtransport.allowed_origins`) {
			t.Errorf("no log line for the refused Origin:\n%s", log.String())
		}
	})
	t.Run("bad queries", func(t *testing.T) {
		for _, q := range []string{"", "mode=nope", "mode=echo&x=1", "mode=source", "mode=source&bytes=0",
			"mode=source&bytes=99999999999", "mode=source&bytes=10&file=/media.bin", "mode=datagrams&rate=10",
			"mode=datagrams&rate=10&count=100000", "mode=echo&mode=echo", "mode=%zz"} {
			if r := wtRun(t, ts, pki, q, "-op", "echo"); r.Status != 400 {
				t.Errorf("query %q: %+v", q, r)
			}
		}
	})
	t.Run("closed by the client", func(t *testing.T) {
		r := wtRun(t, ts, pki, "mode=echo", "-op", "close", "-code", "7", "-msg", "bye")
		if !r.OK {
			t.Fatalf("close: %+v", r)
		}
		if !waitFor(scale(5*time.Second), func() bool {
			return strings.Contains(log.String(), `by=client code=7 reason=bye`)
		}) {
			t.Errorf("the server did not log the client's close:\n%s", log.String())
		}
	})
	t.Run("idle", func(t *testing.T) {
		start := time.Now()
		r := wtRun(t, ts, pki, "mode=echo", "-op", "hold")
		if r.Closed.By != "remote" || r.Closed.Code != 0x100 || !strings.Contains(r.Closed.Message, "idle_timeout") {
			t.Fatalf("idle session: %+v", r.Closed)
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Errorf("closed after %v, before idle_timeout", d)
		}
	})
	t.Run("too many streams", func(t *testing.T) {
		r := wtRun(t, ts, pki, "mode=echo", "-op", "hold", "-streams", "5")
		if r.Closed.By != "remote" || r.Closed.Code != 0x101 {
			t.Fatalf("5 streams: %+v", r.Closed)
		}
	})
	t.Run("byte limit", func(t *testing.T) {
		// Another session and a file download go on while one floods.
		var wg sync.WaitGroup
		var other *wtResult
		var otherErr error
		bin := wtclient(t)
		wg.Go(func() { other, otherErr = wtTry(bin, ts, pki, "mode=source&bytes=3000000", "-op", "source") })
		c, _ := h3Client(t, pki)
		wg.Go(func() {
			resp, err := c.Get("https://" + ts.addr + "/media.bin")
			if err != nil {
				t.Errorf("download beside the flood: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Equal(b, file) {
				t.Errorf("download beside the flood: %d bytes, not the file", len(b))
			}
		})
		r := wtRun(t, ts, pki, "mode=echo", "-op", "flood")
		if r.Closed.By != "remote" || r.Closed.Code != 0x102 {
			t.Fatalf("flood: %+v", r)
		}
		if r.SentBytes < 4<<20 || r.SentBytes > 16<<20 {
			t.Errorf("the flood sent %d bytes before the 8 MiB (both ways) limit closed it", r.SentBytes)
		}
		wg.Wait()
		if otherErr != nil {
			t.Fatal(otherErr)
		}
		if !other.OK || !other.Verified {
			t.Errorf("the session beside the flood: %+v", other)
		}
	})
	t.Run("datagram too large", func(t *testing.T) {
		r := wtRun(t, ts, pki, "mode=echo", "-op", "bigdatagram", "-dgsize", "1100")
		if r.Closed.By != "remote" || r.Closed.Code != 0x103 {
			t.Fatalf("1100-byte datagram: %+v", r.Closed)
		}
	})
	t.Run("refused streams", func(t *testing.T) {
		// A source session takes no streams from the client: they are
		// reset with 0x104 and the session goes on.
		r := wtRun(t, ts, pki, "mode=sink", "-op", "sink")
		if !r.OK {
			t.Fatal(r)
		}
		r = wtRun(t, ts, pki, "mode=datagrams&rate=100&count=10", "-op", "echo", "-bytes", "10")
		if r.OK || !containsCode(r.StreamResetCodes, 0x104) {
			t.Errorf("a stream in a datagrams session: %+v", r)
		}
	})
	t.Run("max sessions", func(t *testing.T) {
		r := wtRun(t, ts, pki, "mode=echo", "-op", "hold", "-sessions", "5")
		var ok, refused int
		for _, s := range r.Sessions {
			switch s.Status {
			case 200:
				ok++
			case 503:
				refused++
			}
		}
		if ok != 3 || refused != 2 {
			t.Fatalf("5 sessions with max_sessions = 3: %d accepted, %d refused", ok, refused)
		}
		// Once they idle out, slots are free again.
		if r := wtRun(t, ts, pki, "mode=echo", "-op", "echo"); !r.OK {
			t.Errorf("a session after the others ended: %+v", r)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		var fams map[string]*dto.MetricFamily
		waitFor(scale(5*time.Second), func() bool {
			fams = finalMetrics(t, ts)
			return metric(t, fams, "engine_webtransport_sessions_open") == 0
		})
		if n := metric(t, fams, "engine_webtransport_sessions_open"); n != 0 {
			t.Errorf("%v sessions open after all ended", n)
		}
		if n := metric(t, fams, "engine_webtransport_sessions_refused_total"); n < 2 {
			t.Errorf("refused sessions: %v", n)
		}
		for code, min := range map[string]float64{"0x100": 1, "0x101": 1, "0x102": 1, "0x103": 1} {
			if n := metric(t, fams, "engine_webtransport_session_ends_total", "by=server", "code="+code); n < min {
				t.Errorf("sessions closed with %s: %v", code, n)
			}
		}
		if n := metric(t, fams, "engine_webtransport_session_ends_total", "by=client", "code="); n < 5 {
			t.Errorf("sessions closed by the client: %v", n)
		}
		if in, out := metric(t, fams, "engine_webtransport_bytes_received_total"), metric(t, fams, "engine_webtransport_bytes_sent_total"); in < 8e6 || out < 12e6 {
			t.Errorf("bytes received %v, sent %v", in, out)
		}
		if n := metric(t, fams, "engine_webtransport_datagrams_sent_total"); n < 1000 {
			t.Errorf("datagrams sent: %v", n)
		}
	})
	if t.Failed() {
		t.Logf("server log:\n%s", log.String())
	}
}

func containsCode(codes []uint32, c uint32) bool {
	for _, x := range codes {
		if x == c {
			return true
		}
	}
	return false
}

// TestWebTransportShutdown: with WebTransport on, connections are served
// raw and a stop sends no GOAWAY; instead the response in flight
// finishes, a new request on the same connection is refused with
// H3_REQUEST_REJECTED (safe to retry), and the server stops once the
// response is out.
func TestWebTransportShutdown(t *testing.T) {
	stopDuringDownload(t, wtConf, func(t *testing.T, err error) {
		if he := (*http3.Error)(nil); !errors.As(err, &he) || he.ErrorCode != http3.ErrCodeRequestRejected {
			t.Errorf("new request during the stop: %v, want H3_REQUEST_REJECTED", err)
		}
	})
}

// TestWebTransportHeaderTimeout: on a raw-served connection a stream
// whose first bytes never come is reset after header_timeout, so it
// cannot hold the connection open.
func TestWebTransportHeaderTimeout(t *testing.T) {
	root := siteRoot(t)
	ts, pki := startTLS(t, root, ktlsAuto+"[limits]\nheader_timeout = \"1s\"\n"+wtConf)
	c := dialQUIC(t, ts.addr, pki)
	str, err := c.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	str.Write([]byte{0x01}) // a HEADERS frame type, and nothing more
	str.SetReadDeadline(time.Now().Add(scale(10 * time.Second)))
	_, err = io.ReadAll(str)
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeRequestIncomplete) {
		t.Fatalf("a stream without its head: %v, want reset with H3_REQUEST_INCOMPLETE", err)
	}
}
