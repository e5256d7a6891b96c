package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// big is the lying servers' file: 4 MiB.
var big = bytes.Repeat([]byte("verified bytes only, please. "), 4<<20/29+1)[:4<<20]

type connKey struct{}

// liar serves big. With fault "honest-one", the first connection gets the
// truth paced at 8 MiB/s and every other one a correct head, 99% of the
// body as zeros, then a stall; "last-byte" flips the last byte of every
// response; "never-finishes" sends half the body and stalls. honest counts
// the bytes of correct bodies written.
type liar struct {
	fault  string
	conns  atomic.Int64
	honest atomic.Int64
}

func (l *liar) connContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, connKey{}, l.conns.Add(1))
}

func (l *liar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", strconv.Itoa(len(big)))
	flush := w.(http.Flusher).Flush
	stall := func() { <-r.Context().Done() } // until the client gives up
	switch l.fault {
	case "honest-one":
		if r.Context().Value(connKey{}).(int64) == 1 {
			const chunk = 64 << 10
			for off := 0; off < len(big); off += chunk {
				n, err := w.Write(big[off : off+chunk])
				l.honest.Add(int64(n))
				if err != nil {
					return
				}
				flush()
				time.Sleep(chunk * time.Second / (8 << 20))
			}
			return
		}
		w.Write(make([]byte, len(big)*99/100))
		flush()
		stall()
	case "last-byte":
		b := bytes.Clone(big)
		b[len(b)-1] ^= 1
		w.Write(b)
	case "never-finishes":
		w.Write(big[:len(big)/2])
		flush()
		stall()
	}
}

// serveLiar starts l over h1 (plain), h2 (TLS) or h3 and returns its URL.
func serveLiar(t *testing.T, l *liar, proto string) string {
	t.Helper()
	if proto == "h3" {
		cert := httptest.NewUnstartedServer(nil)
		cert.StartTLS() // only for its certificate
		certs := cert.TLS.Certificates
		cert.Close()
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &http3.Server{Handler: l, TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: certs}),
			ConnContext: func(ctx context.Context, _ *quic.Conn) context.Context { return l.connContext(ctx) }}
		go s.Serve(udp)
		t.Cleanup(func() { s.Close() })
		return "https://" + udp.LocalAddr().String() + "/big.bin"
	}
	s := httptest.NewUnstartedServer(l)
	s.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { return l.connContext(ctx) }
	if proto == "h2" {
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s.URL + "/big.bin"
}

// checkGate is the invariant: an accepted sample holds only verified
// bytes, the totals add up, and nothing counted was unverified.
func checkGate(t *testing.T, r *Report) {
	t.Helper()
	var recv, ver int64
	for i, s := range r.Samples {
		if s.Accepted && s.Bytes != s.Received {
			t.Errorf("sample %d accepted with %d verified of %d received", i+1, s.Bytes, s.Received)
		}
		if s.Bytes > s.Received {
			t.Errorf("sample %d: %d verified > %d received", i+1, s.Bytes, s.Received)
		}
		recv += s.Received
		ver += s.Bytes
	}
	if recv+r.Tail.BytesReceived != r.BytesReceived || ver+r.Tail.BytesVerified != r.Bytes {
		t.Errorf("totals: samples %d/%d + after the end %d/%d != report %d/%d (verified/received)",
			ver, recv, r.Tail.BytesVerified, r.Tail.BytesReceived, r.Bytes, r.BytesReceived)
	}
}

// TestLyingServers: the integrity gate accepts no byte of a response that
// was not verified in full, on every protocol and in open-loop mode: a
// server honest on one connection and stalling with zeros on the others,
// one that lies only in the last byte, and one that never finishes.
func TestLyingServers(t *testing.T) {
	for _, proto := range []string{"h1", "h2", "h3"} {
		for _, tt := range []struct {
			fault string
			rate  float64
		}{{"honest-one", 0}, {"last-byte", 0}, {"never-finishes", 0}, {"never-finishes", 20}} {
			name := proto + "/" + tt.fault
			if tt.rate > 0 {
				name += "/open-loop"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				// The timeout outlasts the measured time, so the lies are
				// still in flight at the end: the run must wait and judge
				// them, not drop them.
				l := &liar{fault: tt.fault}
				d := digestOf(big)
				timeout := 2 * time.Second
				if tt.fault == "last-byte" {
					// Its responses must end (with the wrong last byte) to
					// be judged: on a loaded machine 2 s did not always
					// let one finish.
					timeout = 8 * time.Second
				}
				c := Config{URLs: []string{serveLiar(t, l, proto)}, Protocol: proto, Connections: 4, Duration: time.Second,
					Samples: 2, Timeout: timeout, Rate: tt.rate, Insecure: true,
					ExpectDigest: &d, ExpectSize: int64(len(big)), RangeLast: -1}
				start := time.Now()
				r, err := Run(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				// Not a timing assertion: a run that waits for a stalled
				// response without its timeout would hang here.
				if el := time.Since(start); el > 30*time.Second {
					t.Fatalf("the run took %v: a stalled response held it", el)
				}
				checkGate(t, r)
				if r.Accepted != 0 || r.MiBps.Median != 0 {
					t.Errorf("accepted %d samples (median %.1f MiB/s): %+v", r.Accepted, r.MiBps.Median, r.Samples)
				}
				if r.BytesReceived <= r.Bytes {
					t.Errorf("received %d, verified %d: the lies were not received?", r.BytesReceived, r.Bytes)
				}
				switch tt.fault {
				case "honest-one":
					if r.Bytes > l.honest.Load() {
						t.Errorf("verified %d bytes, but the honest connection sent only %d", r.Bytes, l.honest.Load())
					}
					if r.Errors["timeout"] == 0 {
						t.Errorf("errors %v, want timeout", r.Errors)
					}
				case "last-byte":
					if r.Bytes != 0 || r.Errors["digest"] == 0 {
						t.Errorf("verified %d bytes, errors %v: want 0 and digest", r.Bytes, r.Errors)
					}
				case "never-finishes":
					if r.Bytes != 0 || r.Errors["timeout"] == 0 {
						t.Errorf("verified %d bytes, errors %v: want 0 and timeout", r.Bytes, r.Errors)
					}
				}
			})
		}
	}
}

// TestInFlightAtEndAreJudged: a response still streaming when the
// measured time ends is finished and judged; its bytes count where they
// arrived, after the end in no sample, and the report says so.
func TestInFlightAtEndAreJudged(t *testing.T) {
	r := run(t, Config{URLs: []string{misbehave(t, "slow", 1)}, Connections: 1, Samples: 2, Duration: 1500 * time.Millisecond})
	checkGate(t, r)
	if r.Tail.Responses != 1 || r.Tail.Failed != 0 || r.Tail.BytesVerified == 0 || r.Tail.BytesVerified != r.Tail.BytesReceived {
		t.Fatalf("in flight at the end: %+v", r.Tail)
	}
	// 1.5 s of a 1 MiB response paced over 0.8 s: a response is always
	// streaming at the end, and its bytes before the end are verified.
	if r.Accepted != 2 || r.Bytes != r.BytesReceived {
		t.Errorf("accepted %d, verified %d of %d", r.Accepted, r.Bytes, r.BytesReceived)
	}
	var text bytes.Buffer
	r.WriteText(&text)
	for _, w := range []string{"verified of", "at the end: 1 response(s) in flight were finished and judged (0 failed)"} {
		if !bytes.Contains(text.Bytes(), []byte(w)) {
			t.Errorf("report lacks %q:\n%s", w, text.String())
		}
	}
	// The same response failing after the end rejects the samples it
	// streamed in.
	r = run(t, Config{URLs: []string{misbehave(t, "short", 2)}, Connections: 1, Samples: 2, Duration: 1500 * time.Millisecond})
	checkGate(t, r)
}

// TestErrorsCountResponses: one response that stalls across every sample
// rejects each of them and is one error in the report, not one per sample.
func TestErrorsCountResponses(t *testing.T) {
	d := digestOf(big)
	r, err := Run(context.Background(), Config{URLs: []string{serveLiar(t, &liar{fault: "never-finishes"}, "h1")}, Connections: 1,
		Duration: time.Second, Samples: 4, Timeout: 1500 * time.Millisecond, ExpectDigest: &d, ExpectSize: int64(len(big)), RangeLast: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range r.Samples {
		if s.Rejected["timeout"] != 1 {
			t.Errorf("sample %d rejected for %v, want timeout:1", i+1, s.Rejected)
		}
	}
	if r.Errors["timeout"] != 1 || len(r.Errors) != 1 {
		t.Errorf("errors %v, want timeout:1 (one response)", r.Errors)
	}
}
